//! A scripted agent for the server's agent-link tests (docs/agent-protocol.md), in Rust so
//! that `cargo test` needs nothing but Rust (issue 17). `cargo test` builds it with the
//! tests; server/tests/agent_link.rs runs it as an `exec:` child.
//!
//! It says hello, then answers each user message by its text:
//! - `echo <words>`: reply "echo: <words>" (done), end_turn
//! - `stream`: three replies to one id, the last done, end_turn
//! - `crash`: exits with status 3 (the gateway restarts it)
//! - `garbage`: writes a line that is not JSON, then replies "after garbage"
//! - `huge`: writes a 17 MiB line, then replies "after huge"
//! - `file <path>`: send_file with that path (ref "f"), then reply, end_turn
//! - `inline`: send_file with base64 data
//! - `deliver <dev>`: deliver "cron says hi" to <dev> (ref "d")
//! - `card`: open_prompt exec_approval "rm -rf /tmp/x"
//! - `confirm`: open_prompt slash_confirm "Deploy to production?"
//! - `ask`: open_prompt clarify "Which branch?" with the choices main and dev
//! - `slow`: nothing (the turn stays in flight)
//! - `later <ms> <message>`: answers `<message>` as above after `<ms>` milliseconds
//!
//! Every line from the gateway is also appended to `$AGENT_LOG` (if set), so tests can see
//! what the agent received. SIGTERM is logged there as "SIGTERM" before exiting 0.

use std::ffi::CString;
use std::io::{BufRead, Write};
use std::sync::OnceLock;

use base64::Engine;
use serde_json::{json, Value};

/// `$AGENT_LOG`, made once before the SIGTERM handler can run.
static LOG_PATH: OnceLock<Option<CString>> = OnceLock::new();

fn log(line: &str) {
    let Some(Some(path)) = LOG_PATH.get() else { return };
    let path = std::path::Path::new(path.to_str().unwrap_or_default());
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{}", line.trim_end_matches('\n'));
    }
}

/// Logs "SIGTERM" and exits 0, with async-signal-safe calls only.
extern "C" fn on_term(_: libc::c_int) {
    if let Some(Some(path)) = LOG_PATH.get() {
        // SAFETY: open, write, close and _exit are async-signal-safe; the path is a valid
        // C string made before the handler was installed.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT, 0o600);
            if fd >= 0 {
                libc::write(fd, b"SIGTERM\n".as_ptr().cast(), 8);
                libc::close(fd);
            }
        }
    }
    // SAFETY: ends the process at once, as the handler must.
    unsafe { libc::_exit(0) }
}

fn send(out: &mut impl Write, v: Value) {
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn main() {
    let path = std::env::var("AGENT_LOG").ok().and_then(|p| CString::new(p).ok());
    LOG_PATH.get_or_init(|| path);
    // SAFETY: installs a handler that only makes async-signal-safe calls.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
    }
    let mut out = std::io::stdout().lock();
    let inline = std::env::var("AGENT_INLINE").as_deref() == Ok("1");
    send(
        &mut out,
        json!({"t": "hello", "v": 1, "agent": "scripted", "inline": inline}),
    );
    let mut n = 0;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        log(&line);
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if msg["t"] != "message" {
            continue;
        }
        n += 1;
        answer(&mut out, &msg, n);
    }
}

/// Answers one user message (see the module docs).
fn answer(out: &mut impl Write, msg: &Value, n: usize) {
    let dev = msg["device"].clone();
    let rid = format!("r{n}");
    let reply = |out: &mut dyn Write, text: &str, done: Option<bool>| {
        let mut v = json!({"t": "reply", "device": dev, "id": rid, "text": text});
        if let Some(done) = done {
            v["done"] = json!(done);
        }
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    };
    if let Some(f) = msg.get("file").filter(|f| f.is_object()) {
        let where_ = match f["path"].as_str().filter(|p| !p.is_empty()) {
            Some(path) => path.to_owned(),
            None => {
                let data = base64::engine::general_purpose::STANDARD
                    .decode(f["data"].as_str().unwrap_or_default())
                    .unwrap_or_default();
                format!("inline {} bytes", data.len())
            }
        };
        let (kind, name, size) = (f["kind"].as_str(), f["name"].as_str(), &f["size"]);
        let text = format!("file {} {} {size} at {where_}", kind.unwrap_or(""), name.unwrap_or(""));
        reply(out, &text, None);
        send(out, json!({"t": "end_turn", "device": dev}));
        return;
    }
    let text = msg["text"].as_str().unwrap_or_default();
    let (word, rest) = text.split_once(' ').unwrap_or((text, ""));
    match word {
        "echo" => reply(out, &format!("echo: {rest}"), Some(true)),
        "stream" => {
            reply(out, "one", Some(false));
            reply(out, "one two", Some(false));
            reply(out, "one two three", Some(true));
        }
        "crash" => std::process::exit(3),
        "garbage" => {
            let _ = writeln!(out, "this is not json");
            reply(out, "after garbage", None);
        }
        "huge" => {
            let _ = writeln!(out, "{{\"t\":\"reply\",\"text\":\"{}\"}}", "x".repeat(17 * 1024 * 1024));
            reply(out, "after huge", None);
        }
        "file" => {
            let name = std::path::Path::new(rest)
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("");
            let v =
                json!({"t": "send_file", "ref": "f", "device": dev, "kind": "document", "name": name, "path": rest});
            send(out, v);
            reply(out, "sent the file", None);
        }
        "inline" => {
            let data = base64::engine::general_purpose::STANDARD.encode(b"inline bytes");
            let v = json!({"t": "send_file", "ref": "f", "device": dev, "kind": "document", "name": "inline.txt", "data": data});
            send(out, v);
        }
        "deliver" => {
            let v = json!({"t": "deliver", "ref": "d", "id": format!("cron-{rest}"), "target": format!("mobile:{rest}"), "text": "cron says hi"});
            send(out, v);
        }
        "card" => {
            let v = json!({"t": "open_prompt", "ref": "p", "device": dev, "prompt": format!("ap-{n}"),
                "kind": "exec_approval", "command": "rm -rf /tmp/x", "description": "delete in root path",
                "options": ["once", "deny"]});
            return send(out, v);
        }
        "confirm" => {
            let v = json!({"t": "open_prompt", "ref": "p", "device": dev, "prompt": format!("cf-{n}"),
                "kind": "slash_confirm", "text": "Deploy to production?"});
            return send(out, v);
        }
        "ask" => {
            let v = json!({"t": "open_prompt", "ref": "p", "device": dev, "prompt": format!("q-{n}"),
                "kind": "clarify", "question": "Which branch?", "choices": ["main", "dev"]});
            return send(out, v);
        }
        "slow" => return,
        "later" => {
            // `later <ms> <message>`: answers <message> after a pause, so that a test can
            // see the answer reach a phone that left meanwhile (issue 18's pushes).
            let (ms, inner) = rest.split_once(' ').unwrap_or((rest, ""));
            std::thread::sleep(std::time::Duration::from_millis(ms.parse().unwrap_or(0)));
            let mut later = msg.clone();
            later["text"] = json!(inner);
            return answer(out, &later, n);
        }
        _ => reply(out, "?", None),
    }
    send(out, json!({"t": "end_turn", "device": dev}));
}
