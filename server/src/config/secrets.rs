//! Secrets from files, and a word against secrets on the command line (issue 23 #5,
//! decisions L55).
//!
//! A flag's value is in `/proc/<pid>/cmdline`, which every local user can read. systemd
//! credentials (`LoadCredential=`, `$CREDENTIALS_DIRECTORY`) and Docker secrets hand a
//! service a file instead, so each secret also comes as `<VARIABLE>_FILE` or
//! `<flag>-file`. This runs before [`super::parse`]: it reads the files and puts their
//! contents where `parse` looks, so `parse` itself still reads no file.

use std::collections::HashMap;
use std::path::Path;

/// The secret settings: their flag (empty: environment only) and their variable.
pub const SECRETS: &[(&str, &str)] = &[
    ("--token", "MOBILE_TOKEN"),
    ("--extra-tokens", "MOBILE_EXTRA_TOKENS"),
    ("--deliver-tokens", "MOBILE_DELIVER_TOKENS"),
    ("--agent-token", "MOBILE_AGENT_TOKEN"),
    ("--ntfy-token", "MOBILE_NTFY_TOKEN"),
    ("", "MOBILE_AGENT_KEY"),
];

/// A secret file's contents, and a warning to log about the file if any.
pub type SecretFile = (String, Option<String>);

/// The settings with every `*_FILE` and `--*-file` read in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub env: HashMap<String, String>,
    pub args: Vec<String>,
    /// To log once the logger is up: a secret given as a flag, a file others can read.
    pub warnings: Vec<String>,
}

/// The secrets that list several tokens, one per line in a file or comma-separated.
const LISTS: &[&str] = &["MOBILE_EXTRA_TOKENS", "MOBILE_DELIVER_TOKENS"];

/// Reads the secret files `env` and `args` name, of the variables in `wanted` only (a
/// command reads no secret it does not use: `send` run by another user must not fail on the
/// service's own files). `read` reads one; the binary passes [`read_secret_file`].
pub fn resolve(
    env: &HashMap<String, String>,
    args: &[String],
    wanted: &[&str],
    read: &dyn Fn(&Path) -> Result<SecretFile, String>,
) -> Result<Resolved, String> {
    let mut env = env.clone();
    let mut args = args.to_vec();
    let mut warnings = Vec::new();
    for &(flag, var) in SECRETS.iter().filter(|(_, var)| wanted.contains(var)) {
        let file_var = format!("{var}_FILE");
        let file_flag = (!flag.is_empty()).then(|| format!("{flag}-file"));
        let from_flag = file_flag.as_deref().and_then(|f| take_flag(&mut args, f));
        let given_flag = !flag.is_empty() && has_flag(&args, flag);
        if given_flag {
            if from_flag.is_some() {
                return Err(format!("give {flag} or {flag}-file, not both"));
            }
            warnings.push(format!(
                "{flag} puts a secret where every local user can read it (/proc/<pid>/cmdline); use {var}_FILE, {flag}-file or the env file instead"
            ));
            continue;
        }
        let path = match from_flag {
            Some(path) => path,
            None => match env.get(&file_var).filter(|p| !p.trim().is_empty()) {
                Some(_) if env.get(var).is_some_and(|v| !v.trim().is_empty()) => {
                    return Err(format!("set {var} or {file_var}, not both"));
                }
                Some(path) => path.clone(),
                None => continue,
            },
        };
        let (secret, warning) = read(Path::new(&path)).map_err(|e| format!("{file_var} {path}: {e}"))?;
        warnings.extend(warning);
        let secret = if LISTS.contains(&var) {
            // One entry a line reads as the comma-separated list (C2).
            secret.lines().collect::<Vec<_>>().join(",")
        } else if secret.contains(['\n', '\r']) {
            return Err(format!("{file_var} {path}: the file holds more than one line"));
        } else {
            secret
        };
        env.insert(var.to_owned(), secret);
    }
    Ok(Resolved { env, args, warnings })
}

/// Takes every `flag VALUE` or `flag=VALUE` out of `args`, returning the last value (a
/// flag given twice counts once, as `parse` takes the last).
fn take_flag(args: &mut Vec<String>, flag: &str) -> Option<String> {
    let mut value = None;
    while let Some(i) = args
        .iter()
        .position(|a| a == flag || a.starts_with(&format!("{flag}=")))
    {
        let arg = args.remove(i);
        value = Some(match arg.split_once('=') {
            Some((_, v)) => v.to_owned(),
            None if i < args.len() => args.remove(i),
            None => String::new(),
        });
    }
    value
}

/// Every secret, for `serve`.
pub fn all() -> Vec<&'static str> {
    SECRETS.iter().map(|(_, var)| *var).collect()
}

fn has_flag(args: &[String], flag: &str) -> bool {
    args.iter().any(|a| a == flag || a.starts_with(&format!("{flag}=")))
}

/// Reads one secret file: its contents without the line end an editor adds, and a warning
/// when users other than its owner may read it.
pub fn read_secret_file(path: &Path) -> Result<SecretFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let secret = text.trim_end_matches(['\n', '\r']).to_owned();
    if secret.trim().is_empty() {
        return Err("the file is empty".into());
    }
    let warning = open_to_others(path).then(|| {
        format!(
            "{} can be read by other users: chmod 600 it (its secret is only as safe as the file)",
            path.display()
        )
    });
    Ok((secret, warning))
}

#[cfg(unix)]
fn open_to_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
}

#[cfg(not(unix))]
fn open_to_others(_: &Path) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn resolve_all(
        env: &HashMap<String, String>,
        args: &[String],
        read: &dyn Fn(&Path) -> Result<SecretFile, String>,
    ) -> Result<Resolved, String> {
        resolve(env, args, &all(), read)
    }

    fn files(path: &Path) -> Result<SecretFile, String> {
        match path.to_str() {
            Some("/run/credentials/token") => Ok(("from-a-file-0123456789".into(), None)),
            Some("/open/token") => Ok(("open-file-0123456789".into(), Some("/open/token is open".into()))),
            _ => Err("No such file or directory".into()),
        }
    }

    #[test]
    fn secrets_come_from_files_by_variable_or_flag() {
        // decisions L55
        let r = resolve_all(&env(&[("MOBILE_TOKEN_FILE", "/run/credentials/token")]), &[], &files).unwrap();
        assert_eq!(r.env["MOBILE_TOKEN"], "from-a-file-0123456789");
        assert!(r.warnings.is_empty());
        let r = resolve_all(
            &env(&[]),
            &args(&["--port", "1", "--deliver-tokens-file", "/open/token"]),
            &files,
        )
        .unwrap();
        assert_eq!(r.env["MOBILE_DELIVER_TOKENS"], "open-file-0123456789");
        assert_eq!(r.args, args(&["--port", "1"]), "the file flag is taken out");
        assert_eq!(r.warnings, ["/open/token is open"]);
        let r = resolve_all(
            &env(&[("MOBILE_AGENT_KEY_FILE", "/run/credentials/token")]),
            &[],
            &files,
        )
        .unwrap();
        assert_eq!(r.env["MOBILE_AGENT_KEY"], "from-a-file-0123456789");
        // A flag file wins over the variable, as a flag does.
        let r = resolve_all(
            &env(&[("MOBILE_TOKEN", "env-token-0123456789")]),
            &args(&["--token-file=/run/credentials/token"]),
            &files,
        )
        .unwrap();
        assert_eq!(r.env["MOBILE_TOKEN"], "from-a-file-0123456789");
    }

    #[test]
    fn list_files_take_one_entry_a_line_and_commands_read_only_their_secrets() {
        // The review's cases: a one-per-line MOBILE_EXTRA_TOKENS_FILE, and `send` as another
        // user beside a service-only MOBILE_AGENT_KEY_FILE.
        let lines = |_: &Path| -> Result<SecretFile, String> {
            Ok(("tel-1=one-0123456789abcdef\ntel-2=two-0123456789abcdef".into(), None))
        };
        let r = resolve_all(&env(&[("MOBILE_EXTRA_TOKENS_FILE", "/x")]), &[], &lines).unwrap();
        assert_eq!(
            r.env["MOBILE_EXTRA_TOKENS"],
            "tel-1=one-0123456789abcdef,tel-2=two-0123456789abcdef"
        );
        let err = resolve_all(&env(&[("MOBILE_TOKEN_FILE", "/x")]), &[], &lines).unwrap_err();
        assert!(err.contains("more than one line"), "{err}");
        let service_only = env(&[
            ("MOBILE_AGENT_KEY_FILE", "/root-only"),
            ("MOBILE_TOKEN_FILE", "/run/credentials/token"),
        ]);
        let r = resolve(&service_only, &[], &["MOBILE_TOKEN", "MOBILE_DELIVER_TOKENS"], &files).unwrap();
        assert_eq!(r.env["MOBILE_TOKEN"], "from-a-file-0123456789");
        assert!(!r.env.contains_key("MOBILE_AGENT_KEY"));
        let twice = args(&["--token-file", "/open/token", "--token-file=/run/credentials/token"]);
        let r = resolve_all(&env(&[]), &twice, &files).unwrap();
        assert!(r.args.is_empty());
        assert_eq!(r.env["MOBILE_TOKEN"], "from-a-file-0123456789");
    }

    #[test]
    fn a_secret_flag_is_warned_about_and_ambiguities_stop_start_up() {
        let r = resolve_all(&env(&[]), &args(&["--token", "on-the-command-line"]), &files).unwrap();
        assert_eq!(r.warnings.len(), 1);
        assert!(r.warnings[0].contains("/proc/<pid>/cmdline") && !r.warnings[0].contains("on-the-command"));
        let both = env(&[("MOBILE_TOKEN", "x"), ("MOBILE_TOKEN_FILE", "/run/credentials/token")]);
        assert!(resolve_all(&both, &[], &files).unwrap_err().contains("not both"));
        let both = args(&["--ntfy-token", "x", "--ntfy-token-file", "/run/credentials/token"]);
        assert!(resolve_all(&env(&[]), &both, &files).unwrap_err().contains("not both"));
        let missing = resolve_all(&env(&[("MOBILE_NTFY_TOKEN_FILE", "/nope")]), &[], &files).unwrap_err();
        assert_eq!(missing, "MOBILE_NTFY_TOKEN_FILE /nope: No such file or directory");
    }

    #[test]
    fn a_secret_file_loses_its_line_end_and_an_empty_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("hm-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "s3cret-0123456789abcdef\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            assert_eq!(
                read_secret_file(&path).unwrap(),
                ("s3cret-0123456789abcdef".into(), None)
            );
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(read_secret_file(&path).unwrap().1.unwrap().contains("chmod 600"));
        }
        std::fs::write(&path, "\n").unwrap();
        assert_eq!(read_secret_file(&path).unwrap_err(), "the file is empty");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
