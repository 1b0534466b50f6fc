//! `hermes-mobile send`: deliver a message or file to a phone through a running gateway, the
//! way cron (or `hermes send --to mobile:<id>`) does. It connects, says `hello`, sends one
//! `deliver`, and waits for `delivered` or an error. Exit codes are for scripts.

use std::collections::HashMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use hermes_mobile::limits::{MAX_ID_CHARS, MAX_MEDIA_BYTES};
use hermes_mobile::mime::guess_mime;
use serde_json::{json, Value};
use tungstenite::Message;

pub const EXIT_DELIVERED: i32 = 0;
pub const EXIT_FAILED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_OFFLINE: i32 = 3;
pub const EXIT_REFUSED: i32 = 4;
pub const EXIT_REJECTED: i32 = 5;

pub const HELP: &str = "hermes-mobile send: deliver a message to a phone through a running gateway

USAGE:
  hermes-mobile send --to mobile:ID [--text TEXT] [--file PATH [--kind KIND]] [OPTIONS]

  --to TARGET      mobile:<device id> or <device id>; empty: the gateway's MOBILE_HOME_DEVICE
  --text TEXT      the message text
  --file PATH      a file to attach (at most 8 MiB)
  --kind KIND      image, voice, video, document or animation [default: from the file name]
  --url URL        the gateway [default: ws://127.0.0.1:$MOBILE_PORT/ws, port 8787]
  --token-file PATH  read the token from this file (0600) [default: the first
                   MOBILE_DELIVER_TOKENS entry, else MOBILE_TOKEN (each also from its _FILE
                   variable, e.g. in the env file), else the token in the state directory]
  --token TOKEN    works, but every local user can read it in /proc: prefer the above
  --id ID          the delivery id; repeat it to retry without sending twice [default: new]
  --device ID      the device id this sender says hello as [default: hermes-send-<from
                   the delivery id>, so that two jobs at once never replace each other and a
                   retry with the same --id is recognised]
  --timeout SECS   give up after this long [default: 10]
  --env-file PATH  the service's settings [default: /etc/hermes-mobile/hermes-mobile.env if it
                   exists; the environment wins; '' reads none]

EXIT CODES:
  0 delivered   1 could not connect or no answer   2 bad usage
  3 device_offline (retry later)   4 auth_failed or forbidden   5 refused (bad_frame, too_big, ...)
";

struct Args {
    to: String,
    text: Option<String>,
    file: Option<PathBuf>,
    kind: Option<String>,
    url: Option<String>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    id: Option<String>,
    device: Option<String>,
    timeout: Duration,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        to: String::new(),
        text: None,
        file: None,
        kind: None,
        url: None,
        token: None,
        token_file: None,
        id: None,
        device: None,
        timeout: Duration::from_secs(10),
    };
    let mut i = 0;
    while i < args.len() {
        let (flag, inline) = match args[i].split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (args[i].clone(), None),
        };
        let mut value = || -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            args.get(i).cloned().ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--to" => a.to = value()?,
            "--text" => a.text = Some(value()?),
            "--file" => a.file = Some(PathBuf::from(value()?)),
            "--kind" => a.kind = Some(value()?),
            "--url" => a.url = Some(value()?),
            "--token" => a.token = Some(value()?),
            "--token-file" => a.token_file = Some(PathBuf::from(value()?)),
            "--id" => a.id = Some(value()?),
            "--device" => a.device = Some(value()?),
            "--timeout" => {
                let v = value()?;
                let secs: f64 = v.parse().map_err(|_| format!("--timeout must be seconds, got {v:?}"))?;
                if !(secs.is_finite() && secs > 0.0) {
                    return Err("--timeout must be positive".into());
                }
                a.timeout = Duration::from_secs_f64(secs);
            }
            other => return Err(format!("unknown option {other:?} (see send --help)")),
        }
        i += 1;
    }
    if a.token.is_some() && a.token_file.is_some() {
        return Err("give --token or --token-file, not both".into());
    }
    if a.text.is_none() && a.file.is_none() {
        return Err("nothing to send: give --text and/or --file".into());
    }
    // The gateway cuts a longer id (G8) and answers with the cut one, which this command
    // would never recognise as its answer.
    if a.id
        .as_ref()
        .is_some_and(|id| id.is_empty() || id.chars().count() > MAX_ID_CHARS)
    {
        return Err(format!("--id must be 1 to {MAX_ID_CHARS} characters"));
    }
    Ok(a)
}

fn default_token(env: &HashMap<String, String>) -> Result<String, String> {
    let first_deliver = env
        .get("MOBILE_DELIVER_TOKENS")
        .and_then(|l| l.split(',').map(str::trim).find(|t| !t.is_empty()).map(str::to_owned));
    if let Some(t) = first_deliver.or_else(|| {
        env.get("MOBILE_TOKEN")
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
    }) {
        return Ok(t);
    }
    let dir = env
        .get("MOBILE_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::config::default_state_dir(env));
    std::fs::read_to_string(dir.join("token"))
        .map(|t| t.trim().to_owned())
        .map_err(|_| {
            format!(
                "no token: set MOBILE_DELIVER_TOKENS (or MOBILE_DELIVER_TOKENS_FILE) in the env file, or pass --token-file (no token in {} either)",
                dir.display()
            )
        })
}

/// The device id a `send` says hello as: one per delivery id (FNV-1a), so that two cron
/// jobs at once never replace each other (H5), while a retry with the same `--id` is the same
/// sender and the gateway confirms it without sending twice (S4, L34).
fn sender_device(id: &str) -> String {
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("hermes-send-{hash:016x}")
}

fn kind_for(path: &std::path::Path) -> &'static str {
    let mime = guess_mime(
        &path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    match mime.split('/').next() {
        Some("image") if mime == "image/gif" => "animation",
        Some("image") => "image",
        Some("video") => "video",
        Some("audio") => "voice",
        _ => "document",
    }
}

/// Runs `send`; returns the exit code.
pub fn run(env: &HashMap<String, String>, args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return EXIT_DELIVERED;
    }
    let mut args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("hermes-mobile send: {e}");
            return EXIT_USAGE;
        }
    };
    // L55: secrets from files: --token-file, and the *_FILE variables of the env file.
    let wanted = ["MOBILE_TOKEN", "MOBILE_DELIVER_TOKENS"];
    let env = match crate::config::secrets::resolve(env, &[], &wanted, &crate::config::secrets::read_secret_file) {
        Ok(r) => {
            for w in r.warnings {
                eprintln!("hermes-mobile send: warning: {w}");
            }
            r.env
        }
        Err(e) => {
            eprintln!("hermes-mobile send: {e}");
            return EXIT_USAGE;
        }
    };
    if let Some(path) = args.token_file.take() {
        match crate::config::secrets::read_secret_file(&path) {
            Ok((token, warning)) => {
                if let Some(w) = warning {
                    eprintln!("hermes-mobile send: warning: {w}");
                }
                args.token = Some(token);
            }
            Err(e) => {
                eprintln!("hermes-mobile send: --token-file {}: {e}", path.display());
                return EXIT_USAGE;
            }
        }
    } else if args.token.is_some() {
        eprintln!("hermes-mobile send: warning: --token is visible to every local user (/proc/<pid>/cmdline); use --token-file or MOBILE_DELIVER_TOKENS in the env file");
    }
    match deliver(&env, &args) {
        Ok(device) => {
            println!("delivered to {device}");
            EXIT_DELIVERED
        }
        Err((code, message)) => {
            eprintln!("hermes-mobile send: {message}");
            code
        }
    }
}

/// The `deliver` frame for the arguments: the text, the file as base64, an id.
fn deliver_frame(a: &Args) -> Result<Value, (i32, String)> {
    let mut deliver = json!({"t": "deliver", "target": a.to});
    let id = a.id.clone().unwrap_or_else(|| {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!("send-{ms}-{}", std::process::id())
    });
    deliver["id"] = json!(id);
    if let Some(text) = &a.text {
        deliver["text"] = json!(text);
    }
    if let Some(path) = &a.file {
        let data = std::fs::read(path).map_err(|e| (EXIT_USAGE, format!("cannot read {}: {e}", path.display())))?;
        if data.len() > MAX_MEDIA_BYTES {
            return Err((EXIT_REJECTED, format!("{} is over 8 MiB", path.display())));
        }
        let filename = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let kind = a.kind.clone().unwrap_or_else(|| kind_for(path).to_owned());
        deliver["media"] = json!({
            "kind": kind,
            "filename": filename,
            "mime": guess_mime(&filename),
            "data": base64::engine::general_purpose::STANDARD.encode(&data),
        });
    }
    Ok(deliver)
}

fn deliver(env: &HashMap<String, String>, a: &Args) -> Result<String, (i32, String)> {
    let token = match &a.token {
        Some(t) => t.clone(),
        None => default_token(env).map_err(|e| (EXIT_USAGE, e))?,
    };
    let deliver = deliver_frame(a)?;
    let device = a
        .device
        .clone()
        .unwrap_or_else(|| sender_device(deliver["id"].as_str().unwrap_or_default()));
    let default_port = crate::config::DEFAULT_PORT.to_string();
    let port = env.get("MOBILE_PORT").map_or(default_port.as_str(), String::as_str);
    let url = a.url.clone().unwrap_or_else(|| format!("ws://127.0.0.1:{port}/ws"));
    let Some(rest) = url.strip_prefix("ws://") else {
        return Err((
            EXIT_USAGE,
            format!("{url}: only ws:// URLs; run send on the gateway's machine"),
        ));
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    let addr = authority
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| (EXIT_USAGE, format!("cannot resolve {authority}")))?;
    let failed = |m: String| (EXIT_FAILED, m);
    let deadline = Instant::now() + a.timeout;
    let stream =
        TcpStream::connect_timeout(&addr, a.timeout).map_err(|e| failed(format!("cannot connect to {url}: {e}")))?;
    let _ = stream.set_read_timeout(Some(a.timeout));
    let _ = stream.set_write_timeout(Some(a.timeout));
    let (mut ws, _) = tungstenite::client(url.as_str(), stream)
        .map_err(|e| failed(format!("WebSocket handshake with {url} failed: {e}")))?;

    let hello = json!({"t": "hello", "token": token, "device": {"id": device, "name": "hermes-mobile send"}});
    let send = |ws: &mut tungstenite::WebSocket<TcpStream>, v: &Value| {
        ws.send(Message::Text(v.to_string().into()))
            .map_err(|e| failed(format!("send failed: {e}")))
    };
    send(&mut ws, &hello)?;
    let mut sent = false;
    loop {
        if Instant::now() >= deadline {
            return Err(failed("no answer from the gateway in time".into()));
        }
        let msg = ws.read().map_err(|e| failed(format!("connection ended: {e}")))?;
        let Message::Text(text) = msg else { continue };
        let Ok(frame) = serde_json::from_str::<Value>(text.as_str()) else {
            continue;
        };
        match frame["t"].as_str() {
            Some("ready") if !sent => {
                send(&mut ws, &deliver)?;
                sent = true;
            }
            Some("delivered") if frame["id"] == deliver["id"] => {
                let _ = ws.close(None);
                return Ok(frame["device"].as_str().unwrap_or("").to_owned());
            }
            Some("error") => {
                let code = frame["code"].as_str().unwrap_or("error");
                let message = frame["message"].as_str().unwrap_or("");
                let exit = match code {
                    "device_offline" => EXIT_OFFLINE,
                    "auth_failed" | "forbidden" => EXIT_REFUSED,
                    _ => EXIT_REJECTED,
                };
                let _ = ws.close(None);
                return Err((exit, format!("{code}: {message}")));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_delivery_id_says_hello_as_its_own_device_and_a_retry_as_the_same() {
        // issue 8 #16, decisions H5, S4, L34
        assert_ne!(sender_device("job-a"), sender_device("job-b"));
        assert_eq!(sender_device("nightly-1"), sender_device("nightly-1"));
        assert!(sender_device("x").starts_with("hermes-send-"));
        assert!(sender_device(&"x".repeat(1000)).chars().count() <= 120, "within G8");
    }
}
