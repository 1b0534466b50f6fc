//! The parsers of setting values: numbers, seconds, lists, switches, log levels and the
//! agent. Each error names the setting.

use std::path::PathBuf;
use std::time::Duration;

use super::AgentKind;

/// `demo`, `exec:<command line>`, `link` or `link:<socket path>`.
pub fn agent_kind(value: &str) -> Result<AgentKind, String> {
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

pub fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect()
}

pub fn seconds(name: &str, s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("{name} must be a positive number of seconds, got {s:?}")),
    }
}

pub fn number<T: std::str::FromStr>(name: &str, s: &str) -> Result<T, String> {
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
pub fn log_level(spec: &str) -> (log::LevelFilter, Option<String>) {
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

/// A yes/no setting: 1/on/true/yes or 0/off/false/no; unset or empty is no.
pub fn switch(name: &str, v: Option<&str>) -> Result<bool, String> {
    match v.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "0" | "off" | "false" | "no") => Ok(false),
        Some("1" | "on" | "true" | "yes") => Ok(true),
        Some(other) => Err(format!("{name} must be 0 or 1, got {other:?}")),
    }
}
