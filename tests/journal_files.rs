//! Files in the journal and the media store (issue 24 §3, decisions L63), on virtual time:
//! the names the core gives files, the `url` a history item (and a replayed `media`)
//! carries while the store keeps the file, and who may fetch it.
mod common;

use common::*;
use hermes_mobile::media::{self, FileRefusal};
use hermes_mobile::throttle::SourceKey;
use hermes_mobile::wire::DownloadKind;
use hermes_mobile::{AgentCommand, AgentEvent, Config, DeviceId, OutgoingFile};
use serde_json::{json, Value};

const SERVICE: &str = "cron-token-0123456789";
const BOUND: &str = "bound-token-0123456789";

fn config() -> Config {
    let mut c = Config::new(TOKEN);
    c.deliver_tokens = vec![SERVICE.into()];
    c.extra_tokens = vec![("tel-2".into(), BOUND.into())];
    c
}

fn send_file(device: &str, name: &str, data: &[u8]) -> AgentCommand {
    AgentCommand::SendFile {
        device: DeviceId::from(device),
        file: OutgoingFile {
            kind: DownloadKind::Image,
            mime: String::new(),
            filename: name.into(),
            caption: None,
            data: data.to_vec(),
            reply_to: None,
        },
    }
}

fn history(h: &mut Harness, phone: hermes_mobile::ConnId) -> Vec<Value> {
    h.send(phone, json!({"t":"history","id":"h1"}));
    let page = only(h.take(phone), "history").remove(0);
    page["items"].as_array().cloned().unwrap_or_default()
}

/// The key of a `url`, after checking it is this device's route.
fn key_of(url: &Value, device: &str) -> String {
    let url = url.as_str().expect("a url");
    let (d, key) = media::parse_path(url).expect("a path of the route");
    assert_eq!(d, DeviceId::from(device), "{url}");
    key
}

#[test]
fn a_person_s_upload_and_voice_note_are_named_saved_and_carry_a_url() {
    let mut h = Harness::with_journal(config());
    let phone = h.connect("tel-1");
    h.send(phone, json!({"t":"media","id":"up-1","kind":"image","filename":"../cat.png","part":0,"parts":1,"data":b64(b"PNGDATA")}));
    h.send(phone, json!({"t":"audio","id":"a1","format":"ogg","data":b64(b"OggS")}));
    let names: Vec<String> = h
        .take_events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::MessageReceived { file: Some(f), .. } => f.media_name,
            AgentEvent::MessageReceived { audio: Some(a), .. } => a.media_name,
            _ => None,
        })
        .collect();
    assert_eq!(names.len(), 2, "the agent's events name both files");
    assert!(
        names[0].ends_with("-tel-1-_cat.png") && names[1].ends_with("-tel-1-voice.ogg"),
        "{names:?}"
    );
    assert_eq!(h.media.get(&names[0]).map(Vec::as_slice), Some(&b"PNGDATA"[..]));
    let items = history(&mut h, phone);
    assert_eq!(items.len(), 2);
    for (item, name) in items.iter().zip(&names) {
        assert_eq!(item["from"], "user");
        assert!(item.get("data").is_none() && item.get("stored").is_none(), "{item}");
        let key = key_of(&item["url"], "tel-1");
        assert_eq!(media::key_of_name(name), Some(key.as_str()));
        assert!(h.gw.file_kept(&DeviceId::from("tel-1"), &key));
        assert!(
            !h.gw.file_kept(&DeviceId::from("tel-2"), &key),
            "another device's key never matches"
        );
    }
}

#[test]
fn an_agent_s_file_is_kept_too_and_its_url_goes_when_the_store_drops_it() {
    let mut h = Harness::with_journal(config());
    let phone = h.connect("tel-1");
    h.agent(send_file("tel-1", "chart.png", b"CHART"));
    let live = only(h.take(phone), "media");
    assert!(live[0].get("url").is_none(), "a live frame carries its data");
    let items = history(&mut h, phone);
    let key = key_of(&items[0]["url"], "tel-1");
    let (name, data) = h.media.iter().next().expect("saved");
    assert_eq!(
        (media::key_of_name(name), data.as_slice()),
        (Some(key.as_str()), &b"CHART"[..])
    );
    let name = name.clone();
    h.remove_media(&name);
    let items = history(&mut h, phone);
    assert!(
        items[0].get("url").is_none(),
        "no url once the store no longer has it: {}",
        items[0]
    );
    assert_eq!(items[0]["filename"], "chart.png", "the metadata stays");
}

#[test]
fn a_replayed_file_without_its_bytes_carries_its_url() {
    let mut h = Harness::with_journal(config());
    let phone = h.connect("tel-1");
    h.agent(send_file("tel-1", "chart.png", b"CHART"));
    h.close(phone);
    let conn = h.open();
    h.send(
        conn,
        json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"},"resume":{"after":0}}),
    );
    let media = only(h.take(conn), "media").remove(0);
    assert!(media.get("data").is_none(), "delivered before: no bytes kept");
    key_of(&media["url"], "tel-1");
}

#[test]
fn a_restart_keeps_the_url_of_what_the_directory_still_holds() {
    let mut h = Harness::with_journal(config());
    let phone = h.connect("tel-1");
    h.agent(send_file("tel-1", "a.png", b"A"));
    h.agent(send_file("tel-1", "b.png", b"B"));
    h.close(phone);
    h.restart(false);
    // The server lists the directory before the loop: only a.png is still there.
    let names: Vec<String> = h.media.keys().filter(|n| n.ends_with("a.png")).cloned().collect();
    h.gw.restore_media(names.iter().map(String::as_str));
    let phone = h.connect("tel-1");
    let items = history(&mut h, phone);
    let urls: Vec<bool> = items.iter().map(|i| i.get("url").is_some()).collect();
    assert_eq!(urls, [true, false], "{items:?}");
}

#[test]
fn with_history_off_an_agent_s_file_is_not_kept_and_saves_waiting_are_bounded() {
    let mut h = Harness::with_journal(Config {
        journal: Some(hermes_mobile::journal::JournalConfig {
            history: false,
            ..Default::default()
        }),
        ..config()
    });
    let phone = h.connect("tel-1");
    h.agent(send_file("tel-1", "a.png", b"A"));
    assert!(h.media.is_empty(), "no history, nothing to show a url in");
    h.close(phone);

    let mut h = Harness::with_journal(config());
    h.held_media = Some(Vec::new());
    let phone = h.connect("tel-1");
    let big = vec![7u8; 8 << 20];
    for i in 0..5 {
        h.agent(send_file("tel-1", &format!("{i}.bin"), &big));
    }
    assert_eq!(h.held_media.as_ref().map(Vec::len), Some(4), "32 MiB wait at most");
    h.save_held_media();
    h.held_media = None;
    h.agent(send_file("tel-1", "5.bin", b"x"));
    let items = history(&mut h, phone);
    let urls: Vec<bool> = items.iter().map(|i| i.get("url").is_some()).collect();
    assert_eq!(urls, [true, true, true, true, false, true]);
}

#[test]
fn only_the_device_s_own_credential_may_fetch_and_failures_count_as_failed_hellos() {
    // L63: the token is checked as a hello as the path's device would be (H1–H3, L52).
    let mut h = Harness::with_journal(config());
    let (tel1, tel2) = (DeviceId::from("tel-1"), DeviceId::from("tel-2"));
    let source = SourceKey::of("192.0.2.7".parse().unwrap());
    let now = h.now;
    assert_eq!(h.gw.authorize_file(now, source, TOKEN, &tel1), Ok(()));
    assert_eq!(h.gw.authorize_file(now, source, BOUND, &tel2), Ok(()));
    assert_eq!(
        h.gw.authorize_file(now, source, BOUND, &tel1),
        Err(FileRefusal::Forbidden)
    );
    assert_eq!(
        h.gw.authorize_file(now, source, TOKEN, &tel2),
        Err(FileRefusal::Forbidden)
    );
    assert_eq!(
        h.gw.authorize_file(now, source, SERVICE, &tel1),
        Err(FileRefusal::Forbidden)
    );
    assert_eq!(
        h.gw.authorize_file(now, source, "", &tel1),
        Err(FileRefusal::Unauthorized)
    );
    for _ in 0..9 {
        assert_eq!(
            h.gw.authorize_file(now, source, "guess", &tel1),
            Err(FileRefusal::Unauthorized)
        );
    }
    assert_eq!(
        h.gw.authorize_file(now, source, TOKEN, &tel1),
        Err(FileRefusal::Blocked { retry_after_secs: 1 }),
        "a blocked address is refused without its token being looked at"
    );
    let elsewhere = SourceKey::of("198.51.100.1".parse().unwrap());
    assert_eq!(h.gw.authorize_file(now, elsewhere, TOKEN, &tel1), Ok(()));
}

#[test]
fn forget_deletes_the_device_s_files_and_no_other_s() {
    // Issue 24 §3: forget deletes the device's "files in the media store" (L60).
    let mut h = Harness::with_journal(config());
    let phone = h.connect("tel-1");
    let other = h.connect("tel-3");
    h.agent(send_file("tel-1", "mine.png", b"mine"));
    h.agent(send_file("tel-3", "theirs.png", b"theirs"));
    assert_eq!(h.media.len(), 2);
    h.send(phone, json!({"t":"forget","id":"f1"}));
    assert_eq!(only(h.take(phone), "forgotten").len(), 1);
    let left: Vec<&String> = h.media.keys().collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].contains("-tel-3-"), "{left:?}");
    let theirs = history(&mut h, other);
    assert!(
        theirs.iter().any(|i| i.get("url").is_some()),
        "the other device keeps its url"
    );
}

#[test]
fn a_flood_of_forgets_sweeps_the_device_s_files_once_per_file_named_between_them() {
    // L60, review D #9: each `forget` used to queue a sweep of the media directory (and a
    // log line) on the file worker. Review E #3: a file sent after the last `forget` is
    // not swept by a sweep that a `forget` before it asked for.
    let mut h = Harness::with_journal(config());
    let phone = h.connect("tel-1");
    for i in 0..1000 {
        h.send(phone, json!({"t":"forget","id":format!("f{i}")}));
    }
    assert_eq!(only(h.take(phone), "forgotten").len(), 1000);
    assert_eq!(h.sweeps, 1, "one sweep takes every file named before it");
    h.agent(send_file("tel-1", "after.png", b"after"));
    assert_eq!(h.media.len(), 1);
    h.send(phone, json!({"t":"forget","id":"later"}));
    assert_eq!(h.sweeps, 2, "a file named since: swept again");
    assert!(h.media.is_empty());
    h.send(phone, json!({"t":"forget","id":"again"}));
    assert_eq!(h.sweeps, 2, "nothing named since");
}

#[test]
fn a_voice_note_saved_after_a_forget_is_swept_by_the_next_forget() {
    // L60 (review F #5): a message's file is saved when its commit hands it to the agent,
    // after a sweep that a `forget` in the meantime queued.
    let mut h = Harness::with_journal(config());
    let phone = h.connect("tel-1");
    h.auto_commit = false;
    h.send(phone, json!({"t":"audio","id":"a1","format":"ogg","data":b64(b"OggS")}));
    h.send(phone, json!({"t":"forget","id":"f1"}));
    h.commit();
    assert_eq!(h.media.len(), 1, "saved after the sweep");
    h.send(phone, json!({"t":"forget","id":"f2"}));
    h.commit();
    assert!(h.media.is_empty(), "{:?}", h.media.keys());
}

#[test]
fn a_file_the_agent_named_past_the_limits_is_kept_as_its_live_frame_carried_it() {
    // L48, review A #10: history items and replays are frames too (schema: Filename, Text, Id).
    let mut h = Harness::with_journal(config());
    let (phone, _) = h.connect_frames("tel-1");
    let name = format!("{}.png", "n".repeat(300));
    h.agent(AgentCommand::SendFile {
        device: DeviceId::from("tel-1"),
        file: OutgoingFile {
            kind: DownloadKind::Image,
            mime: String::new(),
            filename: name,
            caption: Some("c".repeat(13_000)),
            data: b"PNG".to_vec(),
            reply_to: Some(String::new()),
        },
    });
    let live = only(h.take(phone), "media").remove(0);
    let item = history(&mut h, phone).remove(0);
    for field in ["filename", "caption", "mime"] {
        assert_eq!(item[field], live[field], "{field}");
    }
    assert_eq!(item["filename"].as_str().unwrap().chars().count(), 200);
    assert!(item["filename"].as_str().unwrap().ends_with(".png"));
    assert_eq!(item["mime"], "image/png");
    assert!(item.get("reply_to").is_none(), "{item}");
}
