//! `hermes-mobile hermes install`: writes the Hermes `mobile` platform plugin (embedded in
//! the binary, from integrations/hermes/mobile/) into a Hermes home, and prints the
//! config.yaml lines that enable it (docs/hermes.md).

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The plugin's files, as they are in the repository.
const FILES: &[(&str, &str)] = &[
    (
        "plugin.yaml",
        include_str!("../../integrations/hermes/mobile/plugin.yaml"),
    ),
    (
        "__init__.py",
        include_str!("../../integrations/hermes/mobile/__init__.py"),
    ),
    (
        "adapter.py",
        include_str!("../../integrations/hermes/mobile/adapter.py"),
    ),
    ("cards.py", include_str!("../../integrations/hermes/mobile/cards.py")),
    ("common.py", include_str!("../../integrations/hermes/mobile/common.py")),
    ("files.py", include_str!("../../integrations/hermes/mobile/files.py")),
    ("inbox.py", include_str!("../../integrations/hermes/mobile/inbox.py")),
    ("link.py", include_str!("../../integrations/hermes/mobile/link.py")),
];

const USAGE: &str = "\
usage: hermes-mobile hermes install [--hermes-home DIR] [--socket PATH]

Writes the Hermes platform plugin `mobile` to DIR/plugins/mobile/ (DIR: --hermes-home,
else $HERMES_HOME, else ~/.hermes) and prints the config.yaml lines that enable it.
--socket: the gateway's agent socket to put in those lines (default: the gateway's
<state dir>/agent.sock as this user would have it). Run the gateway with MOBILE_AGENT=link.
";

pub fn run(env: &HashMap<String, String>, args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
        Some("install") => {}
        Some("--help" | "-h") | None => {
            print!("{USAGE}");
            return if args.is_empty() { 2 } else { 0 };
        }
        Some(other) => {
            eprintln!("hermes-mobile hermes: unknown command {other:?}\n{USAGE}");
            return 2;
        }
    }
    let mut home = None;
    let mut socket = None;
    let mut rest = args[1..].iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--hermes-home" | "--socket" => {
                let Some(value) = rest.next().filter(|v| !v.is_empty()) else {
                    eprintln!("hermes-mobile hermes install: {arg} needs a value\n{USAGE}");
                    return 2;
                };
                if arg == "--socket" {
                    socket = Some(PathBuf::from(value));
                } else {
                    home = Some(PathBuf::from(value));
                }
            }
            "--help" | "-h" => {
                print!("{USAGE}");
                return 0;
            }
            other => {
                eprintln!("hermes-mobile hermes install: unknown argument {other:?}\n{USAGE}");
                return 2;
            }
        }
    }
    let home = home
        .or_else(|| env.get("HERMES_HOME").filter(|h| !h.is_empty()).map(PathBuf::from))
        .or_else(|| {
            env.get("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| Path::new(h).join(".hermes"))
        });
    let Some(home) = home else {
        eprintln!("hermes-mobile hermes install: no --hermes-home, HERMES_HOME or HOME");
        return 2;
    };
    let dir = home.join("plugins").join("mobile");
    if let Err(e) = write_plugin(&dir) {
        eprintln!("hermes-mobile hermes install: cannot write {}: {e}", dir.display());
        return 1;
    }
    let socket = socket.unwrap_or_else(|| default_socket(env));
    // Written, not println!'d: `hermes install | head` must not panic on a closed pipe.
    let text = format!(
        "Installed the Hermes plugin `mobile` in {}\n\nAdd to {}:\n{}\nThen run the gateway with MOBILE_AGENT=link and restart Hermes (hermes gateway run).\n",
        dir.display(),
        home.join("config.yaml").display(),
        config_lines(&socket)
    );
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    0
}

fn write_plugin(dir: &Path) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    for (name, text) in FILES {
        let path = dir.join(name);
        fs::write(&path, text)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

/// Where the gateway of this user puts its socket (the same rule as the gateway's).
fn default_socket(env: &HashMap<String, String>) -> PathBuf {
    match env.get("MOBILE_STATE_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => Path::new(dir).join("agent.sock"),
        None => crate::config::default_state_dir(env).join("agent.sock"),
    }
}

/// The config.yaml lines that enable the plugin (docs/hermes.md explains each).
pub fn config_lines(socket: &Path) -> String {
    format!(
        "\
plugins:
  enabled: [mobile]
platforms:
  mobile:
    enabled: true
    extra:
      socket: {:?}
platform_toolsets:
  mobile: [hermes-telegram]
streaming:
  enabled: true
  transport: edit
",
        socket.display().to_string()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_plugin_is_embedded() {
        // A module added to the plugin and not here would be missing from every install.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../integrations/hermes/mobile");
        let mut on_disk: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".py") || n.ends_with(".yaml"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(n, _)| (*n).to_owned()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
    }

    #[test]
    fn install_writes_every_plugin_file_and_prints_the_config() {
        let home = std::env::temp_dir().join(format!("hm-hermes-home-{}", std::process::id()));
        let _ = fs::remove_dir_all(&home);
        let env = HashMap::new();
        let args: Vec<String> = [
            "install",
            "--hermes-home",
            home.to_str().unwrap(),
            "--socket",
            "/run/a.sock",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(run(&env, &args), 0);
        for (name, text) in FILES {
            assert_eq!(
                fs::read_to_string(home.join("plugins/mobile").join(name)).unwrap(),
                *text
            );
        }
        assert!(config_lines(Path::new("/run/a.sock")).contains("socket: \"/run/a.sock\""));
        fs::remove_dir_all(&home).unwrap();
    }
}
