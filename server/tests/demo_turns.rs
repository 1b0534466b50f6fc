//! The demo agent end to end: every command, the turn's avatar/typing sequence, uploads
//! echoed back, cards answered and expired (demo-agent.md, decisions M3, P4, P5, U4).
mod common;
use common::*;
use hermes_mobile::client::{MediaAssembler, MessageAssembler};
use hermes_mobile::wire::server::{parse_server_frame, ServerFrame};
use serde_json::{json, Value};

fn text(c: &mut Client, id: &str, t: &str) {
    c.send(json!({"t":"text","id":id,"text":t}));
}

/// Frames of one turn, up to and including the final avatar idle.
fn turn(c: &mut Client) -> Vec<Value> {
    let mut frames = Vec::new();
    loop {
        let f = c.recv();
        let idle = f["t"] == "avatar" && f["state"] == "idle";
        frames.push(f);
        if idle {
            return frames;
        }
    }
}

fn messages(frames: &[Value]) -> Vec<String> {
    let mut a = MessageAssembler::default();
    let mut out = Vec::new();
    for f in frames {
        let s = f.to_string();
        if let Ok(ServerFrame::Message(m)) = parse_server_frame(s.as_bytes()) {
            if let Some(v) = a.push(&m) {
                if v.done {
                    out.push(v.text);
                }
            }
        }
    }
    out
}

#[test]
fn echo_runs_the_whole_turn_sequence() {
    // decisions M3, demo-agent.md "Each reply"
    let server = Server::start(&[]);
    let mut c = Client::hello(&server, "tel-1");
    text(&mut c, "1", "hello there");
    let frames = turn(&mut c);
    assert_eq!(
        types(&frames),
        ["avatar", "typing", "message", "avatar", "typing", "avatar"]
    );
    assert_eq!(frames[0]["state"], "thinking");
    assert_eq!(frames[2]["text"], "echo: hello there");
    assert_eq!(frames[3]["state"], "speaking");
    assert_eq!(frames[4], json!({"t":"typing","stop":true}));
}

#[test]
fn stream_long_help_and_errors() {
    let server = Server::start(&[]);
    let mut c = Client::hello(&server, "tel-1");
    text(&mut c, "1", "/stream one two three");
    let frames = turn(&mut c);
    let versions: Vec<(&str, bool, bool)> = frames
        .iter()
        .filter(|f| f["t"] == "message")
        .map(|f| {
            (
                f["text"].as_str().unwrap(),
                f["edit"].as_bool().unwrap(),
                f["final"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        versions,
        [
            ("one", false, false),
            ("one two", true, false),
            ("one two three", true, true)
        ]
    );

    text(&mut c, "2", "/long 10000");
    let frames = turn(&mut c);
    assert_eq!(
        frames.iter().filter(|f| f["t"] == "message").count(),
        3,
        "split at 3500"
    );
    let long = &messages(&frames)[0];
    assert_eq!(long.chars().count(), 10_000);
    assert!(long.starts_with("0123456789\n0123456789\n"));

    text(&mut c, "3", "/help");
    assert!(messages(&turn(&mut c))[0].contains("/approve"));
    for (i, bad) in ["/long abc", "/file 99999999", "/frobnicate"].iter().enumerate() {
        text(&mut c, &format!("e{i}"), bad);
        let m = messages(&turn(&mut c));
        assert!(m[0].starts_with("error:"), "{bad}: {m:?}");
    }
}

#[test]
fn image_and_file_come_down_and_reassemble() {
    // demo-agent.md /image, /file; decisions U1
    let server = Server::start(&[]);
    let mut c = Client::hello(&server, "tel-1");
    text(&mut c, "1", "/image");
    let frames = turn(&mut c);
    let img = frames.iter().find(|f| f["t"] == "media").unwrap();
    assert_eq!(
        (img["kind"].as_str(), img["mime"].as_str(), img["filename"].as_str()),
        (Some("image"), Some("image/png"), Some("demo.png"))
    );

    let n = 3 * 1024 * 1024 + 5;
    text(&mut c, "2", &format!("/file {n}"));
    let frames = turn(&mut c);
    let mut a = MediaAssembler::default();
    let mut file = None;
    for f in frames.iter().filter(|f| f["t"] == "media") {
        let s = f.to_string();
        if let Ok(ServerFrame::Media(m)) = parse_server_frame(s.as_bytes()) {
            file = a.push(&m).unwrap().or(file);
        }
    }
    let file = file.expect("the file completed");
    assert_eq!(file.filename, format!("demo-{n}.bin"));
    assert_eq!(file.data.len(), n);
    assert!(file.data.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
    assert_eq!(frames.iter().filter(|f| f["t"] == "media").count(), 2);
}

#[test]
fn multipart_upload_is_echoed_and_saved() {
    // decisions U4, U6; demo-agent.md "media"
    let server = Server::start(&[]);
    let mut c = Client::hello(&server, "tel-1");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let b64 = |b: &[u8]| hermes_mobile::base64::encode(b);
    c.send(json!({"t":"media","id":"up-1","kind":"image","filename":"../photo.png","part":1,"parts":2,"data":b64(&data[60_000..])}));
    c.send(json!({"t":"media","id":"up-1","kind":"image","filename":"../photo.png","part":0,"parts":2,"data":b64(&data[..60_000])}));
    let frames = turn(&mut c);
    assert_eq!(messages(&frames), ["got image ../photo.png (100000 bytes, image/png)"]);
    let media = frames.iter().find(|f| f["t"] == "media").unwrap();
    assert_eq!(
        (media["reply_to"].as_str(), media["kind"].as_str()),
        (Some("up-1"), Some("image"))
    );
    assert_eq!(
        hermes_mobile::base64::decoded_len(media["data"].as_str().unwrap()),
        100_000
    );
    let saved: Vec<_> = std::fs::read_dir(server.state_dir.join("media"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // The upload, and (L63) the demo's echo of it, a file sent to the device.
    assert_eq!(saved.len(), 2, "{saved:?}");
    for path in &saved {
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(name.ends_with("-tel-1-_photo.png"), "sanitized, never a path: {name}");
        assert_eq!(std::fs::read(path).unwrap(), data);
    }
}

#[test]
fn voice_is_heard() {
    let server = Server::start(&[]);
    let mut c = Client::hello(&server, "tel-1");
    c.send(json!({"t":"audio","id":"a1","format":"ogg","data":hermes_mobile::base64::encode(b"OggS1234"),"text":"hi"}));
    assert_eq!(messages(&turn(&mut c)), ["heard 8 bytes of ogg: hi"]);
}

#[test]
fn cards_are_answered_and_foreign_answers_forbidden() {
    // decisions P2, P4
    let server = Server::start(&[]);
    let mut c = Client::hello(&server, "tel-1");
    let mut other = Client::hello(&server, "tel-2");
    text(&mut c, "1", "/approve rm -rf /tmp/x");
    let frames = turn(&mut c);
    let card = frames.iter().find(|f| f["t"] == "prompt").unwrap().clone();
    assert_eq!(
        (card["command"].as_str(), card["description"].as_str()),
        (Some("rm -rf /tmp/x"), Some("demo approval"))
    );
    let id = card["id"].as_str().unwrap();

    other.send(json!({"t":"prompt","prompt_id":id,"option_id":"once"}));
    let err = other.recv();
    assert_eq!(
        (err["code"].as_str(), err["fatal"].as_bool()),
        (Some("forbidden"), Some(false))
    );

    c.send(json!({"t":"prompt","prompt_id":id,"option_id":"session"}));
    let frames = c.until("message");
    let mut done = frames[0].clone();
    assert!(done["seq"].as_u64().is_some(), "issue 24: kept in the journal");
    done.as_object_mut().unwrap().remove("seq");
    assert_eq!(done, json!({"t":"prompt_done","id":id,"option_id":"session"}));
    assert_eq!(frames.last().unwrap()["text"], "approved (session): rm -rf /tmp/x");
    turn(&mut c);

    text(&mut c, "2", "/ask Which colour? | red | blue");
    let frames = turn(&mut c);
    let id = frames.iter().find(|f| f["t"] == "prompt").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    c.send(json!({"t":"prompt","prompt_id":id,"option_id":"other","text":"green"}));
    assert_eq!(c.until("message").last().unwrap()["text"], "you said: green");
}

#[test]
fn ttl_cards_expire_with_the_safe_default() {
    // decisions P5; demo-agent.md /ttl
    let server = Server::start(&[]);
    let mut c = Client::hello(&server, "tel-1");
    text(&mut c, "1", "/ttl 1 reboot");
    let frames = turn(&mut c);
    let card = frames.iter().find(|f| f["t"] == "prompt").unwrap().clone();
    assert_eq!(card["timeout_seconds"], 1);
    let frames = c.until("message");
    let done = frames.iter().find(|f| f["t"] == "prompt_done").unwrap();
    assert_eq!(
        (done["expired"].as_bool(), done["option_id"].as_str()),
        (Some(true), Some("deny"))
    );
    assert_eq!(frames.last().unwrap()["text"], "expired: reboot");
}
