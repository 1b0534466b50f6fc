//! The settings table: each setting's flag, variable, default and help, and the
//! `--help` text made from it.

/// The port served when none is set.
pub const DEFAULT_PORT: u16 = 8787;
/// [`DEFAULT_PORT`] as the table's text (a test keeps the two equal).
const DEFAULT_PORT_TEXT: &str = "8787";

/// One setting: its flag, its variable, its default, and what it means. The row is the one
/// source of the default: `--help` shows it and `parse` uses it (issue 17).
pub struct Setting {
    pub flag: &'static str,
    pub env: &'static str,
    pub default: DefaultValue,
    pub help: &'static str,
}

/// A setting's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultValue {
    /// This value, read by the same parser as a given one.
    Value(&'static str),
    /// Nothing: the setting is off or empty unless given.
    Unset,
    /// Worked out at start-up, as this says (a generated token, the XDG folder).
    Described(&'static str),
}

pub const SETTINGS: &[Setting] = &[
    Setting {
        flag: "--host",
        env: "MOBILE_HOST",
        default: DefaultValue::Value("0.0.0.0"),
        help: "listen address",
    },
    Setting {
        flag: "--port",
        env: "MOBILE_PORT",
        default: DefaultValue::Value(DEFAULT_PORT_TEXT),
        help: "listen port; 0 picks a free port and logs it",
    },
    Setting {
        flag: "--token",
        env: "MOBILE_TOKEN",
        default: DefaultValue::Described("generated"),
        help: "the app token; unset: generated once and kept in the state directory",
    },
    Setting {
        flag: "--token-file",
        env: "MOBILE_TOKEN_FILE",
        default: DefaultValue::Unset,
        help: "read the app token from this file (systemd credentials, Docker secrets); every secret has one: --extra-tokens-file, --deliver-tokens-file, --agent-token-file, --ntfy-token-file, MOBILE_AGENT_KEY_FILE",
    },
    Setting {
        flag: "--extra-tokens",
        env: "MOBILE_EXTRA_TOKENS",
        default: DefaultValue::Unset,
        help: "device_id=token,... : tokens bound to one device, both ways",
    },
    Setting {
        flag: "--shared-token",
        env: "MOBILE_SHARED_TOKEN",
        default: DefaultValue::Value("on"),
        help: "off: phones may not use the app token; only devices paired with `hermes-mobile pair` (and MOBILE_EXTRA_TOKENS) get in. Recommended once every phone is paired (docs/security.md)",
    },
    Setting {
        flag: "--allowed-devices",
        env: "MOBILE_ALLOWED_DEVICES",
        default: DefaultValue::Described("all"),
        help: "device ids allowed to connect, comma-separated",
    },
    Setting {
        flag: "--deliver-tokens",
        env: "MOBILE_DELIVER_TOKENS",
        default: DefaultValue::Unset,
        help: "service tokens that may `deliver` (cron, `hermes-mobile send`)",
    },
    Setting {
        flag: "--trust-loopback",
        env: "MOBILE_TRUST_LOOPBACK",
        default: DefaultValue::Value("on"),
        help: "on: a loopback peer with no proxy header may `deliver` without a deliver token; off: only deliver tokens (use off behind ssh -L, stunnel or any TCP forwarder)",
    },
    Setting {
        flag: "--home-device",
        env: "MOBILE_HOME_DEVICE",
        default: DefaultValue::Unset,
        help: "device a `deliver` without target goes to",
    },
    Setting {
        flag: "--avatar-url",
        env: "MOBILE_AVATAR_URL",
        default: DefaultValue::Unset,
        help: "URL sent as ready.avatar_url",
    },
    Setting {
        flag: "--web",
        env: "MOBILE_WEB",
        default: DefaultValue::Value("on"),
        help: "serve the web client at / and /avatar/ (on|off; --no-web is --web off)",
    },
    Setting {
        flag: "--web-dir",
        env: "MOBILE_WEB_DIR",
        default: DefaultValue::Unset,
        help: "for working on the web client: read its files from this folder (a checkout's web/) at start-up instead of the built-in copies",
    },
    Setting {
        flag: "--history",
        env: "MOBILE_HISTORY",
        default: DefaultValue::Value("on"),
        help: "keep the conversation in the journal (<state dir>/journal.sqlite3, SQLite) after it is delivered, for resume and history (on|off); off still keeps held replies, open cards and the dedup window until they are delivered, closed or expired",
    },
    Setting {
        flag: "--history-items",
        env: "MOBILE_HISTORY_ITEMS",
        default: DefaultValue::Value("5000"),
        help: "journal entries kept per device, oldest dropped first (at most 64 devices keep history); a text entry takes about half a KiB, so the defaults keep a busy phone's journal near 2.5 MiB; /healthz shows journal_bytes",
    },
    Setting {
        flag: "--history-days",
        env: "MOBILE_HISTORY_DAYS",
        default: DefaultValue::Value("30"),
        help: "journal entries older than this many days are dropped",
    },
    Setting {
        flag: "--push",
        env: "MOBILE_PUSH",
        default: DefaultValue::Value("on"),
        help: "Web Push for phones that turn notifications on (on|off); nothing is sent until one does (docs/push.md)",
    },
    Setting {
        flag: "--push-subject",
        env: "MOBILE_PUSH_SUBJECT",
        default: DefaultValue::Described("MOBILE_PUBLIC_URL if https, else mailto:hermes-mobile@localhost"),
        help: "VAPID contact the push services see: mailto:you@example.org or an https URL of yours; Apple refuses localhost and .local ones (403)",
    },
    Setting {
        flag: "--push-hosts",
        env: "MOBILE_PUSH_HOSTS",
        default: DefaultValue::Unset,
        help: "more push services to allow, host or host:port (a bare host means port 443), comma-separated; FCM, Mozilla, Apple and Windows are built in",
    },
    Setting {
        flag: "--push-ca-file",
        env: "MOBILE_PUSH_CA_FILE",
        default: DefaultValue::Unset,
        help: "PEM file of extra CA certificates for push services and ntfy (a self-hosted one)",
    },
    Setting {
        flag: "--push-content",
        env: "MOBILE_PUSH_CONTENT",
        default: DefaultValue::Value("preview"),
        help: "what a notification shows: preview (title and the start of the text or command) or none (a generic text)",
    },
    Setting {
        flag: "--notify-actions",
        env: "MOBILE_NOTIFY_ACTIONS",
        default: DefaultValue::Value("safe"),
        help: "buttons on a card's notification: safe (Deny or Cancel only), all (also Approve once, Confirm, a short question's choices; anyone holding the phone may press them) or off",
    },
    Setting {
        flag: "--ntfy-url",
        env: "MOBILE_NTFY_URL",
        default: DefaultValue::Unset,
        help: "also publish notifications to this ntfy topic URL (https://ntfy.example.org/hermes-abc123); works over plain LAN http too",
    },
    Setting {
        flag: "--ntfy-token",
        env: "MOBILE_NTFY_TOKEN",
        default: DefaultValue::Unset,
        help: "ntfy access token (sent as Authorization: Bearer)",
    },
    Setting {
        flag: "--public-url",
        env: "MOBILE_PUBLIC_URL",
        default: DefaultValue::Unset,
        help: "the chat's address as phones open it (https://pi.example.org/): what tapping an ntfy notification opens",
    },
    Setting {
        flag: "--prompt-ttl",
        env: "MOBILE_PROMPT_TTL",
        default: DefaultValue::Value("300"),
        help: "seconds a card lives unless the agent says otherwise",
    },
    Setting {
        flag: "--chunk-limit",
        env: "MOBILE_CHUNK_LIMIT",
        default: DefaultValue::Value("3500"),
        help: "characters per message frame",
    },
    Setting {
        flag: "--state-dir",
        env: "MOBILE_STATE_DIR",
        default: DefaultValue::Described("$XDG_STATE_HOME/hermes-mobile"),
        help: "generated token, received media (media/) and the journal (journal.sqlite3)",
    },
    Setting {
        flag: "--agent",
        env: "MOBILE_AGENT",
        default: DefaultValue::Value("demo"),
        help: "the agent: demo, exec:<command line> (a child speaking docs/agent-protocol.md on stdin/stdout), link[:<socket path>] (agents connect to a Unix socket, default <state dir>/agent.sock), openai:<base URL> (an OpenAI-compatible server), hermes:<base URL> (Hermes' runs API with approvals); docs/http-agents.md",
    },
    Setting {
        flag: "--agent-model",
        env: "MOBILE_AGENT_MODEL",
        default: DefaultValue::Unset,
        help: "openai:/hermes: the model name the server knows (needed for openai:)",
    },
    Setting {
        flag: "",
        env: "MOBILE_AGENT_KEY",
        default: DefaultValue::Unset,
        help: "openai:/hermes: the API key, sent as a Bearer token; from the environment only, never logged or shown",
    },
    Setting {
        flag: "--agent-system",
        env: "MOBILE_AGENT_SYSTEM",
        default: DefaultValue::Unset,
        help: "openai:/hermes: the system prompt; @/path/file reads it from a file",
    },
    Setting {
        flag: "--agent-temperature",
        env: "MOBILE_AGENT_TEMPERATURE",
        default: DefaultValue::Unset,
        help: "openai: the sampling temperature (0 to 2); unset: the server's default",
    },
    Setting {
        flag: "--agent-headers",
        env: "MOBILE_AGENT_HEADERS",
        default: DefaultValue::Unset,
        help: "openai:/hermes: extra headers, 'Name: value' separated by ';' or newlines; {device} and {conversation} are filled in",
    },
    Setting {
        flag: "--agent-vision",
        env: "MOBILE_AGENT_VISION",
        default: DefaultValue::Value("0"),
        help: "openai:/hermes: 1 sends photos to the model as images; 0 as a short note",
    },
    Setting {
        flag: "--agent-media-dirs",
        env: "MOBILE_AGENT_MEDIA_DIRS",
        default: DefaultValue::Unset,
        help: "openai:/hermes: folders whose files a MEDIA:/path tag may send to the phone, comma-separated; empty: none",
    },
    Setting {
        flag: "--agent-ca-file",
        env: "MOBILE_AGENT_CA_FILE",
        default: DefaultValue::Unset,
        help: "https agents: PEM certificates trusted besides the system's (a self-signed home server)",
    },
    Setting {
        flag: "--agent-edit-interval",
        env: "MOBILE_AGENT_EDIT_INTERVAL",
        default: DefaultValue::Value("0.3"),
        help: "openai:/hermes: seconds between two edits of a streamed reply",
    },
    Setting {
        flag: "--agent-history",
        env: "MOBILE_AGENT_HISTORY",
        default: DefaultValue::Value("24000,40"),
        help: "openai:/hermes: a conversation's bound in characters,messages (oldest dropped first)",
    },
    Setting {
        flag: "--agent-approval-ttl",
        env: "MOBILE_AGENT_APPROVAL_TTL",
        default: DefaultValue::Value("300"),
        help: "hermes: seconds an approval card lives (Hermes' approvals.timeout); unanswered means deny",
    },
    Setting {
        flag: "--agent-concurrency",
        env: "MOBILE_AGENT_CONCURRENCY",
        default: DefaultValue::Value("4"),
        help: "openai:/hermes: turns talking to the backend at once; more wait",
    },
    Setting {
        flag: "--agent-timeouts",
        env: "MOBILE_AGENT_TIMEOUTS",
        default: DefaultValue::Value("10,120,120"),
        help: "openai:/hermes: seconds for connect, first byte, and idle between events (keepalives count)",
    },
    Setting {
        flag: "--agent-token",
        env: "MOBILE_AGENT_TOKEN",
        default: DefaultValue::Unset,
        help: "with --agent link: also accept an agent on the WebSocket route /agent with this token (16+ characters, not the app token)",
    },
    Setting {
        flag: "--max-connections",
        env: "MOBILE_MAX_CONNECTIONS",
        default: DefaultValue::Value("1024"),
        help: "sockets held at most; a quarter for those not yet past hello (16 per address), the oldest of which make room for new ones; past it, 503",
    },
    Setting {
        flag: "--memory-budget",
        env: "MOBILE_MEMORY_BUDGET",
        default: DefaultValue::Value("128"),
        help: "MiB for frames queued to clients (1/2), output held for offline phones (1/4), and messages read in part with unfinished uploads (1/4)",
    },
    Setting {
        flag: "--log-level",
        env: "RUST_LOG",
        default: DefaultValue::Value("info"),
        help: "error, warn, info, debug, trace, or module=level (hermes_mobile=debug)",
    },
    Setting {
        flag: "--hello-timeout",
        env: "MOBILE_HELLO_TIMEOUT",
        default: DefaultValue::Value("15"),
        help: "seconds from accept to hello (tests shorten it)",
    },
    Setting {
        flag: "--typing-idle",
        env: "MOBILE_TYPING_IDLE",
        default: DefaultValue::Value("3"),
        help: "seconds from the last agent frame to avatar idle",
    },
    Setting {
        flag: "--keepalive",
        env: "MOBILE_KEEPALIVE",
        default: DefaultValue::Value("30"),
        help: "seconds of quiet before a WebSocket ping; silent for 3x this closes (1001)",
    },
    Setting {
        flag: "--demo-step",
        env: "MOBILE_DEMO_STEP",
        default: DefaultValue::Value("0.15"),
        help: "seconds between the demo agent's /stream words",
    },
];

/// The default a setting's row gives, when it gives a value.
pub fn default_of(flag: &str) -> Option<&'static str> {
    SETTINGS.iter().find(|s| s.flag == flag).and_then(|s| match s.default {
        DefaultValue::Value(v) => Some(v),
        DefaultValue::Unset | DefaultValue::Described(_) => None,
    })
}

/// The text of `hermes-mobile --help`.
pub fn help() -> String {
    let usage = String::from(concat!(
        "hermes-mobile ",
        env!("CARGO_PKG_VERSION"),
        ": a Protocol v1 gateway between a phone app and your AI agent\n\n",
        "USAGE:\n",
        "  hermes-mobile [serve] [OPTIONS]    serve ws://HOST:PORT/ws (default: {host}:{port}) with the agent of --agent\n",
        "  hermes-mobile send --to mobile:ID (--text TEXT | --file PATH) [--kind KIND] [--url URL] [--token-file PATH] [--id ID]\n",
        "                                     deliver a message to a phone, as cron would (`hermes-mobile send --help`)\n",
        "  hermes-mobile token [--state-dir DIR] [--env-file PATH]\n",
        "                                     print the shared app token in use (for your own apps and SDKs)\n",
        "  hermes-mobile pair [--ttl SECONDS] [--owner] [--state-dir DIR] [--env-file PATH]\n",
        "                                     make a pairing code: print the chat's pairing link and QR code (one device, once, 10 min)\n",
        "  hermes-mobile devices [--json] | devices revoke ID [--forget] [--state-dir DIR] [--env-file PATH]\n",
        "                                     list paired devices, or cut one off at once (docs/security.md)\n",
        "  hermes-mobile history --device ID [--json] [--state-dir DIR] [--env-file PATH]\n",
        "                                     print a device's journal (read-only, safe while the gateway runs)\n",
        "  hermes-mobile hermes install [--hermes-home DIR] [--socket PATH]\n",
        "                                     install the Hermes plugin `mobile` and print its config (docs/hermes.md)\n",
        "  hermes-mobile --help | --version\n\n",
        "OPTIONS (each also read from its environment variable; a flag wins):\n",
    ));
    let host = default_of("--host").unwrap_or_default();
    let mut out = usage
        .replace("{host}", host)
        .replace("{port}", &DEFAULT_PORT.to_string());
    for s in SETTINGS {
        let flag = if s.flag.is_empty() {
            "(environment only)".to_owned()
        } else {
            format!("{} V", s.flag)
        };
        let default = match s.default {
            DefaultValue::Value(v) | DefaultValue::Described(v) => v,
            DefaultValue::Unset => "unset",
        };
        out.push_str(&format!(
            "  {:<20} {:<24} {} [default: {}]\n",
            flag, s.env, s.help, default
        ));
    }
    out.push_str(concat!(
        "\nROUTES:\n",
        "  GET /ws        WebSocket, Protocol v1 (the token goes in the hello frame, never in the URL)\n",
        "  GET /healthz   200 with {status, version, connections, devices_online, sockets, agent, ...}\n",
        "  GET /agent     WebSocket for a remote agent (docs/agent-protocol.md); only with --agent link and --agent-token\n",
        "  POST /card-answer  a notification's button answers a card with its single-use token (docs/push.md)\n",
        "  POST /pair     trade a pairing code (`hermes-mobile pair`) for a device token (docs/security.md)\n\n",
        "AGENTS (docs/agent-protocol.md): `demo` is built in. `exec:python3 my_agent.py` runs a child that\n",
        "speaks JSON lines on stdin/stdout, restarted if it exits. `link` lets agents connect to a Unix socket\n",
        "(Hermes' `mobile` plugin does); while none is connected, phones' messages wait, bounded.\n\n",
        "`token`, `pair`, `devices` and `send` also read the service's settings from /etc/hermes-mobile/hermes-mobile.env\n",
        "when it exists (the environment wins; --env-file PATH names another, --env-file '' none).\n\n",
        "Behind a reverse proxy (wss://), keep the proxy adding X-Forwarded-For (or X-Real-IP, Forwarded,\n",
        "Via): loopback peers that carry one may not `deliver` without a deliver token.\n",
        "Tokens are at least 16 characters. Secrets given as flags are visible to every local user:\n",
        "prefer the *_FILE variables, the --*-file flags or the env file.\n",
    ));
    out
}
