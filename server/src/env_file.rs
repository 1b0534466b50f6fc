//! The service's settings file (`/etc/hermes-mobile/hermes-mobile.env`, systemd's
//! `EnvironmentFile=`), read by the commands an owner runs beside the service (`token`,
//! `send`), so that they find the token and state directory the service uses.
//! The process environment wins over the file. `--env-file PATH` (or `MOBILE_ENV_FILE`)
//! names another file; an empty one reads none.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

/// Where the .deb package installs the service's settings.
pub const DEFAULT_PATH: &str = "/etc/hermes-mobile/hermes-mobile.env";
/// The service's state directory (`StateDirectory=hermes-mobile`, passed as `--state-dir`
/// by the unit): where `token` looks when the settings file does not say otherwise.
pub const SERVICE_STATE_DIR: &str = "/var/lib/hermes-mobile";

/// Parses systemd's `EnvironmentFile=` syntax, the subset a person writes: `KEY=VALUE`
/// lines, `#`/`;` comments, blank lines, and values in single or double quotes. A line
/// that is none of these (`export KEY=…` included: systemd does not take it either) is
/// skipped, as systemd skips it.
pub fn parse(text: &str) -> HashMap<String, String> {
    let mut vars = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let value = value.trim();
        let unquoted = ['"', '\'']
            .iter()
            .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
            .unwrap_or(value);
        vars.insert(key.to_owned(), unquoted.to_owned());
    }
    vars
}

/// Takes `--env-file PATH` (or `--env-file=PATH`) out of `args`.
fn take_flag(args: &[String]) -> Result<(Option<String>, Vec<String>), String> {
    let mut rest = Vec::with_capacity(args.len());
    let mut chosen = None;
    let mut i = 0;
    while i < args.len() {
        if let Some(v) = args[i].strip_prefix("--env-file=") {
            chosen = Some(v.to_owned());
        } else if args[i] == "--env-file" {
            i += 1;
            chosen = Some(args.get(i).cloned().ok_or("--env-file needs a path")?);
        } else {
            rest.push(args[i].clone());
        }
        i += 1;
    }
    Ok((chosen, rest))
}

/// A command's settings with the file layered under the process environment.
#[derive(Debug, PartialEq, Eq)]
pub struct Layered {
    pub env: HashMap<String, String>,
    /// The arguments without `--env-file`.
    pub args: Vec<String>,
    /// The settings file that was read, if any.
    pub file: Option<PathBuf>,
}

/// What to do with the default settings file when it exists but cannot be read (it is
/// owner-only): `token` must say so, since the token it would print is the service's;
/// `send` goes on without it, since a user's cron job may well have its own `--token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    Fail,
    Skip,
}

/// Layers the settings file under `env`. The default file is read only when it exists; a
/// named one must. A file that is read and names no state directory points at the
/// service's.
pub fn layered(env: &HashMap<String, String>, args: &[String], unreadable: Unreadable) -> Result<Layered, String> {
    let (flag, args) = take_flag(args)?;
    let chosen = flag.or_else(|| env.get("MOBILE_ENV_FILE").cloned());
    let no_file = |args| Layered {
        env: env.clone(),
        args,
        file: None,
    };
    let (path, required) = match chosen {
        Some(p) if p.is_empty() => return Ok(no_file(args)),
        Some(p) => (PathBuf::from(p), true),
        None => (PathBuf::from(DEFAULT_PATH), false),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !required => return Ok(no_file(args)),
        Err(e) if !required && unreadable == Unreadable::Skip => {
            log::debug!("not reading {:?}: {e}", path);
            return Ok(no_file(args));
        }
        Err(e) => return Err(cannot_read(&path, &e)),
    };
    let mut merged = parse(&text);
    merged
        .entry("MOBILE_STATE_DIR".to_owned())
        .or_insert_with(|| SERVICE_STATE_DIR.to_owned());
    merged.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(Layered {
        env: merged,
        args,
        file: Some(path),
    })
}

fn cannot_read(path: &Path, e: &io::Error) -> String {
    let hint = if e.kind() == io::ErrorKind::PermissionDenied {
        " (it is owner-only: run with sudo, or pass --env-file '' to ignore it)"
    } else {
        ""
    };
    format!("cannot read the settings file {}: {e}{hint}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_a_person_writes_in_an_environment_file() {
        let vars = parse(
            "# comment\n; another\n\nMOBILE_PORT=8787\nMOBILE_HOST = 127.0.0.1\nexport MOBILE_TOKEN=x\n\
             MOBILE_STATE_DIR=\"/var/lib/hermes-mobile\"\nMOBILE_AVATAR_URL='x y'\nnot a setting\nBAD-KEY=1\n",
        );
        assert_eq!(vars.get("MOBILE_PORT").map(String::as_str), Some("8787"));
        assert_eq!(vars.get("MOBILE_HOST").map(String::as_str), Some("127.0.0.1"));
        assert_eq!(
            vars.get("MOBILE_STATE_DIR").map(String::as_str),
            Some("/var/lib/hermes-mobile")
        );
        assert_eq!(vars.get("MOBILE_AVATAR_URL").map(String::as_str), Some("x y"));
        assert_eq!(vars.len(), 4);
    }

    #[test]
    fn the_process_environment_wins_and_the_flag_is_taken_out() {
        let dir = std::env::temp_dir().join(format!("hm-envfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("service.env");
        std::fs::write(&file, "MOBILE_STATE_DIR=/from/file\nMOBILE_PORT=1\n").unwrap();
        let env: HashMap<String, String> = [("MOBILE_PORT".to_owned(), "2".to_owned())].into();
        let args = vec!["--env-file".to_owned(), file.display().to_string(), "--x".to_owned()];
        let l = layered(&env, &args, Unreadable::Fail).unwrap();
        assert_eq!(l.env["MOBILE_STATE_DIR"], "/from/file");
        assert_eq!(l.env["MOBILE_PORT"], "2");
        assert_eq!(l.args, ["--x"]);
        assert_eq!(l.file, Some(file.clone()));

        let missing = vec![format!("--env-file={}", dir.join("nope").display())];
        assert!(layered(&env, &missing, Unreadable::Skip).unwrap_err().contains("nope"));
        let l = layered(&env, &["--env-file=".to_owned()], Unreadable::Fail).unwrap();
        assert_eq!((l.env, l.file), (env, None));
        let only_port = dir.join("port.env");
        std::fs::write(&only_port, "MOBILE_PORT=1\n").unwrap();
        let l = layered(
            &HashMap::new(),
            &[format!("--env-file={}", only_port.display())],
            Unreadable::Fail,
        )
        .unwrap();
        assert_eq!(l.env["MOBILE_STATE_DIR"], SERVICE_STATE_DIR, "the service's by default");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
