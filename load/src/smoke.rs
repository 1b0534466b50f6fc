//! `smoke`: one pass through what a new user does first, against a running gateway with the
//! demo agent. CI runs it against `cargo run --release` exactly as the README says, and
//! against the aarch64 release binary under qemu. Every step fails loudly with what it saw.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use base64::Engine;
use serde_json::json;

use crate::client::Client;

fn fail(step: &str, what: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{step}: {what}"))
}

/// `GET /healthz` over a plain socket; the body must say `"status":"ok"`.
fn healthz(url: &str) -> io::Result<String> {
    let authority = url.trim_start_matches("ws://").split('/').next().unwrap_or("");
    let mut stream = TcpStream::connect(authority)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    if !response.starts_with("HTTP/1.1 200") || !response.contains("\"status\":\"ok\"") {
        return Err(fail("healthz", format!("unexpected answer {response:?}")));
    }
    Ok(response.rsplit("\r\n\r\n").next().unwrap_or("").to_owned())
}

/// Reads frames until the final chunk of a `message`; returns the joined text of its
/// latest version (decisions M1/M2) and the frame types seen on the way.
fn read_reply(c: &mut Client, step: &str) -> io::Result<(String, Vec<String>)> {
    let mut parts: Vec<String> = Vec::new();
    let mut seen = Vec::new();
    loop {
        let f = c.recv().map_err(|e| fail(step, e))?;
        let t = f["t"].as_str().unwrap_or("").to_owned();
        match t.as_str() {
            "error" => return Err(fail(step, format!("error frame {f}"))),
            "message" => {
                let index = f["chunk"]["index"].as_u64().unwrap_or(0) as usize;
                let total = f["chunk"]["total"].as_u64().unwrap_or(1) as usize;
                if index == 0 {
                    parts = vec![String::new(); total];
                }
                if let Some(slot) = parts.get_mut(index) {
                    *slot = f["text"].as_str().unwrap_or("").to_owned();
                }
                seen.push(t);
                if f["final"] == true {
                    return Ok((parts.concat(), seen));
                }
            }
            _ => seen.push(t),
        }
    }
}

/// Reads `media` frames until the final chunk of one file; returns its bytes.
fn read_file(c: &mut Client, step: &str) -> io::Result<Vec<u8>> {
    let mut data = Vec::new();
    loop {
        let f = c.recv().map_err(|e| fail(step, e))?;
        match f["t"].as_str() {
            Some("error") => return Err(fail(step, format!("error frame {f}"))),
            Some("media") => {
                let chunk = base64::engine::general_purpose::STANDARD
                    .decode(f["data"].as_str().unwrap_or(""))
                    .map_err(|e| fail(step, format!("bad base64: {e}")))?;
                data.extend_from_slice(&chunk);
                if f["final"] == true {
                    return Ok(data);
                }
            }
            _ => {}
        }
    }
}

/// The whole smoke: health, hello, a demo text turn and, with `upload > 0`, an upload of that
/// many bytes in three parts echoed back intact.
pub fn run(url: &str, token: &str, upload: usize) -> io::Result<()> {
    let health = healthz(url)?;
    println!("smoke: healthz ok {health}");

    let mut c = Client::connect(url).map_err(|e| fail("connect", e))?;
    let ready = c.hello(token, "smoke-1").map_err(|e| fail("hello", e))?;
    if ready["session"] != "mobile:smoke-1" {
        return Err(fail("hello", format!("unexpected ready {ready}")));
    }
    println!("smoke: hello -> ready ok");

    let run = format!("{:x}", std::process::id());
    c.send(&json!({"t":"text","id":format!("smoke-{run}-1"),"text":"hello from smoke"}))?;
    let (text, seen) = read_reply(&mut c, "text turn")?;
    if text != "echo: hello from smoke" {
        return Err(fail("text turn", format!("expected the demo's echo, got {text:?}")));
    }
    if seen.first().map(String::as_str) != Some("avatar") {
        return Err(fail("text turn", format!("expected avatar first (M3), saw {seen:?}")));
    }
    println!("smoke: demo text turn ok");

    if upload > 0 {
        let data: Vec<u8> = (0..upload).map(|i| (i * 7 % 256) as u8).collect();
        let chunk = upload.div_ceil(3);
        let parts = data.chunks(chunk).count();
        let id = format!("smoke-{run}-file");
        for (part, piece) in data.chunks(chunk).enumerate() {
            let b64 = base64::engine::general_purpose::STANDARD.encode(piece);
            c.send(&json!({"t":"media","id":id,"kind":"document","filename":"smoke.bin",
                "part":part,"parts":parts,"data":b64}))?;
        }
        let (text, _) = read_reply(&mut c, "upload")?;
        let expected = format!("got document smoke.bin ({upload} bytes, application/octet-stream)");
        if text != expected {
            return Err(fail("upload", format!("expected {expected:?}, got {text:?}")));
        }
        let echoed = read_file(&mut c, "upload echo")?;
        if echoed != data {
            return Err(fail(
                "upload echo",
                format!("{} bytes came back, not the {} sent", echoed.len(), data.len()),
            ));
        }
        println!("smoke: {upload}-byte upload in {parts} parts echoed back intact");
    }
    c.close();
    println!("smoke: ok");
    Ok(())
}
