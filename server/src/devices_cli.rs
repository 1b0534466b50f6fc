//! `hermes-mobile pair` and `hermes-mobile devices` (issue 26): pairing codes, the list of
//! paired devices, and revocation. Each acts on the running gateway through its control
//! socket (`<state dir>/control.sock`, the gateway's own user only), or, with the gateway
//! stopped, on the journal's database itself, which the gateway reads at its next start.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hermes_mobile::devices::codes::{self, KeptCode, CODE_BYTES, DEFAULT_TTL, MAX_OUTSTANDING};
use hermes_mobile::hidden::reveal;
use hermes_mobile::ids::DeviceId;
use serde_json::{json, Value};

use crate::{config, env_file, journal, pair, state};

const PAIR_USAGE: &str = "usage: hermes-mobile pair [--ttl SECONDS] [--owner] [--state-dir DIR] [--env-file PATH]

Makes a pairing code and prints the chat's pairing link (<chat URL>#pair=<code>) and its QR
code. The code pairs one device, once, within 10 minutes (--ttl); the device gets a token of
its own. --owner: the device may list and revoke devices. At most 8 codes wait at once. The
link holds no lasting secret; `hermes-mobile token` still prints the shared app token.";

const DEVICES_USAGE: &str = "usage: hermes-mobile devices [--json] [--state-dir DIR] [--env-file PATH]
       hermes-mobile devices revoke ID [--forget] [--state-dir DIR] [--env-file PATH]

Lists the paired devices: id, name, platform, when paired, last seen, online, push, history
size, owner. --json prints one JSON object per device per line.
`revoke` cuts a device off at once: its connections are closed, its token, push
subscriptions and held replies deleted; --forget also deletes its journal.
Both work with the gateway running (through <state dir>/control.sock) or stopped.";

/// How the CLI reached the gateway.
enum Reached {
    Running(Value),
    /// No gateway listens on the control socket: act on the journal.
    Stopped,
}

/// One request on the control socket.
fn ask(state_dir: &Path, request: &Value) -> Result<Reached, String> {
    let path = state_dir.join(crate::server::CONTROL_SOCKET);
    let mut stream = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(Reached::Stopped)
        }
        Err(e) => {
            return Err(format!(
                "{}: {e} (run as the gateway's user, or with sudo)",
                path.display()
            ))
        }
    };
    let failed = |e: std::io::Error| format!("{}: {e}", path.display());
    stream.set_read_timeout(Some(Duration::from_secs(15))).map_err(failed)?;
    stream.write_all(format!("{request}\n").as_bytes()).map_err(failed)?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).map_err(failed)?;
    let answer: Value = serde_json::from_str(&line).map_err(|_| format!("{}: no answer", path.display()))?;
    if answer["ok"] == json!(true) {
        Ok(Reached::Running(answer))
    } else {
        Err(answer["error"].as_str().unwrap_or("refused").to_owned())
    }
}

/// The settings' state directory (and the rest of the configuration).
fn settings(env: &HashMap<String, String>, args: &[String]) -> Result<config::ServerConfig, String> {
    let l = env_file::layered(env, args, env_file::Unreadable::Skip).map_err(|e| e.to_string())?;
    config::parse(&l.env, &l.args)
}

fn fail(command: &str, message: impl std::fmt::Display, code: i32) -> i32 {
    eprintln!("hermes-mobile {command}: {message}");
    code
}

/// `hermes-mobile pair`.
pub fn pair_run(env: &HashMap<String, String>, args: &[String]) -> i32 {
    let mut ttl = DEFAULT_TTL.as_secs();
    let mut owner = false;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--help" | "-h" => {
                println!("{PAIR_USAGE}");
                return 0;
            }
            "--owner" => owner = true,
            "--ttl" => match it
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|v| (1..=86_400).contains(v))
            {
                Some(v) => ttl = v,
                None => return fail("pair", format!("--ttl takes 1 to 86400 seconds\n\n{PAIR_USAGE}"), 2),
            },
            _ => rest.push(a.clone()),
        }
    }
    let config = match settings(env, &rest) {
        Ok(c) => c,
        Err(e) => return fail("pair", e, 2),
    };
    let state_dir = config.state_dir.clone();
    let dir_owner = match root_in_owners_dir(&state_dir) {
        Ok(o) => o,
        Err(e) => return fail("pair", e, 1),
    };
    let code = match state::random_bytes::<CODE_BYTES>() {
        Ok(random) => codes::encode(&random),
        Err(e) => return fail("pair", format!("no random source: {e}"), 1),
    };
    let kept = keep_code(&state_dir, &code, owner, ttl);
    give_back(&state_dir, dir_owner);
    if let Err(e) = kept {
        return fail("pair", e, 1);
    }
    let port = if config.port == 0 {
        config::DEFAULT_PORT
    } else {
        config.port
    };
    let p = pair::Pairing {
        urls: pair::page_urls(&config.host, port, &pair::lan_addresses()),
        code: Some(pair::Code {
            code: &code,
            minutes: ttl.div_ceil(60),
            owner,
        }),
        qr: true,
        web: config.web_source != config::WebSource::Off,
    };
    match pair::print(&mut std::io::stdout().lock(), &p) {
        Ok(()) => 0,
        Err(e) => fail("pair", e, 1),
    }
}

/// Hands the code to the running gateway, or keeps it in the journal for its next start.
fn keep_code(state_dir: &Path, code: &str, owner: bool, ttl: u64) -> Result<(), String> {
    let request = json!({"cmd": "pair", "code": code, "owner": owner, "ttl": ttl});
    if let Reached::Running(_) = ask(state_dir, &request)? {
        return Ok(());
    }
    let _lock = stopped_gateway(state_dir)?;
    let path = journal_path(state_dir)?;
    let now = journal::now_unix_ms();
    let kept = KeptCode::new(code, owner, hermes_mobile::Time::ZERO);
    let result = journal::devices::offline(&path, |conn| {
        if journal::devices::codes_waiting(conn, now)? >= MAX_OUTSTANDING {
            return Ok(false);
        }
        journal::devices::add_code(conn, &kept, now + ttl * 1000).map(|()| true)
    });
    match result? {
        true => Ok(()),
        false => Err(format!(
            "{MAX_OUTSTANDING} pairing codes are waiting already; use one or wait for one to expire"
        )),
    }
}

fn journal_path(state_dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    Ok(state_dir.join(crate::server::JOURNAL_FILE))
}

/// The files `pair` and `devices revoke` may write in the state directory.
const WRITTEN: [&str; 5] = [
    crate::server::JOURNAL_FILE,
    "journal.sqlite3-wal",
    "journal.sqlite3-shm",
    crate::state::LOCK_FILE,
    "push-subscriptions.json",
];

/// `sudo hermes-mobile …` in a state directory another user owns (the service's): the
/// owner to give what it writes back to. It cannot become that user: the packaged
/// service's directory (`DynamicUser=`) lies under `/var/lib/private`, which only root
/// may pass, and SQLite resolves every path from `/`. So it refuses any of the files it
/// writes that is not a plain file (a link that user planted would lead root elsewhere;
/// with the service stopped, none of its processes runs to plant one meanwhile), and
/// hands them back with `lchown` (L72).
fn root_in_owners_dir(state_dir: &Path) -> Result<Option<(u32, u32)>, String> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let meta = match std::fs::metadata(state_dir) {
        Ok(m) => m,
        // Made now, root's: a gateway run by root (the packaged service has its directory
        // from systemd before it first starts).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", state_dir.display())),
    };
    if meta.uid() == 0 {
        return Ok(None);
    }
    for name in WRITTEN {
        let path = state_dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if !m.file_type().is_file() || m.nlink() > 1 => {
                return Err(format!(
                    "{} is not a plain file; not touching it as root",
                    path.display()
                ))
            }
            _ => {}
        }
    }
    Ok(Some((meta.uid(), meta.gid())))
}

/// What root wrote goes back to the directory's owner; never through a link.
fn give_back(state_dir: &Path, owner: Option<(u32, u32)>) {
    use std::os::unix::fs::MetadataExt;
    let Some((uid, gid)) = owner else { return };
    for name in WRITTEN {
        let path = state_dir.join(name);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file() && m.uid() != uid) {
            let _ = std::os::unix::fs::lchown(&path, Some(uid), Some(gid));
        }
    }
}

/// With no gateway answering on the control socket: the state directory's lock, which a
/// running gateway holds however its socket fares (L72).
fn stopped_gateway(state_dir: &Path) -> Result<crate::state::StateLock, String> {
    match crate::state::lock_state_dir(state_dir, Duration::from_secs(2)) {
        Ok(Some(lock)) => Ok(lock),
        Ok(None) => Err(format!(
            "a gateway runs on {} but its control socket ({}) does not answer: if it is \
             starting, wait a moment and try again; otherwise restart it (sudo systemctl \
             restart hermes-mobile)",
            state_dir.display(),
            crate::server::CONTROL_SOCKET
        )),
        Err(e) => Err(format!("{}: {e}", state_dir.display())),
    }
}

/// `hermes-mobile devices`.
pub fn devices_run(env: &HashMap<String, String>, args: &[String]) -> i32 {
    let (mut json_out, mut forget, mut revoke, mut id) = (false, false, false, None);
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--help" | "-h" => {
                println!("{DEVICES_USAGE}");
                return 0;
            }
            "--json" => json_out = true,
            "--forget" => forget = true,
            "revoke" if !revoke => revoke = true,
            // Where the settings are: these take a value, which goes with them.
            "--state-dir" | "--env-file" => {
                rest.push(a.clone());
                rest.extend(it.next().cloned());
            }
            _ if revoke && id.is_none() && !a.starts_with('-') => id = Some(a.clone()),
            _ => rest.push(a.clone()),
        }
    }
    let config = match settings(env, &rest) {
        Ok(c) => c,
        Err(e) => return fail("devices", e, 2),
    };
    let state_dir = config.state_dir.clone();
    let dir_owner = match root_in_owners_dir(&state_dir) {
        Ok(o) => o,
        Err(e) => return fail("devices", e, 1),
    };
    match (revoke, id) {
        (true, Some(id)) if !id.trim().is_empty() => {
            let ntfy = config.push.as_ref().is_some_and(|p| p.ntfy.is_some());
            let status = revoke_run(&state_dir, &id, forget, ntfy);
            give_back(&state_dir, dir_owner);
            status
        }
        (true, _) => fail("devices", format!("revoke needs a device id\n\n{DEVICES_USAGE}"), 2),
        (false, _) if forget => fail("devices", format!("--forget goes with revoke\n\n{DEVICES_USAGE}"), 2),
        (false, _) => list_run(&state_dir, json_out),
    }
}

fn revoke_run(state_dir: &Path, id: &str, forget: bool, ntfy: bool) -> i32 {
    let shown = reveal(id);
    let request = json!({"cmd": "revoke", "device": id, "forget": forget});
    match ask(state_dir, &request) {
        Ok(Reached::Running(_)) => {}
        Ok(Reached::Stopped) => match revoke_offline(state_dir, id, forget) {
            Ok(true) => {}
            Ok(false) => return fail("devices", format!("no paired device {shown:?}"), 1),
            Err(e) => return fail("devices", e, 1),
        },
        Err(e) => return fail("devices", format!("{shown:?}: {e}"), 1),
    }
    let forgotten = if forget { " and its journal deleted" } else { "" };
    println!("Revoked {shown:?}{forgotten}: its token, push subscriptions and held replies are gone.");
    if ntfy {
        // One topic for every device: nothing here can take it back from one phone.
        println!(
            "ntfy (MOBILE_NTFY_URL) sends every device's notifications to one topic: if that phone \
             had the ntfy app, change the topic and its token, then restart (docs/security.md)."
        );
    }
    0
}

/// With the gateway stopped: the journal's rows and the push subscriptions file.
fn revoke_offline(state_dir: &Path, id: &str, forget: bool) -> Result<bool, String> {
    let _lock = stopped_gateway(state_dir)?;
    let path = journal_path(state_dir)?;
    if !path.exists() {
        return Ok(false);
    }
    let device = DeviceId(id.to_owned());
    let revoked = journal::devices::offline(&path, |conn| journal::devices::revoke(conn, &device, forget))?;
    // Even for an id no longer paired: a revocation whose subscriptions file was not
    // written (a power cut just after it) is finished by revoking again (L71).
    crate::push::store::drop_device(state_dir, &device)?;
    Ok(revoked)
}

/// One device as `--json` prints it.
fn item(d: &Value, history: u64) -> Value {
    json!({
        "id": d["id"], "name": d["name"], "platform": d["platform"],
        "paired_at": d["paired_at"], "last_seen": d["last_seen"], "online": d["online"],
        "push": d["push"], "history": history, "owner": d["owner"],
    })
}

fn list_run(state_dir: &Path, json_out: bool) -> i32 {
    let path = state_dir.join(crate::server::JOURNAL_FILE);
    let items: Vec<Value> = match ask(state_dir, &json!({"cmd": "devices"})) {
        Ok(Reached::Running(answer)) => {
            let devices = answer["devices"].as_array().cloned().unwrap_or_default();
            let ids: Vec<String> = devices
                .iter()
                .map(|d| d["id"].as_str().unwrap_or("").to_owned())
                .collect();
            let sizes = journal::read_history_sizes(&path, &ids).unwrap_or_else(|_| vec![0; ids.len()]);
            devices.iter().zip(sizes).map(|(d, n)| item(d, n)).collect()
        }
        Ok(Reached::Stopped) if !path.exists() => Vec::new(),
        Ok(Reached::Stopped) => match stopped_gateway(state_dir).and_then(|_lock| journal::read_devices(&path)) {
            Ok(listed) => listed
                .into_iter()
                .map(|l| {
                    let p = &l.device;
                    let push = crate::push::store::has_subscription(state_dir, &DeviceId(p.id.clone()));
                    let d = json!({
                        "id": p.id, "name": p.name, "platform": p.platform, "paired_at": p.paired_at,
                        "last_seen": p.last_seen, "online": false, "push": push, "owner": p.owner,
                    });
                    item(&d, l.history)
                })
                .collect(),
            Err(e) => return fail("devices", e, 1),
        },
        Err(e) => return fail("devices", e, 1),
    };
    if json_out {
        for i in &items {
            println!("{i}");
        }
    } else {
        print_table(&items);
    }
    0
}

fn print_table(items: &[Value]) {
    if items.is_empty() {
        println!("No paired devices. Pair one with: hermes-mobile pair");
        return;
    }
    let rows: Vec<[String; 9]> = items
        .iter()
        .map(|i| {
            let s = |k: &str| reveal(i[k].as_str().unwrap_or("")).into_owned();
            let yes = |k: &str| if i[k] == json!(true) { "yes" } else { "no" }.to_owned();
            [
                s("id"),
                s("name"),
                s("platform"),
                when(i["paired_at"].as_u64()),
                when(i["last_seen"].as_u64()),
                yes("online"),
                yes("push"),
                i["history"].as_u64().unwrap_or(0).to_string(),
                yes("owner"),
            ]
        })
        .collect();
    let head = [
        "ID",
        "NAME",
        "PLATFORM",
        "PAIRED",
        "LAST SEEN",
        "ONLINE",
        "PUSH",
        "HISTORY",
        "OWNER",
    ]
    .map(String::from);
    let mut widths = head.clone().map(|h| h.chars().count());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in std::iter::once(&head).chain(&rows) {
        let cells: Vec<String> = r.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", cells.join("  ").trim_end());
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM UTC`; `-` for never.
fn when(ms: Option<u64>) -> String {
    match ms {
        Some(ms) => crate::history_cli::utc(ms),
        None => "-".into(),
    }
}
