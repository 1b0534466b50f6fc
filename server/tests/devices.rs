//! Paired devices (issue 26) against the real gateway over loopback: `hermes-mobile pair`
//! and `devices` talking to the running gateway through its control socket (and to the
//! journal with it stopped), `POST /pair`, `hello` with a device token, revocation cutting
//! a live phone off, a restart, `MOBILE_SHARED_TOKEN=off`, and owner frames.
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// The CLI on the server's state directory.
fn cli(state_dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(binary())
        .env_clear()
        .env("MOBILE_STATE_DIR", state_dir)
        .args(args)
        .output()
        .expect("run the CLI");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `hermes-mobile pair`: the code of its link.
fn pair_code(state_dir: &std::path::Path, extra: &[&str]) -> String {
    let mut args = vec!["pair"];
    args.extend_from_slice(extra);
    let (status, out, err) = cli(state_dir, &args);
    assert_eq!(status, 0, "{out}\n{err}");
    assert!(!out.contains("#token="), "the link holds no token: {out}");
    let at = out.find("#pair=").unwrap_or_else(|| panic!("no pairing link: {out}"));
    out[at + 6..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "-_".contains(*c))
        .collect()
}

/// `POST /pair`: its status and JSON body, and the whole response.
fn post_pair(server: &Server, body: &Value) -> (u16, Value, String) {
    let body = body.to_string();
    let response = server.http(&format!(
        "POST /pair HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    let status = response.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let json = response
        .split("\r\n\r\n")
        .nth(1)
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json, response)
}

/// Pairs `device` with a new code; its token.
fn paired(server: &Server, device: &str, owner: bool) -> String {
    let code = pair_code(&server.state_dir, if owner { &["--owner"] } else { &[] });
    let (status, body, response) = post_pair(
        server,
        &json!({"code": code, "device": {"id": device, "name": "Pixel 8", "platform": "android"}}),
    );
    assert_eq!(status, 200, "{response}");
    assert_eq!(body["device"]["id"], device);
    body["token"].as_str().expect("a token").to_owned()
}

fn hello(server: &Server, token: &str, device: &str) -> (Client, Value) {
    let mut c = Client::connect(server);
    c.send(json!({"t":"hello","token":token,"device":{"id":device}}));
    let first = c.recv();
    (c, first)
}

fn devices_json(state_dir: &std::path::Path) -> Vec<Value> {
    let (status, out, err) = cli(state_dir, &["devices", "--json"]);
    assert_eq!(status, 0, "{out}\n{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect()
}

#[test]
fn a_phone_pairs_with_a_code_from_the_cli_and_revoking_it_cuts_it_off_within_a_second() {
    let server = Server::start(&[]);
    let token = paired(&server, "tel-1", false);
    assert_eq!(token.len(), 43, "256 bits");
    let (mut phone, ready) = hello(&server, &token, "tel-1");
    assert_eq!(ready["t"], "ready", "{ready}");
    // Its token opens no other device, and its id takes no other token (H2).
    let (mut other, e) = hello(&server, &token, "tel-2");
    assert_eq!(
        (e["code"].as_str(), e["fatal"].as_bool()),
        (Some("forbidden"), Some(true))
    );
    assert_eq!(other.closed().1.map(|c| c.0), Some(1008));
    let (mut shared, e) = hello(&server, TOKEN, "tel-1");
    assert_eq!(e["code"], "forbidden");
    assert_eq!(shared.closed().1.map(|c| c.0), Some(1008));

    let list = devices_json(&server.state_dir);
    assert_eq!(list.len(), 1, "{list:?}");
    let d = &list[0];
    assert_eq!(
        (d["id"].as_str(), d["name"].as_str(), d["platform"].as_str()),
        (Some("tel-1"), Some("Pixel 8"), Some("android"))
    );
    assert_eq!(
        (d["online"].as_bool(), d["owner"].as_bool(), d["push"].as_bool()),
        (Some(true), Some(false), Some(false))
    );
    assert!(
        d["paired_at"].as_u64().is_some() && d["last_seen"].as_u64().is_some() && d["history"].is_u64(),
        "{d}"
    );

    // The phone is cut off as the revocation is asked, before its commit: timed from the
    // CLI's start, not its exit (which waits for the fsync).
    let asked = Instant::now();
    let revoking = Command::new(binary())
        .env_clear()
        .env("MOBILE_STATE_DIR", &server.state_dir)
        .args(["devices", "revoke", "tel-1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the CLI");
    let (frames, close) = phone.closed();
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(1), "cut off in {took:?}");
    let out = revoking.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let e = frames.last().expect("an error first");
    assert_eq!(
        (e["code"].as_str(), e["fatal"].as_bool()),
        (Some("auth_failed"), Some(true)),
        "{frames:?}"
    );
    assert_eq!(close.map(|c| c.0), Some(1008));
    let (_, e) = hello(&server, &token, "tel-1");
    assert_eq!(e["code"], "auth_failed");
    assert!(devices_json(&server.state_dir).is_empty());
    let (status, _, err) = cli(&server.state_dir, &["devices", "revoke", "tel-1"]);
    assert_eq!(status, 1);
    assert!(err.contains("no paired device"), "{err}");
    // Logged with the id, never the token.
    server.wait_for_log("device \"tel-1\" revoked");
    assert!(!server.log_text().contains(&token));
}

#[test]
fn a_restart_keeps_paired_devices_and_revocations_and_no_token_is_kept_in_clear() {
    let dir = temp_dir("devices-restart");
    let server = Server::start_in(dir.clone(), &[]);
    let kept = paired(&server, "tel-1", true);
    let revoked = paired(&server, "tel-2", false);
    let unused = pair_code(&server.state_dir, &[]);
    let (status, _, _) = cli(&server.state_dir, &["devices", "revoke", "tel-2"]);
    assert_eq!(status, 0);
    // SIGKILL: what was acknowledged is on disk.
    let mut server = server;
    let _ = server.child.kill();
    let _ = server.child.wait();
    for entry in walk(&dir) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        for secret in [&kept, &revoked, &unused] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds a token or code in clear",
                entry.display()
            );
        }
    }
    std::mem::forget(server); // its Drop would remove the state directory
    let server = Server::start_in(dir, &[]);
    let (_, ready) = hello(&server, &kept, "tel-1");
    assert_eq!(ready["t"], "ready", "{ready}");
    let (_, e) = hello(&server, &revoked, "tel-2");
    assert_eq!(e["code"], "auth_failed");
    // The code made before the restart pairs after it.
    let (status, _, response) = post_pair(&server, &json!({"code": unused, "device": {"id": "tel-3"}}));
    assert_eq!(status, 200, "{response}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.is_file() {
            out.push(p);
        }
    }
    out
}

#[test]
fn wrong_codes_are_refused_and_past_ten_a_minute_the_address_waits() {
    let server = Server::start(&[]);
    let code = pair_code(&server.state_dir, &[]);
    let (status, body, _) = post_pair(&server, &json!({"code": "not-the-code-at-all-xx"}));
    assert_eq!((status, body), (403, json!({"error": "forbidden"})));
    for _ in 0..9 {
        assert_eq!(post_pair(&server, &json!({"code": "still-wrong-code-xxxxx"})).0, 403);
    }
    let (status, body, response) = post_pair(&server, &json!({"code": code}));
    assert_eq!(
        (status, body["error"].as_str()),
        (429, Some("too_many_attempts")),
        "{response}"
    );
    let retry: u64 = response
        .lines()
        .find_map(|l| l.strip_prefix("Retry-After: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a Retry-After");
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(post_pair(&server, &json!({"cod": 1})).0, 400);
    assert!(server.http("GET /pair HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    assert!(!server.log_text().contains(&code), "a code is never logged");
}

#[test]
fn with_the_shared_token_off_only_paired_devices_get_in() {
    let server = Server::start(&[("MOBILE_SHARED_TOKEN", "off")]);
    let (mut c, e) = hello(&server, TOKEN, "tel-9");
    assert_eq!(
        (e["code"].as_str(), e["fatal"].as_bool()),
        (Some("auth_failed"), Some(true)),
        "{e}"
    );
    assert_eq!(c.closed().1.map(|c| c.0), Some(1008));
    let token = paired(&server, "tel-1", false);
    let (_, ready) = hello(&server, &token, "tel-1");
    assert_eq!(ready["t"], "ready");
}

#[test]
fn owner_connections_list_and_revoke_devices_and_others_are_forbidden() {
    let server = Server::start(&[]);
    let plain = paired(&server, "tel-1", false);
    let owner = paired(&server, "tel-2", true);
    let (mut phone, _) = hello(&server, &plain, "tel-1");
    phone.send(json!({"t":"devices","id":"d1"}));
    let e = phone.recv();
    assert_eq!(
        (e["code"].as_str(), e["id"].as_str(), e["fatal"].as_bool()),
        (Some("forbidden"), Some("d1"), Some(false)),
        "{e}"
    );
    phone.send(json!({"t":"revoke","id":"r1","device":"tel-2"}));
    assert_eq!(phone.recv()["code"], "forbidden");

    let (mut admin, _) = hello(&server, &owner, "tel-2");
    admin.send(json!({"t":"devices","id":"d2"}));
    let list = admin.until("devices");
    let items = list.last().unwrap()["items"].as_array().unwrap().clone();
    let ids: Vec<(&str, bool, bool)> = items
        .iter()
        .map(|i| {
            (
                i["id"].as_str().unwrap(),
                i["online"].as_bool().unwrap(),
                i["owner"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(ids, [("tel-1", true, false), ("tel-2", true, true)]);
    admin.send(json!({"t":"revoke","id":"r2","device":"tel-1"}));
    assert_eq!(
        admin.until("revoked").last().unwrap(),
        &json!({"t":"revoked","id":"r2","device":"tel-1"})
    );
    let (frames, close) = phone.closed();
    assert_eq!(frames.last().map(|f| f["code"].clone()), Some(json!("auth_failed")));
    assert_eq!(close.map(|c| c.0), Some(1008));
    // The shared token is an owner's too.
    let mut shared = Client::hello(&server, "laptop");
    shared.send(json!({"t":"devices","id":"d3"}));
    assert_eq!(
        shared.until("devices").last().unwrap()["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn with_the_gateway_stopped_the_cli_acts_on_the_journal() {
    let dir = temp_dir("devices-offline");
    std::fs::create_dir_all(&dir).unwrap();
    let code = pair_code(&dir, &["--owner", "--ttl", "120"]);
    assert!(dir.join("journal.sqlite3").exists());
    let server = Server::start_in(dir.clone(), &[]);
    let (status, body, response) = post_pair(&server, &json!({"code": code, "device": {"id": "tel-1"}}));
    assert_eq!(status, 200, "{response}");
    let token = body["token"].as_str().unwrap().to_owned();
    let mut server = server;
    let _ = server.child.kill();
    let _ = server.child.wait();
    std::mem::forget(server);
    let list = devices_json(&dir);
    assert_eq!(list.len(), 1);
    assert_eq!(
        (
            list[0]["id"].as_str(),
            list[0]["online"].as_bool(),
            list[0]["owner"].as_bool()
        ),
        (Some("tel-1"), Some(false), Some(true))
    );
    let (status, out, err) = cli(&dir, &["devices", "revoke", "tel-1", "--forget"]);
    assert_eq!(status, 0, "{out}\n{err}");
    assert!(devices_json(&dir).is_empty());
    let server = Server::start_in(dir, &[]);
    let (_, e) = hello(&server, &token, "tel-1");
    assert_eq!(e["code"], "auth_failed");
}

#[test]
fn the_state_directory_is_one_gateways_and_the_cli_never_writes_behind_a_running_one() {
    let server = Server::start(&[]);
    // A second gateway on the same directory stops before touching it.
    let out = Command::new(binary())
        .env_clear()
        .env("MOBILE_STATE_DIR", &server.state_dir)
        .env("MOBILE_TOKEN", TOKEN)
        .env("MOBILE_HOST", "127.0.0.1")
        .env("MOBILE_PORT", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another gateway runs"),
        "{out:?}"
    );
    // The control socket gone (deleted by hand): the CLI refuses rather than revoke on
    // disk behind the gateway's back, which would leave the token working in memory.
    let token = paired(&server, "tel-1", false);
    std::fs::remove_file(server.state_dir.join("control.sock")).unwrap();
    let (status, _, err) = cli(&server.state_dir, &["devices", "revoke", "tel-1"]);
    assert_eq!(status, 1);
    assert!(err.contains("does not answer") && err.contains("restart it"), "{err}");
    let (_, ready) = hello(&server, &token, "tel-1");
    assert_eq!(ready["t"], "ready", "nothing was revoked behind its back");
}

#[test]
fn a_pairing_must_say_it_is_json() {
    let server = Server::start(&[]);
    let code = pair_code(&server.state_dir, &[]);
    let body = json!({"code": code}).to_string();
    let response = server.http(&format!(
        "POST /pair HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    assert!(response.starts_with("HTTP/1.1 415"), "{response}");
    // The code was not spent.
    assert_eq!(post_pair(&server, &json!({"code": code})).0, 200);
}

#[test]
fn sudo_pair_works_in_a_directory_only_root_can_reach_and_gives_the_files_back() {
    // The packaged service's DynamicUser= state directory: /var/lib/private is root's
    // alone (0700), the directory in it the service user's. `sudo hermes-mobile pair` with
    // the gateway stopped writes there as root and hands what it wrote to the owner (L72);
    // a link planted in place of one of those files is refused.
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root");
        return;
    }
    let root = temp_dir("dynamic-user");
    let private = root.join("private");
    let state = private.join("hermes-mobile");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let nobody = 65534;
    std::os::unix::fs::chown(&state, Some(nobody), Some(nobody)).unwrap();
    pair_code(&state, &["--owner"]);
    let journal = std::fs::metadata(state.join("journal.sqlite3")).unwrap();
    assert_eq!(
        (journal.uid(), journal.gid()),
        (nobody, nobody),
        "given back to the directory's owner"
    );
    let lock = std::fs::metadata(state.join("gateway.lock")).unwrap();
    assert_eq!(lock.uid(), nobody);
    let (status, out, err) = cli(&state, &["devices"]);
    assert_eq!(status, 0, "{out}\n{err}");
    let target = root.join("target");
    std::fs::write(&target, "root's own").unwrap();
    std::os::unix::fs::symlink(&target, state.join("push-subscriptions.json")).unwrap();
    let (status, _, err) = cli(&state, &["devices", "revoke", "tel-1"]);
    assert_eq!(status, 1);
    assert!(err.contains("not a plain file"), "{err}");
    assert_eq!(
        std::fs::metadata(&target).unwrap().uid(),
        0,
        "nothing followed the link"
    );
    let _ = std::fs::remove_dir_all(&root);
}
