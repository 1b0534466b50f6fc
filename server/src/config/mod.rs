//! Settings from the environment and the command line (decisions C1–C3). A flag overrides
//! its variable. Bad settings stop start-up with one clear line that names the setting.
//!
//! One source for each setting (issue 17): its row in [`settings::SETTINGS`] holds its
//! default, which `--help` shows and [`parse`] reads through the same parser as a given
//! value. Parsing reads no file: [`ServerConfig::read_files`] does that at start-up
//! (the web client's folder, a system prompt file), and the rules that tie settings
//! together are in [`validate`].

mod http;
mod journal;
mod push;
pub mod secrets;
pub mod settings;
pub mod validate;
mod values;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use hermes_mobile::Config;

pub use settings::{help, DEFAULT_PORT, SETTINGS};
use values::{agent_kind, list, log_level, number, seconds};

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
    /// `MOBILE_AGENT_SYSTEM=@file`: read into `agent.system` by `read_files`.
    pub system_file: Option<PathBuf>,
}

/// Where the web client's files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebSource {
    Off,
    Embedded,
    /// `MOBILE_WEB_DIR`: read at start-up.
    Dir(String),
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
    /// Messages read in part and unfinished uploads together (a quarter, L51).
    pub max_inbound: usize,
    /// Where the web client's files come from (issue 10).
    pub web_source: WebSource,
    /// The web client's files, once `read_files` has read them; `None` with `MOBILE_WEB=off`.
    pub web: Option<crate::web::Web>,
    /// `MOBILE_WEB_DIR`, when the files are read from there.
    pub web_dir: Option<String>,
    pub http: Option<HttpConfig>,
    /// Web Push and ntfy (issue 18); `None` when both are off.
    pub push: Option<crate::push::PushSettings>,
    /// What the journal keeps (issue 24); the core gets it once the journal opens.
    pub journal: hermes_mobile::journal::JournalConfig,
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

/// The given values of settings, by flag; a setting not given reads as its row's default.
struct Given {
    values: HashMap<&'static str, String>,
}

impl Given {
    /// Reads `env` and then `args` (a flag overrides its variable).
    fn read(env: &HashMap<String, String>, args: &[String]) -> Result<Given, String> {
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
        Ok(Given { values })
    }

    /// The value of `flag`: given, or its row's default value.
    fn get(&self, flag: &str) -> Option<&str> {
        self.values
            .get(flag)
            .map(String::as_str)
            .or_else(|| settings::default_of(flag))
    }

    /// The value of a setting whose row has a default value.
    fn value(&self, flag: &str) -> &str {
        self.get(flag).unwrap_or_default()
    }
}

/// Reads settings from `env` and `args` (flags only: the subcommand is already taken off).
/// Reads no file; see [`ServerConfig::read_files`].
pub fn parse(env: &HashMap<String, String>, args: &[String]) -> Result<ServerConfig, String> {
    let given = Given::read(env, args)?;
    let get = |flag: &str| given.get(flag);
    let token = get("--token").unwrap_or("").trim().to_owned();
    let core = core_config(&given, &token)?;
    let agent = agent_kind(given.value("--agent"))?;
    let agent_token = get("--agent-token")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    let (log_level, log_warning) = log_level(given.value("--log-level"));
    let budget = memory_budget(&given)?;
    let web_source = match given.value("--web").trim().to_ascii_lowercase().as_str() {
        "" | "on" | "1" | "true" | "yes" => match get("--web-dir").map(str::trim) {
            Some(dir) if !dir.is_empty() => WebSource::Dir(dir.to_owned()),
            _ => WebSource::Embedded,
        },
        "off" | "0" | "false" | "no" => WebSource::Off,
        other => return Err(format!("MOBILE_WEB must be on or off, got {other:?}")),
    };
    let state_dir = get("--state-dir")
        .map(PathBuf::from)
        .unwrap_or_else(|| default_state_dir(env));
    let http = match &agent {
        AgentKind::Http { label } => Some(http::http_config(label, &|flag| given.get(flag), env, &state_dir)?),
        _ => None,
    };
    let web_dir = match &web_source {
        WebSource::Dir(dir) => Some(dir.clone()),
        WebSource::Off | WebSource::Embedded => None,
    };
    let mut core = core;
    // L36 and L51: one budget, split into shares that add up to it.
    core.max_held_total = budget / 4;
    core.max_upload_total = budget * 3 / 16;
    core.max_upload_speculation = budget / 16;
    let push = push::push_settings(&|flag| given.get(flag).map(str::to_owned))?;
    let journal = journal::journal_config(&|flag| Some(given.value(flag).to_owned()))?;
    let config = ServerConfig {
        push,
        journal,
        http,
        web_source,
        web: None,
        web_dir,
        core,
        host: given.value("--host").trim().to_owned(),
        port: number::<u16>("MOBILE_PORT", given.value("--port"))?,
        token_given: !token.is_empty(),
        state_dir,
        agent,
        agent_token,
        max_connections: number::<usize>("MOBILE_MAX_CONNECTIONS", given.value("--max-connections"))?.max(1),
        log_level,
        log_warning,
        keepalive: seconds("MOBILE_KEEPALIVE", given.value("--keepalive"))?,
        demo_step: seconds("MOBILE_DEMO_STEP", given.value("--demo-step"))?,
        max_queue_bytes: 24 * 1024 * 1024,
        max_outbox_total: budget / 2,
        max_inbound: budget / 4,
    };
    validate::settings(&config)?;
    Ok(config)
}

/// The core's settings: tokens, devices, card and chunk sizes, timeouts.
fn core_config(given: &Given, token: &str) -> Result<Config, String> {
    let get = |flag: &str| given.get(flag);
    let mut core = Config::new(token.to_owned());
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
    core.trust_loopback = match given.value("--trust-loopback").trim().to_ascii_lowercase().as_str() {
        "" | "on" | "1" | "true" | "yes" => true,
        "off" | "0" | "false" | "no" => false,
        other => return Err(format!("MOBILE_TRUST_LOOPBACK must be on or off, got {other:?}")),
    };
    core.shared_token = match given.value("--shared-token").trim().to_ascii_lowercase().as_str() {
        "" | "on" | "1" | "true" | "yes" => true,
        "off" | "0" | "false" | "no" => false,
        other => return Err(format!("MOBILE_SHARED_TOKEN must be on or off, got {other:?}")),
    };
    core.home_device = get("--home-device")
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_owned);
    core.avatar_url = get("--avatar-url").unwrap_or("").trim().to_owned();
    core.prompt_ttl = seconds("MOBILE_PROMPT_TTL", given.value("--prompt-ttl"))?;
    core.chunk_limit = number("MOBILE_CHUNK_LIMIT", given.value("--chunk-limit"))?;
    if core.chunk_limit == 0 {
        return Err("MOBILE_CHUNK_LIMIT must be at least 1".into());
    }
    if core.chunk_limit > hermes_mobile::limits::MAX_TEXT_CHARS {
        // A frame's text is at most MAX_TEXT_CHARS (docs/protocol-v1.schema.json, L48).
        return Err(format!(
            "MOBILE_CHUNK_LIMIT must be at most {}",
            hermes_mobile::limits::MAX_TEXT_CHARS
        ));
    }
    core.hello_timeout = seconds("MOBILE_HELLO_TIMEOUT", given.value("--hello-timeout"))?;
    core.typing_idle = seconds("MOBILE_TYPING_IDLE", given.value("--typing-idle"))?;
    Ok(core)
}

/// L36: one setting for the memory the gateway may hold for peers, split by share.
fn memory_budget(given: &Given) -> Result<usize, String> {
    let budget_mib = number::<usize>("MOBILE_MEMORY_BUDGET", given.value("--memory-budget"))?;
    if !(16..=2048).contains(&budget_mib) {
        return Err(format!(
            "MOBILE_MEMORY_BUDGET must be 16 to 2048 (MiB), got {budget_mib}"
        ));
    }
    Ok(budget_mib * 1024 * 1024)
}

impl ServerConfig {
    /// Reads the files the settings name, at start-up, after parsing: the web client's
    /// folder (`MOBILE_WEB_DIR`) and a system prompt file (`MOBILE_AGENT_SYSTEM=@file`).
    pub fn read_files(&mut self) -> Result<(), String> {
        self.web = match &self.web_source {
            WebSource::Off => None,
            WebSource::Embedded => Some(crate::web::Web::embedded()),
            WebSource::Dir(dir) => Some(crate::web::Web::from_dir(std::path::Path::new(dir))?),
        };
        if let Some(http) = &mut self.http {
            if let Some(path) = &http.system_file {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("MOBILE_AGENT_SYSTEM file {}: {e}", path.display()))?;
                http.agent.system = Some(text.trim().to_owned()).filter(|t| !t.is_empty());
            }
        }
        Ok(())
    }
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
            &env(&[("MOBILE_PORT", "9000"), ("MOBILE_TOKEN", "t-0123456789abcdef")]),
            &["--port".into(), "9001".into()],
        )
        .unwrap();
        assert_eq!(c.port, 9001);
        assert_eq!(c.core.token, "t-0123456789abcdef");
        let c = parse(&env(&[]), &["--port=0".into()]).unwrap();
        assert_eq!(c.port, 0);
    }

    #[test]
    fn lists_are_trimmed_and_empty_entries_skipped() {
        // decisions C2
        let c = parse(
            &env(&[
                ("MOBILE_ALLOWED_DEVICES", " tel-1, ,tel-2,"),
                ("MOBILE_EXTRA_TOKENS", "tel-1 = abc-0123456789abcdef ,"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(c.core.allowed_devices, ["tel-1", "tel-2"]);
        assert_eq!(
            c.core.extra_tokens,
            [("tel-1".to_owned(), "abc-0123456789abcdef".to_owned())]
        );
    }

    #[test]
    fn extra_token_without_equals_stops_start_up_without_echoing_it() {
        // decisions C2
        let err = parse(&env(&[("MOBILE_EXTRA_TOKENS", "s3cret-token")]), &[]).unwrap_err();
        assert!(err.contains("device_id=token"));
        assert!(!err.contains("s3cret"));
    }

    #[test]
    fn weak_tokens_stop_start_up_without_echoing_them() {
        // issue 23 #3, decisions L55: the red team's MOBILE_TOKEN=abc.
        for (var, value) in [
            ("MOBILE_TOKEN", "abc"),
            ("MOBILE_TOKEN", "fifteen-chars!!"),
            ("MOBILE_EXTRA_TOKENS", "tel-1=abc"),
            ("MOBILE_DELIVER_TOKENS", "dq7z"),
        ] {
            let err = parse(&env(&[(var, value)]), &[]).unwrap_err();
            assert!(err.contains(var) && err.contains("at least 16"), "{err}");
            assert!(!err.contains(value.trim_start_matches("tel-1=")), "{err}");
        }
        assert!(parse(&env(&[("MOBILE_TOKEN", "sixteen-chars!!!")]), &[]).is_ok());
        // Unset: generated (C3), long enough by construction.
        assert!(parse(&env(&[]), &[]).is_ok());
    }

    #[test]
    fn trust_loopback_is_on_unless_turned_off() {
        // decisions L53
        assert!(parse(&env(&[]), &[]).unwrap().core.trust_loopback);
        let off = parse(&env(&[("MOBILE_TRUST_LOOPBACK", "off")]), &[]).unwrap();
        assert!(!off.core.trust_loopback);
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

    /// What start-up says of these settings: the error line and the exit status, as the
    /// binary prints them (`serve`: parse, then the files, then the token rules).
    fn start_up_error(pairs: &[(String, String)]) -> String {
        let mut env: HashMap<String, String> = pairs.iter().cloned().collect();
        env.insert("MOBILE_STATE_DIR".into(), "/tmp/hm-snap-state".into());
        env.insert("MOBILE_TOKEN".into(), "app-token-0123456789abcdef".into());
        let result = parse(&env, &[]).and_then(|mut c| {
            c.read_files()?;
            validate::agent_token_is_its_own(&c)
        });
        match result {
            Err(e) => format!("hermes-mobile: {e}\nexit=2"),
            Ok(()) => "started".into(),
        }
    }

    #[test]
    fn each_configuration_error_is_the_one_line_it_was() {
        // server/tests/snapshots/config_errors.txt was recorded from the binary before the
        // settings were reshaped (issue 17): case, then what it printed and its exit status.
        let snapshot = include_str!("../../tests/snapshots/config_errors.txt");
        let mut checked = 0;
        for case in snapshot.split("\n\n").filter(|c| !c.trim().is_empty()) {
            let (vars, want) = case.split_once('\n').expect("a case and its output");
            let pairs: Vec<(String, String)> = vars
                .split(' ')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("NAME=value");
                    (k.to_owned(), v.replace("\\x20", " "))
                })
                .collect();
            assert_eq!(start_up_error(&pairs), want.trim_end(), "for {vars}");
            checked += 1;
        }
        assert!(checked >= 30, "the snapshot has its cases ({checked})");
    }

    #[test]
    fn help_is_the_text_it_was() {
        // Recorded from the binary before the settings were reshaped; the version is the
        // crate's.
        let snapshot = include_str!("../../tests/snapshots/help.txt").replace("0.1.0", env!("CARGO_PKG_VERSION"));
        assert_eq!(help(), snapshot);
    }

    #[test]
    fn every_setting_default_is_what_parse_uses() {
        // A setting left unset and the same setting given its row's default parse alike,
        // for the HTTP agents' settings too: `--help` cannot disagree with the code.
        let http = [
            ("MOBILE_AGENT", "openai:http://127.0.0.1:9/v1"),
            ("MOBILE_AGENT_MODEL", "m"),
        ];
        for s in SETTINGS {
            let settings::DefaultValue::Value(default) = s.default else {
                continue;
            };
            let base: Vec<(&str, &str)> = if s.env.starts_with("MOBILE_AGENT_") {
                http.to_vec()
            } else {
                Vec::new()
            };
            let mut with = base.clone();
            with.push((s.env, default));
            let (unset, given) = (parse(&env(&base), &[]).unwrap(), parse(&env(&with), &[]).unwrap());
            assert_eq!(describe(&unset), describe(&given), "{} = {default:?}", s.env);
        }
        assert_eq!(settings::default_of("--port"), Some(DEFAULT_PORT.to_string().as_str()));
        // And the defaults are the values the literals in parse were before the rows held
        // them (issue 17).
        let c = parse(&env(&[]), &[]).unwrap();
        assert_eq!((c.port, c.host.as_str()), (8787, "0.0.0.0"));
        assert_eq!((c.max_connections, c.max_outbox_total), (1024, 64 * 1024 * 1024));
        assert_eq!(
            (c.keepalive, c.demo_step),
            (Duration::from_secs(30), Duration::from_millis(150))
        );
        assert_eq!(
            (c.log_level, c.agent.clone(), c.web_source.clone()),
            (log::LevelFilter::Info, AgentKind::Demo, WebSource::Embedded)
        );
        let core = &c.core;
        assert_eq!((core.prompt_ttl, core.chunk_limit), (Duration::from_secs(300), 3500));
        assert_eq!(
            (core.hello_timeout, core.typing_idle),
            (Duration::from_secs(15), Duration::from_secs(3))
        );
        let h = parse(&env(&http), &[]).unwrap().http.unwrap();
        let a = &h.agent;
        assert_eq!(
            (a.vision, a.edit_interval, a.concurrency),
            (false, Duration::from_millis(300), 4)
        );
        assert_eq!((a.history_chars, a.history_turns, a.approval_ttl), (24_000, 40, 300));
        let t = h.timeouts;
        assert_eq!(
            (t.connect, t.first_byte, t.idle),
            (
                Duration::from_secs(10),
                Duration::from_secs(120),
                Duration::from_secs(120)
            )
        );
    }

    #[test]
    fn described_defaults_are_what_parse_does() {
        let c = parse(&env(&[("HOME", "/home/a")]), &[]).unwrap();
        assert!(!c.token_given, "token: generated");
        assert!(c.core.allowed_devices.is_empty(), "allowed devices: all");
        assert_eq!(c.state_dir, PathBuf::from("/home/a/.local/state/hermes-mobile"));
        // The core's own defaults agree with the rows (the rows win in the server).
        let core = Config::new("");
        assert_eq!(
            (
                c.core.prompt_ttl,
                c.core.chunk_limit,
                c.core.hello_timeout,
                c.core.typing_idle
            ),
            (core.prompt_ttl, core.chunk_limit, core.hello_timeout, core.typing_idle)
        );
        let h = parse(&env(&[("MOBILE_AGENT", "hermes:http://h:1/v1")]), &[]).unwrap();
        let edit = h.http.unwrap().agent.edit_interval;
        assert_eq!(edit, hermes_mobile::upstream::DEFAULT_EDIT_INTERVAL);
    }

    #[test]
    fn parsing_reads_no_file() {
        // The files a setting names are read at start-up, by read_files.
        let pairs = [
            ("MOBILE_WEB_DIR", "/nonexistent/web"),
            ("MOBILE_AGENT", "openai:http://127.0.0.1:9/v1"),
            ("MOBILE_AGENT_MODEL", "m"),
            ("MOBILE_AGENT_SYSTEM", "@/nonexistent/prompt.txt"),
        ];
        let mut c = parse(&env(&pairs), &[]).expect("parsing alone reads nothing");
        assert!(c.web.is_none());
        assert!(c.read_files().unwrap_err().contains("MOBILE_WEB_DIR"));
    }

    /// Everything a parse decided, HTTP agent settings included.
    fn describe(c: &ServerConfig) -> String {
        let http = c.http.as_ref().map(|h| {
            let a = &h.agent;
            format!(
                "{:?} {:?} {} {:?} {:?} {:?} {} {:?} {:?} {} {} {} {} {:?} {:?} {:?}",
                a.backend,
                a.endpoint,
                a.model,
                a.system,
                a.temperature,
                a.headers,
                a.vision,
                a.media_dirs,
                a.edit_interval,
                a.history_chars,
                a.history_turns,
                a.approval_ttl,
                a.concurrency,
                h.timeouts,
                h.ca_file,
                h.system_file
            )
        });
        format!("{c:?} {http:?}")
    }

    #[test]
    fn help_lists_every_setting() {
        let h = help();
        for s in SETTINGS {
            assert!(h.contains(s.flag) && h.contains(s.env));
        }
    }
}
