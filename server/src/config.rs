//! Settings from the environment and the command line (decisions C1–C3). A flag overrides
//! its variable. Bad settings stop start-up with one clear line.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use hermes_mobile::Config;

/// One setting: its flag, its variable, its default as shown, and what it means.
pub struct Setting {
    pub flag: &'static str,
    pub env: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

pub const SETTINGS: &[Setting] = &[
    Setting {
        flag: "--host",
        env: "MOBILE_HOST",
        default: "0.0.0.0",
        help: "listen address",
    },
    Setting {
        flag: "--port",
        env: "MOBILE_PORT",
        default: "8787",
        help: "listen port; 0 picks a free port and logs it",
    },
    Setting {
        flag: "--token",
        env: "MOBILE_TOKEN",
        default: "generated",
        help: "the app token; unset: generated once and kept in the state directory",
    },
    Setting {
        flag: "--extra-tokens",
        env: "MOBILE_EXTRA_TOKENS",
        default: "",
        help: "device_id=token,... : tokens bound to one device, both ways",
    },
    Setting {
        flag: "--allowed-devices",
        env: "MOBILE_ALLOWED_DEVICES",
        default: "all",
        help: "device ids allowed to connect, comma-separated",
    },
    Setting {
        flag: "--deliver-tokens",
        env: "MOBILE_DELIVER_TOKENS",
        default: "",
        help: "service tokens that may `deliver` (cron, `hermes-mobile send`)",
    },
    Setting {
        flag: "--home-device",
        env: "MOBILE_HOME_DEVICE",
        default: "",
        help: "device a `deliver` without target goes to",
    },
    Setting {
        flag: "--avatar-url",
        env: "MOBILE_AVATAR_URL",
        default: "",
        help: "URL sent as ready.avatar_url",
    },
    Setting {
        flag: "--web",
        env: "MOBILE_WEB",
        default: "on",
        help: "serve the web client at / and /avatar/ (on|off; --no-web is --web off)",
    },
    Setting {
        flag: "--web-dir",
        env: "MOBILE_WEB_DIR",
        default: "",
        help: "for working on the web client: read its files from this folder (a checkout's web/) at start-up instead of the built-in copies",
    },
    Setting {
        flag: "--prompt-ttl",
        env: "MOBILE_PROMPT_TTL",
        default: "300",
        help: "seconds a card lives unless the agent says otherwise",
    },
    Setting {
        flag: "--chunk-limit",
        env: "MOBILE_CHUNK_LIMIT",
        default: "3500",
        help: "characters per message frame",
    },
    Setting {
        flag: "--state-dir",
        env: "MOBILE_STATE_DIR",
        default: "$XDG_STATE_HOME/hermes-mobile",
        help: "generated token and received media (media/)",
    },
    Setting {
        flag: "--agent",
        env: "MOBILE_AGENT",
        default: "demo",
        help: "the agent: demo, exec:<command line> (a child speaking docs/agent-protocol.md on stdin/stdout), link[:<socket path>] (agents connect to a Unix socket, default <state dir>/agent.sock), openai:<base URL> (an OpenAI-compatible server), hermes:<base URL> (Hermes' runs API with approvals); docs/http-agents.md",
    },
    Setting {
        flag: "--agent-model",
        env: "MOBILE_AGENT_MODEL",
        default: "",
        help: "openai:/hermes: the model name the server knows (needed for openai:)",
    },
    Setting {
        flag: "",
        env: "MOBILE_AGENT_KEY",
        default: "",
        help: "openai:/hermes: the API key, sent as a Bearer token; from the environment only, never logged or shown",
    },
    Setting {
        flag: "--agent-system",
        env: "MOBILE_AGENT_SYSTEM",
        default: "",
        help: "openai:/hermes: the system prompt; @/path/file reads it from a file",
    },
    Setting {
        flag: "--agent-temperature",
        env: "MOBILE_AGENT_TEMPERATURE",
        default: "",
        help: "openai: the sampling temperature (0 to 2); unset: the server's default",
    },
    Setting {
        flag: "--agent-headers",
        env: "MOBILE_AGENT_HEADERS",
        default: "",
        help: "openai:/hermes: extra headers, 'Name: value' separated by ';' or newlines; {device} and {conversation} are filled in",
    },
    Setting {
        flag: "--agent-vision",
        env: "MOBILE_AGENT_VISION",
        default: "0",
        help: "openai:/hermes: 1 sends photos to the model as images; 0 as a short note",
    },
    Setting {
        flag: "--agent-media-dirs",
        env: "MOBILE_AGENT_MEDIA_DIRS",
        default: "",
        help: "openai:/hermes: folders whose files a MEDIA:/path tag may send to the phone, comma-separated; empty: none",
    },
    Setting {
        flag: "--agent-ca-file",
        env: "MOBILE_AGENT_CA_FILE",
        default: "",
        help: "https agents: PEM certificates trusted besides the system's (a self-signed home server)",
    },
    Setting {
        flag: "--agent-edit-interval",
        env: "MOBILE_AGENT_EDIT_INTERVAL",
        default: "0.3",
        help: "openai:/hermes: seconds between two edits of a streamed reply",
    },
    Setting {
        flag: "--agent-history",
        env: "MOBILE_AGENT_HISTORY",
        default: "24000,40",
        help: "openai:/hermes: a conversation's bound in characters,messages (oldest dropped first)",
    },
    Setting {
        flag: "--agent-approval-ttl",
        env: "MOBILE_AGENT_APPROVAL_TTL",
        default: "300",
        help: "hermes: seconds an approval card lives (Hermes' approvals.timeout); unanswered means deny",
    },
    Setting {
        flag: "--agent-concurrency",
        env: "MOBILE_AGENT_CONCURRENCY",
        default: "4",
        help: "openai:/hermes: turns talking to the backend at once; more wait",
    },
    Setting {
        flag: "--agent-timeouts",
        env: "MOBILE_AGENT_TIMEOUTS",
        default: "10,120,120",
        help: "openai:/hermes: seconds for connect, first byte, and idle between events (keepalives count)",
    },
    Setting {
        flag: "--agent-token",
        env: "MOBILE_AGENT_TOKEN",
        default: "",
        help: "with --agent link: also accept an agent on the WebSocket route /agent with this token (16+ characters, not the app token)",
    },
    Setting {
        flag: "--max-connections",
        env: "MOBILE_MAX_CONNECTIONS",
        default: "1024",
        help: "connections beyond this are refused with 503",
    },
    Setting {
        flag: "--memory-budget",
        env: "MOBILE_MEMORY_BUDGET",
        default: "128",
        help: "MiB for frames queued to clients (1/2), output held for offline phones (1/4) and upload room (1/8)",
    },
    Setting {
        flag: "--log-level",
        env: "RUST_LOG",
        default: "info",
        help: "error, warn, info, debug, trace, or module=level (hermes_mobile=debug)",
    },
    Setting {
        flag: "--hello-timeout",
        env: "MOBILE_HELLO_TIMEOUT",
        default: "15",
        help: "seconds from accept to hello (tests shorten it)",
    },
    Setting {
        flag: "--typing-idle",
        env: "MOBILE_TYPING_IDLE",
        default: "3",
        help: "seconds from the last agent frame to avatar idle",
    },
    Setting {
        flag: "--keepalive",
        env: "MOBILE_KEEPALIVE",
        default: "30",
        help: "seconds of quiet before a WebSocket ping; silent for 3x this closes (1001)",
    },
    Setting {
        flag: "--demo-step",
        env: "MOBILE_DEMO_STEP",
        default: "0.15",
        help: "seconds between the demo agent's /stream words",
    },
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentKind {
    Demo,
    /// A child process running this command line (through `/bin/sh -c`).
    Exec(String),
    /// Agents connect to this Unix socket (`None`: `<state dir>/agent.sock`).
    Link(Option<PathBuf>),
    /// `openai:` or `hermes:`; its settings are [`ServerConfig::http`]. `label` is for the
    /// start-up line (the URL, no key).
    Http {
        label: String,
    },
}

/// An HTTP agent's settings (`openai:`, `hermes:`).
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub agent: crate::agent::http::HttpSettings,
    pub timeouts: crate::http_client::Timeouts,
    pub ca_file: Option<PathBuf>,
}

/// Everything the server needs. `core.token` is empty until the state directory is read.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub core: Config,
    pub host: String,
    pub port: u16,
    pub token_given: bool,
    pub state_dir: PathBuf,
    pub agent: AgentKind,
    /// The `/agent` route's token (link mode only); never logged.
    pub agent_token: Option<String>,
    pub max_connections: usize,
    pub log_level: log::LevelFilter,
    /// Parts of `RUST_LOG` that were not understood, to be logged once the logger is up.
    pub log_warning: Option<String>,
    pub keepalive: Duration,
    pub demo_step: Duration,
    /// Frames queued for one slow client beyond which it is dropped.
    pub max_queue_bytes: usize,
    /// Frames queued for all clients together (half the memory budget, L36).
    pub max_outbox_total: usize,
    /// The web client's files; `None` with `MOBILE_WEB=off` (issue 10).
    pub web: Option<crate::web::Web>,
    /// `MOBILE_WEB_DIR`, when the files were read from there.
    pub web_dir: Option<String>,
    pub http: Option<HttpConfig>,
}

/// `demo`, `exec:<command line>`, `link` or `link:<socket path>`.
fn agent_kind(value: &str) -> Result<AgentKind, String> {
    let value = value.trim();
    if value.is_empty() || value == "demo" {
        return Ok(AgentKind::Demo);
    }
    if let Some(command) = value.strip_prefix("exec:") {
        if command.trim().is_empty() {
            return Err("MOBILE_AGENT=exec: needs a command line, e.g. exec:python3 my_agent.py".into());
        }
        return Ok(AgentKind::Exec(command.trim().to_owned()));
    }
    if value == "link" {
        return Ok(AgentKind::Link(None));
    }
    if let Some(path) = value.strip_prefix("link:") {
        if path.trim().is_empty() {
            return Ok(AgentKind::Link(None));
        }
        return Ok(AgentKind::Link(Some(PathBuf::from(path.trim()))));
    }
    for scheme in ["openai:", "hermes:"] {
        if let Some(url) = value.strip_prefix(scheme) {
            return Ok(AgentKind::Http {
                label: format!("{scheme}{}", url.trim()),
            });
        }
    }
    Err(format!(
        "unknown agent {value:?}: use demo, exec:<command line>, link[:<socket path>], openai:<URL> or hermes:<URL>"
    ))
}

fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect()
}

fn seconds(name: &str, s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("{name} must be a positive number of seconds, got {s:?}")),
    }
}

fn number<T: std::str::FromStr>(name: &str, s: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{name} must be a number, got {s:?}"))
}

fn level(s: &str) -> Option<log::LevelFilter> {
    match s.trim().to_ascii_lowercase().as_str() {
        "off" => Some(log::LevelFilter::Off),
        "error" => Some(log::LevelFilter::Error),
        "warn" => Some(log::LevelFilter::Warn),
        "info" => Some(log::LevelFilter::Info),
        "debug" => Some(log::LevelFilter::Debug),
        "trace" => Some(log::LevelFilter::Trace),
        _ => None,
    }
}

/// `RUST_LOG` in the usual syntax: `info`, `hermes_mobile=debug`, `warn,hermes_mobile=trace`.
/// An entry for one of this program's modules (`hermes_mobile…`) wins over a bare level;
/// entries for other crates are ignored (this binary logs only its own), and anything not
/// understood is reported, never a reason to refuse to start (issue 8 #18).
fn log_level(spec: &str) -> (log::LevelFilter, Option<String>) {
    let (mut bare, mut ours, mut unknown) = (None, None, Vec::new());
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.split_once('=') {
            None => match level(entry) {
                Some(l) => bare = Some(l),
                None => unknown.push(entry),
            },
            Some((module, l)) => match level(l) {
                Some(l) if module.trim().starts_with("hermes_mobile") => ours = Some(l),
                Some(_) => {}
                None => unknown.push(entry),
            },
        }
    }
    let warning = (!unknown.is_empty()).then(|| {
        format!(
            "RUST_LOG: ignored {:?} (use error, warn, info, debug, trace or module=level)",
            unknown.join(",")
        )
    });
    (ours.or(bare).unwrap_or(log::LevelFilter::Info), warning)
}

/// The default state directory: `$XDG_STATE_HOME/hermes-mobile`, else
/// `~/.local/state/hermes-mobile`, else `./hermes-mobile-state`.
pub fn default_state_dir(env: &HashMap<String, String>) -> PathBuf {
    if let Some(x) = env.get("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("hermes-mobile");
    }
    if let Some(home) = env.get("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home).join(".local/state/hermes-mobile");
    }
    PathBuf::from("hermes-mobile-state")
}

/// Reads settings from `env` and `args` (flags only: the subcommand is already taken off).
pub fn parse(env: &HashMap<String, String>, args: &[String]) -> Result<ServerConfig, String> {
    let mut values: HashMap<&'static str, String> = HashMap::new();
    for s in SETTINGS.iter().filter(|s| !s.flag.is_empty()) {
        if let Some(v) = env.get(s.env) {
            values.insert(s.flag, v.clone());
        }
    }
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg == "--no-web" {
            values.insert("--web", "off".into());
            i += 1;
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_owned())),
            None => (arg.as_str(), None),
        };
        let Some(setting) = SETTINGS.iter().find(|s| !s.flag.is_empty() && s.flag == flag) else {
            return Err(format!("unknown option {flag:?} (see --help)"));
        };
        let value = match inline {
            Some(v) => v,
            None => {
                i += 1;
                args.get(i).cloned().ok_or_else(|| format!("{flag} needs a value"))?
            }
        };
        values.insert(setting.flag, value);
        i += 1;
    }
    let get = |flag: &str| values.get(flag).map(String::as_str);

    let token = get("--token").unwrap_or("").trim().to_owned();
    let mut core = Config::new(token.clone());
    for entry in list(get("--extra-tokens").unwrap_or("")) {
        match entry.split_once('=') {
            Some((dev, tok)) if !dev.trim().is_empty() && !tok.trim().is_empty() => {
                core.extra_tokens.push((dev.trim().to_owned(), tok.trim().to_owned()))
            }
            // The entry is not echoed: it may be a token (C2, "never a token in a log").
            _ => return Err("MOBILE_EXTRA_TOKENS entries must look like device_id=token".into()),
        }
    }
    core.allowed_devices = list(get("--allowed-devices").unwrap_or(""));
    core.deliver_tokens = list(get("--deliver-tokens").unwrap_or(""));
    core.home_device = get("--home-device")
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_owned);
    core.avatar_url = get("--avatar-url").unwrap_or("").trim().to_owned();
    if let Some(v) = get("--prompt-ttl") {
        core.prompt_ttl = seconds("MOBILE_PROMPT_TTL", v)?;
    }
    if let Some(v) = get("--chunk-limit") {
        core.chunk_limit = number("MOBILE_CHUNK_LIMIT", v)?;
        if core.chunk_limit == 0 {
            return Err("MOBILE_CHUNK_LIMIT must be at least 1".into());
        }
    }
    if let Some(v) = get("--hello-timeout") {
        core.hello_timeout = seconds("MOBILE_HELLO_TIMEOUT", v)?;
    }
    if let Some(v) = get("--typing-idle") {
        core.typing_idle = seconds("MOBILE_TYPING_IDLE", v)?;
    }
    let agent = agent_kind(get("--agent").unwrap_or("demo"))?;
    let agent_token = get("--agent-token")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    if let Some(t) = &agent_token {
        if !matches!(agent, AgentKind::Link(_)) {
            return Err("MOBILE_AGENT_TOKEN opens /agent, which needs MOBILE_AGENT=link".into());
        }
        if t.chars().count() < 16 {
            return Err("MOBILE_AGENT_TOKEN must be at least 16 characters".into());
        }
    }
    let (log_level, log_warning) = log_level(get("--log-level").unwrap_or(""));
    // L36: one setting for the memory the gateway may hold for peers, split by share.
    let budget_mib = match get("--memory-budget") {
        Some(v) => number::<usize>("MOBILE_MEMORY_BUDGET", v)?,
        None => 128,
    };
    if !(16..=2048).contains(&budget_mib) {
        return Err(format!(
            "MOBILE_MEMORY_BUDGET must be 16 to 2048 (MiB), got {budget_mib}"
        ));
    }
    let budget = budget_mib * 1024 * 1024;
    core.max_held_total = budget / 4;
    core.max_upload_speculation = budget / 8;
    let port = match get("--port") {
        Some(p) => number::<u16>("MOBILE_PORT", p)?,
        None => 8787,
    };
    let max_connections = match get("--max-connections") {
        Some(v) => number::<usize>("MOBILE_MAX_CONNECTIONS", v)?.max(1),
        None => 1024,
    };
    let web = match get("--web").map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "on" | "1" | "true" | "yes") => Some(match get("--web-dir").map(str::trim) {
            Some(dir) if !dir.is_empty() => crate::web::Web::from_dir(std::path::Path::new(dir))?,
            _ => crate::web::Web::embedded(),
        }),
        Some("off" | "0" | "false" | "no") => None,
        Some(other) => return Err(format!("MOBILE_WEB must be on or off, got {other:?}")),
    };
    let state_dir = get("--state-dir")
        .map(PathBuf::from)
        .unwrap_or_else(|| default_state_dir(env));
    let web_dir = get("--web-dir")
        .map(str::trim)
        .filter(|d| !d.is_empty() && web.is_some())
        .map(str::to_owned);
    let http = match &agent {
        AgentKind::Http { label } => Some(http_config(label, &values, env, &state_dir)?),
        _ => None,
    };
    Ok(ServerConfig {
        http,
        web,
        web_dir,
        core,
        host: get("--host").unwrap_or("0.0.0.0").trim().to_owned(),
        port,
        token_given: !token.is_empty(),
        state_dir,
        agent,
        agent_token,
        max_connections,
        log_level,
        log_warning,
        keepalive: match get("--keepalive") {
            Some(v) => seconds("MOBILE_KEEPALIVE", v)?,
            None => Duration::from_secs(30),
        },
        demo_step: match get("--demo-step") {
            Some(v) => seconds("MOBILE_DEMO_STEP", v)?,
            None => Duration::from_millis(150),
        },
        max_queue_bytes: 24 * 1024 * 1024,
        max_outbox_total: budget / 2,
    })
}

/// The settings of `openai:<URL>` / `hermes:<URL>`. No message here quotes the key.
fn http_config(
    label: &str,
    values: &HashMap<&'static str, String>,
    env: &HashMap<String, String>,
    state_dir: &std::path::Path,
) -> Result<HttpConfig, String> {
    let get = |flag: &str| values.get(flag).map(String::as_str);
    use crate::agent::http::{Backend, HttpSettings};
    let (backend, url) = match label.split_once(':') {
        Some(("openai", url)) => (Backend::OpenAi, url),
        Some((_, url)) => (Backend::Hermes, url),
        None => return Err("MOBILE_AGENT needs openai:<URL> or hermes:<URL>".into()),
    };
    let endpoint = hermes_mobile::upstream::Endpoint::parse(url).map_err(|e| format!("MOBILE_AGENT URL: {e}"))?;
    let model = get("--agent-model").unwrap_or("").trim().to_owned();
    if backend == Backend::OpenAi && model.is_empty() {
        return Err(
            "MOBILE_AGENT=openai: needs MOBILE_AGENT_MODEL, the model name the server knows (e.g. llama3.2 for Ollama)"
                .into(),
        );
    }
    let key = env
        .get("MOBILE_AGENT_KEY")
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty());
    if key
        .as_deref()
        .is_some_and(|k| !hermes_mobile::upstream::openai::header_safe(k) || k.contains(' '))
    {
        return Err("MOBILE_AGENT_KEY holds a space or a line break".into());
    }
    let system = match get("--agent-system").map(str::trim).filter(|s| !s.is_empty()) {
        Some(at) if at.starts_with('@') => {
            let path = &at[1..];
            let text = std::fs::read_to_string(path).map_err(|e| format!("MOBILE_AGENT_SYSTEM file {path}: {e}"))?;
            Some(text.trim().to_owned()).filter(|t| !t.is_empty())
        }
        other => other.map(str::to_owned),
    };
    let temperature = match get("--agent-temperature").map(str::trim).filter(|t| !t.is_empty()) {
        Some(t) => match t.parse::<f64>() {
            Ok(v) if (0.0..=2.0).contains(&v) => Some(v),
            _ => return Err(format!("MOBILE_AGENT_TEMPERATURE must be 0 to 2, got {t:?}")),
        },
        None => None,
    };
    let mut headers = Vec::new();
    for entry in get("--agent-headers").unwrap_or("").split([';', '\n']) {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let Some((name, value)) = entry.split_once(':') else {
            return Err(format!(
                "MOBILE_AGENT_HEADERS entries look like 'Name: value', got {entry:?}"
            ));
        };
        let name = name.trim();
        if !hermes_mobile::upstream::openai::header_name_ok(name) {
            return Err(format!("MOBILE_AGENT_HEADERS: {name:?} is not a header name"));
        }
        if name.eq_ignore_ascii_case("authorization") || name.eq_ignore_ascii_case("host") {
            return Err(format!(
                "MOBILE_AGENT_HEADERS: {name} is set by the gateway (the key goes in MOBILE_AGENT_KEY)"
            ));
        }
        if !hermes_mobile::upstream::openai::header_safe(value) {
            return Err(format!(
                "MOBILE_AGENT_HEADERS: the value of {name} holds a control character"
            ));
        }
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    let flag = |name: &str, v: Option<&str>| -> Result<bool, String> {
        match v.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("" | "0" | "off" | "false" | "no") => Ok(false),
            Some("1" | "on" | "true" | "yes") => Ok(true),
            Some(other) => Err(format!("{name} must be 0 or 1, got {other:?}")),
        }
    };
    let vision = flag("MOBILE_AGENT_VISION", get("--agent-vision"))?;
    let media_dirs = list(get("--agent-media-dirs").unwrap_or(""));
    for dir in &media_dirs {
        if !dir.starts_with('/') {
            return Err(format!(
                "MOBILE_AGENT_MEDIA_DIRS entries must be absolute paths, got {dir:?}"
            ));
        }
    }
    let edit_interval = match get("--agent-edit-interval") {
        Some(v) => seconds("MOBILE_AGENT_EDIT_INTERVAL", v)?,
        None => hermes_mobile::upstream::DEFAULT_EDIT_INTERVAL,
    };
    let (history_chars, history_turns) = match get("--agent-history").map(str::trim).filter(|v| !v.is_empty()) {
        Some(v) => {
            let parts: Vec<&str> = v.split(',').map(str::trim).collect();
            match parts.as_slice() {
                [c, t] => (
                    number("MOBILE_AGENT_HISTORY characters", c)?,
                    number("MOBILE_AGENT_HISTORY messages", t)?,
                ),
                _ => {
                    return Err(format!(
                        "MOBILE_AGENT_HISTORY is characters,messages (e.g. 24000,40), got {v:?}"
                    ))
                }
            }
        }
        None => (24_000, 40),
    };
    // The saved file must stay under what is read back (4 MiB; 6 bytes a character at most).
    if !(100..=500_000).contains(&history_chars) || !(2..=1000).contains(&history_turns) {
        return Err(format!(
            "MOBILE_AGENT_HISTORY is 100 to 500000 characters and 2 to 1000 messages, got {history_chars},{history_turns}"
        ));
    }
    let approval_ttl = match get("--agent-approval-ttl") {
        Some(v) => seconds("MOBILE_AGENT_APPROVAL_TTL", v)?.as_secs().max(1),
        None => 300,
    };
    let concurrency = match get("--agent-concurrency") {
        Some(v) => number::<usize>("MOBILE_AGENT_CONCURRENCY", v)?.clamp(1, 32),
        None => 4,
    };
    let timeouts = match get("--agent-timeouts").map(str::trim).filter(|v| !v.is_empty()) {
        Some(v) => {
            let parts: Vec<&str> = v.split(',').collect();
            let [c, f, i] = parts.as_slice() else {
                return Err(format!(
                    "MOBILE_AGENT_TIMEOUTS is connect,first byte,idle in seconds (e.g. 10,120,120), got {v:?}"
                ));
            };
            crate::http_client::Timeouts {
                connect: seconds("MOBILE_AGENT_TIMEOUTS connect", c)?,
                first_byte: seconds("MOBILE_AGENT_TIMEOUTS first byte", f)?,
                idle: seconds("MOBILE_AGENT_TIMEOUTS idle", i)?,
            }
        }
        None => crate::http_client::Timeouts {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(120),
            idle: Duration::from_secs(120),
        },
    };
    let ca_file = get("--agent-ca-file")
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    Ok(HttpConfig {
        agent: HttpSettings {
            backend,
            endpoint,
            model,
            key,
            system,
            temperature,
            headers,
            vision,
            media_dirs,
            edit_interval,
            history_chars,
            history_turns,
            approval_ttl,
            concurrency,
            history_dir: state_dir.join("conversations"),
        },
        timeouts,
        ca_file,
    })
}

/// The text of `hermes-mobile --help`.
pub fn help() -> String {
    let mut out = String::from(concat!(
        "hermes-mobile ",
        env!("CARGO_PKG_VERSION"),
        ": a Protocol v1 gateway between a phone app and your AI agent\n\n",
        "USAGE:\n",
        "  hermes-mobile [serve] [OPTIONS]    serve ws://HOST:PORT/ws (default: 0.0.0.0:8787) with the agent of --agent\n",
        "  hermes-mobile send --to mobile:ID (--text TEXT | --file PATH) [--kind KIND] [--url URL] [--token TOKEN] [--id ID]\n",
        "                                     deliver a message to a phone, as cron would (`hermes-mobile send --help`)\n",
        "  hermes-mobile token [--state-dir DIR] [--env-file PATH]\n",
        "                                     print the app token in use, for pairing a phone\n",
        "  hermes-mobile pair [--state-dir DIR] [--env-file PATH]\n",
        "                                     print where to open the web chat, its pairing link and a QR code\n",
        "  hermes-mobile hermes install [--hermes-home DIR] [--socket PATH]\n",
        "                                     install the Hermes plugin `mobile` and print its config (docs/hermes.md)\n",
        "  hermes-mobile --help | --version\n\n",
        "OPTIONS (each also read from its environment variable; a flag wins):\n",
    ));
    for s in SETTINGS {
        let flag = if s.flag.is_empty() {
            "(environment only)".to_owned()
        } else {
            format!("{} V", s.flag)
        };
        let default = if s.default.is_empty() {
            "unset".to_owned()
        } else {
            s.default.to_owned()
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
        "  GET /agent     WebSocket for a remote agent (docs/agent-protocol.md); only with --agent link and --agent-token\n\n",
        "AGENTS (docs/agent-protocol.md): `demo` is built in. `exec:python3 my_agent.py` runs a child that\n",
        "speaks JSON lines on stdin/stdout, restarted if it exits. `link` lets agents connect to a Unix socket\n",
        "(Hermes' `mobile` plugin does); while none is connected, phones' messages wait, bounded.\n\n",
        "`token` and `send` also read the service's settings from /etc/hermes-mobile/hermes-mobile.env\n",
        "when it exists (the environment wins; --env-file PATH names another, --env-file '' none).\n\n",
        "Behind a reverse proxy (wss://), keep the proxy adding X-Forwarded-For: loopback peers that\n",
        "carry it may not `deliver` without a deliver token.\n",
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn flags_override_the_environment() {
        let c = parse(
            &env(&[("MOBILE_PORT", "9000"), ("MOBILE_TOKEN", "t")]),
            &["--port".into(), "9001".into()],
        )
        .unwrap();
        assert_eq!(c.port, 9001);
        assert_eq!(c.core.token, "t");
        let c = parse(&env(&[]), &["--port=0".into()]).unwrap();
        assert_eq!(c.port, 0);
    }

    #[test]
    fn lists_are_trimmed_and_empty_entries_skipped() {
        // decisions C2
        let c = parse(
            &env(&[
                ("MOBILE_ALLOWED_DEVICES", " tel-1, ,tel-2,"),
                ("MOBILE_EXTRA_TOKENS", "tel-1 = abc ,"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(c.core.allowed_devices, ["tel-1", "tel-2"]);
        assert_eq!(c.core.extra_tokens, [("tel-1".to_owned(), "abc".to_owned())]);
    }

    #[test]
    fn extra_token_without_equals_stops_start_up_without_echoing_it() {
        // decisions C2
        let err = parse(&env(&[("MOBILE_EXTRA_TOKENS", "s3cret-token")]), &[]).unwrap_err();
        assert!(err.contains("device_id=token"));
        assert!(!err.contains("s3cret"));
    }

    #[test]
    fn bad_numbers_are_clear_errors() {
        assert!(parse(&env(&[("MOBILE_PORT", "80a")]), &[])
            .unwrap_err()
            .contains("MOBILE_PORT"));
        assert!(parse(&env(&[]), &["--port".into(), "70000".into()]).is_err());
        assert!(parse(&env(&[]), &["--bogus".into()]).unwrap_err().contains("--bogus"));
        assert!(parse(&env(&[("MOBILE_PROMPT_TTL", "-1")]), &[]).is_err());
    }

    #[test]
    fn rust_log_takes_the_usual_module_syntax_and_never_stops_start_up() {
        use log::LevelFilter::*;
        assert_eq!(log_level(""), (Info, None));
        assert_eq!(log_level("DEBUG"), (Debug, None));
        assert_eq!(log_level("hermes_mobile=debug"), (Debug, None));
        assert_eq!(log_level("warn,hermes_mobile=trace,mio=debug"), (Trace, None));
        assert_eq!(log_level("hermes_mobile::server=error, info"), (Error, None));
        let (l, warning) = log_level("loud,hermes_mobile=chatty");
        assert_eq!(l, Info);
        assert!(warning.unwrap().contains("loud,hermes_mobile=chatty"));
        assert!(parse(&env(&[("RUST_LOG", "hermes_mobile=debug")]), &[]).is_ok());
    }

    #[test]
    fn state_dir_follows_xdg() {
        assert_eq!(
            default_state_dir(&env(&[("XDG_STATE_HOME", "/x")])),
            PathBuf::from("/x/hermes-mobile")
        );
        assert_eq!(
            default_state_dir(&env(&[("HOME", "/home/a")])),
            PathBuf::from("/home/a/.local/state/hermes-mobile")
        );
    }

    #[test]
    fn help_lists_every_setting() {
        let h = help();
        for s in SETTINGS {
            assert!(h.contains(s.flag) && h.contains(s.env));
        }
    }
}
