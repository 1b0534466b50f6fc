//! The settings of `openai:<URL>` / `hermes:<URL>`. No message here quotes the key.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hermes_mobile::upstream::openai::{header_name_ok, header_safe};
use hermes_mobile::upstream::Endpoint;

use super::settings::default_of;
use super::values::{list, number, seconds, switch};
use super::HttpConfig;
use crate::agent::http::{Backend, HttpSettings};
use crate::http_client::Timeouts;

/// A setting's value by flag: given, or its row's default.
type Get<'a> = dyn Fn(&str) -> Option<&'a str> + 'a;

pub fn http_config<'a>(
    label: &str,
    get: &Get<'a>,
    env: &HashMap<String, String>,
    state_dir: &Path,
) -> Result<HttpConfig, String> {
    let (backend, url) = match label.split_once(':') {
        Some(("openai", url)) => (Backend::OpenAi, url),
        Some((_, url)) => (Backend::Hermes, url),
        None => return Err("MOBILE_AGENT needs openai:<URL> or hermes:<URL>".into()),
    };
    let endpoint = Endpoint::parse(url).map_err(|e| format!("MOBILE_AGENT URL: {e}"))?;
    let model = get("--agent-model").unwrap_or("").trim().to_owned();
    if backend == Backend::OpenAi && model.is_empty() {
        return Err(
            "MOBILE_AGENT=openai: needs MOBILE_AGENT_MODEL, the model name the server knows (e.g. llama3.2 for Ollama)"
                .into(),
        );
    }
    let key = api_key(env)?;
    let (system, system_file) = match get("--agent-system").map(str::trim).filter(|s| !s.is_empty()) {
        Some(at) if at.starts_with('@') => (None, Some(PathBuf::from(&at[1..]))),
        other => (other.map(str::to_owned), None),
    };
    let temperature = match get("--agent-temperature").map(str::trim).filter(|t| !t.is_empty()) {
        Some(t) => match t.parse::<f64>() {
            Ok(v) if (0.0..=2.0).contains(&v) => Some(v),
            _ => return Err(format!("MOBILE_AGENT_TEMPERATURE must be 0 to 2, got {t:?}")),
        },
        None => None,
    };
    let headers = headers(get("--agent-headers").unwrap_or(""))?;
    let vision = switch("MOBILE_AGENT_VISION", get("--agent-vision"))?;
    let media_dirs = media_dirs(get("--agent-media-dirs").unwrap_or(""))?;
    let edit_interval = seconds("MOBILE_AGENT_EDIT_INTERVAL", get("--agent-edit-interval").unwrap_or(""))?;
    let (history_chars, history_turns) = history(or_default(get, "--agent-history"))?;
    let approval_ttl = seconds("MOBILE_AGENT_APPROVAL_TTL", get("--agent-approval-ttl").unwrap_or(""))?
        .as_secs()
        .max(1);
    let concurrency =
        number::<usize>("MOBILE_AGENT_CONCURRENCY", get("--agent-concurrency").unwrap_or(""))?.clamp(1, 32);
    let timeouts = timeouts(or_default(get, "--agent-timeouts"))?;
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
        system_file,
    })
}

/// A list-like setting given empty reads as its default (as it always has).
fn or_default<'a>(get: &Get<'a>, flag: &str) -> &'a str {
    get(flag)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .or_else(|| default_of(flag))
        .unwrap_or_default()
}

/// `MOBILE_AGENT_KEY`, from the environment only (never a flag: `ps` would show it).
fn api_key(env: &HashMap<String, String>) -> Result<Option<String>, String> {
    let key = env
        .get("MOBILE_AGENT_KEY")
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty());
    if key.as_deref().is_some_and(|k| !header_safe(k) || k.contains(' ')) {
        return Err("MOBILE_AGENT_KEY holds a space or a line break".into());
    }
    Ok(key)
}

/// `Name: value` entries separated by `;` or newlines.
fn headers(spec: &str) -> Result<Vec<(String, String)>, String> {
    let mut headers = Vec::new();
    for entry in spec.split([';', '\n']) {
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
        if !header_name_ok(name) {
            return Err(format!("MOBILE_AGENT_HEADERS: {name:?} is not a header name"));
        }
        if name.eq_ignore_ascii_case("authorization") || name.eq_ignore_ascii_case("host") {
            return Err(format!(
                "MOBILE_AGENT_HEADERS: {name} is set by the gateway (the key goes in MOBILE_AGENT_KEY)"
            ));
        }
        if !header_safe(value) {
            return Err(format!(
                "MOBILE_AGENT_HEADERS: the value of {name} holds a control character"
            ));
        }
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    Ok(headers)
}

fn media_dirs(spec: &str) -> Result<Vec<String>, String> {
    let dirs = list(spec);
    if let Some(dir) = dirs.iter().find(|d| !d.starts_with('/')) {
        return Err(format!(
            "MOBILE_AGENT_MEDIA_DIRS entries must be absolute paths, got {dir:?}"
        ));
    }
    Ok(dirs)
}

/// `characters,messages`.
fn history(spec: &str) -> Result<(usize, usize), String> {
    let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
    let (chars, turns) = match parts.as_slice() {
        [c, t] => (
            number("MOBILE_AGENT_HISTORY characters", c)?,
            number("MOBILE_AGENT_HISTORY messages", t)?,
        ),
        _ => {
            return Err(format!(
                "MOBILE_AGENT_HISTORY is characters,messages (e.g. 24000,40), got {spec:?}"
            ))
        }
    };
    // The saved file must stay under what is read back (4 MiB; 6 bytes a character at most).
    if !(100..=500_000).contains(&chars) || !(2..=1000).contains(&turns) {
        return Err(format!(
            "MOBILE_AGENT_HISTORY is 100 to 500000 characters and 2 to 1000 messages, got {chars},{turns}"
        ));
    }
    Ok((chars, turns))
}

/// `connect,first byte,idle` in seconds.
fn timeouts(spec: &str) -> Result<Timeouts, String> {
    let parts: Vec<&str> = spec.split(',').collect();
    let [c, f, i] = parts.as_slice() else {
        return Err(format!(
            "MOBILE_AGENT_TIMEOUTS is connect,first byte,idle in seconds (e.g. 10,120,120), got {spec:?}"
        ));
    };
    Ok(Timeouts {
        connect: seconds("MOBILE_AGENT_TIMEOUTS connect", c)?,
        first_byte: seconds("MOBILE_AGENT_TIMEOUTS first byte", f)?,
        idle: seconds("MOBILE_AGENT_TIMEOUTS idle", i)?,
    })
}
