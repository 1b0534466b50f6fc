//! The `/files/` route over real sockets (issue 24 §3, decisions L63): a history item's
//! `url` fetched with the device's own token gives the file's bytes; any other credential,
//! another device's path, a path that tries to leave the media directory, or a file no
//! longer kept gets 401, 403 or 404.
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const BOUND: &str = "bound-token-0123456789";

/// A GET with these extra header lines; the status line's code, the head and the body.
fn get(server: &Server, path: &str, headers: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n").unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let end = out.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head") + 4;
    let head = String::from_utf8_lossy(&out[..end]).into_owned();
    let code = head[9..12].parse().unwrap();
    (code, head, out[end..].to_vec())
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}\r\n")
}

/// A phone sends an image; the demo echoes it back. The history's two file items, once
/// both carry a url (the echo is saved off the loop, a moment after it went out).
fn upload_and_read_history(server: &Server, data: &[u8]) -> (Client, Vec<Value>) {
    let mut phone = Client::hello(server, "tel-1");
    let b64 = hermes_mobile::base64::encode(data);
    phone.send(json!({"t":"media","id":"up-1","kind":"image","filename":"cat.png","part":0,"parts":1,"data":b64}));
    phone.until("media"); // the demo's echo
    let mut files = Vec::new();
    wait_until("both files have a url", Duration::from_secs(5), || {
        phone.send(json!({"t":"history","id":"h1"}));
        let page = phone.until("history").pop().unwrap();
        let items: Vec<Value> = page["items"].as_array().unwrap().clone();
        files = items.into_iter().filter(|i| i["t"] == "media").collect();
        files.len() == 2 && files.iter().all(|f| f.get("url").is_some())
    });
    (phone, files)
}

#[test]
fn a_history_url_gives_the_device_its_own_file_and_nobody_else() {
    let server = Server::start(&[("MOBILE_EXTRA_TOKENS", &format!("tel-2={BOUND}"))]);
    let data: Vec<u8> = (0..50_000u32).map(|i| (i * 13) as u8).collect();
    let (_phone, files) = upload_and_read_history(&server, &data);
    assert_eq!(files.len(), 2, "the upload and the demo's echo: {files:?}");
    let mine = files.iter().find(|f| f["from"] == "user").expect("the upload");
    let url = mine["url"].as_str().expect("a url while the store keeps it").to_owned();
    assert!(url.starts_with("/files/") && mine.get("data").is_none(), "{mine}");

    let (code, head, body) = get(&server, &url, &bearer(TOKEN));
    assert_eq!(code, 200, "{head}");
    assert_eq!(body, data);
    for line in [
        "Content-Type: image/png",
        &format!("Content-Length: {}", data.len()),
        "Cache-Control: private",
        "X-Content-Type-Options: nosniff",
    ] {
        assert!(head.contains(&format!("\r\n{line}\r\n")), "{line}: {head}");
    }
    let echo = files.iter().find(|f| f.get("from").is_none()).expect("the echo");
    let (code, _, body) = get(&server, echo["url"].as_str().unwrap(), &bearer(TOKEN));
    assert_eq!((code, body == data), (200, true), "a file sent to the device too");

    // Any credential but the device's own.
    assert_eq!(get(&server, &url, "").0, 401, "no token");
    let (code, head, _) = get(&server, &url, &bearer("wrong-token-0123456789"));
    assert_eq!(code, 401);
    assert!(head.contains("\r\nWWW-Authenticate: Bearer\r\n"), "{head}");
    assert_eq!(
        get(&server, &url, &bearer(BOUND)).0,
        403,
        "a token bound to another device"
    );
    // Another device's path to the same key: its digest is tel-1's.
    let key = url.rsplit('/').next().unwrap();
    let other = format!("/files/{}/{key}", base64url("tel-2"));
    assert_eq!(get(&server, &other, &bearer(BOUND)).0, 404);
    assert_eq!(
        get(&server, &other, &bearer(TOKEN)).0,
        403,
        "tel-2 is bound to its own token"
    );
    let third = format!("/files/{}/{key}", base64url("tel-3"));
    assert_eq!(get(&server, &third, &bearer(TOKEN)).0, 404);
    // Nothing ever leaves the media directory.
    let dev = base64url("tel-1");
    for path in [
        format!("/files/{dev}/../../journal.sqlite3"),
        format!("/files/{dev}/..%2F..%2Fjournal.sqlite3"),
        format!("/files/{dev}/{key}/.."),
        "/files/../token".to_owned(),
        format!("/files/{dev}/{}", "0".repeat(32)),
    ] {
        assert_eq!(get(&server, &path, &bearer(TOKEN)).0, 404, "{path}");
    }
    assert!(!server.log_text().contains(TOKEN), "a token is never logged");
}

#[test]
fn a_file_gone_from_the_disk_is_404_and_failed_tokens_are_throttled() {
    let server = Server::start(&[]);
    let (_phone, files) = upload_and_read_history(&server, b"\x89PNG tiny");
    let url = files[0]["url"].as_str().unwrap().to_owned();
    let key = url.rsplit('/').next().unwrap();
    for entry in std::fs::read_dir(server.state_dir.join("media")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_str().unwrap().starts_with(key) {
            std::fs::remove_file(path).unwrap();
        }
    }
    assert_eq!(get(&server, &url, &bearer(TOKEN)).0, 404);
    // L52: failed tokens at the route count as failed hellos from the address.
    for _ in 0..10 {
        assert_eq!(get(&server, &url, &bearer("guess-0123456789abcdef")).0, 401);
    }
    let (code, head, _) = get(&server, &url, &bearer(TOKEN));
    assert_eq!(code, 429, "{head}");
    assert!(head.contains("\r\nRetry-After: "), "{head}");
}

#[test]
fn forget_deletes_the_device_files_from_the_media_store_and_no_other() {
    // Issue 24 §3: forget deletes "its files in the media store".
    let server = Server::start(&[]);
    let mut other = Client::hello(&server, "tel-9");
    let b64 = hermes_mobile::base64::encode(b"someone else's");
    other.send(json!({"t":"media","id":"o-1","kind":"document","filename":"keep.txt","part":0,"parts":1,"data":b64}));
    other.until("media");
    let (mut phone, files) = upload_and_read_history(&server, b"\x89PNG mine");
    let url = files[0]["url"].as_str().unwrap().to_owned();
    let media = server.state_dir.join("media");
    let count = || std::fs::read_dir(&media).unwrap().count();
    assert_eq!(count(), 4, "two files each");
    phone.send(json!({"t":"forget","id":"f1"}));
    phone.until("forgotten");
    wait_until("tel-1's files deleted", Duration::from_secs(5), || count() == 2);
    assert_eq!(get(&server, &url, &bearer(TOKEN)).0, 404);
    let names: Vec<String> = std::fs::read_dir(&media)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().all(|n| n.contains("-tel-9-")), "{names:?}");
}

fn base64url(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}
