//! Web Push and ntfy (issue 18) against the real gateway: a fake push service on loopback
//! over TLS (a test CA) that verifies the VAPID signature and decrypts each push with the
//! browser's key, using RustCrypto rather than the gateway's ring (tests/common/fake_push.rs).
mod common;
#[path = "common/fake_push.rs"]
mod fake_push;
#[path = "common/upstream.rs"]
mod upstream;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use fake_push::{Browser, FakePush};
use serde_json::{json, Value};

const SERVICE: &str = "cron-service-token";

struct Setup {
    service: FakePush,
    ca_file: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let service = FakePush::start();
        let dir = temp_dir("push-ca");
        std::fs::create_dir_all(&dir).unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, &service.ca_pem).unwrap();
        Setup { service, ca_file }
    }

    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("MOBILE_PUSH_HOSTS".into(), format!("127.0.0.1:{}", self.service.port)),
            ("MOBILE_PUSH_CA_FILE".into(), self.ca_file.display().to_string()),
            ("MOBILE_PUSH_SUBJECT".into(), "mailto:owner@example.org".into()),
            ("MOBILE_DELIVER_TOKENS".into(), SERVICE.into()),
        ]
    }

    fn gateway(&self, extra: &[(&str, &str)]) -> Server {
        let env = self.env();
        let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        all.extend_from_slice(extra);
        Server::start(&all)
    }
}

/// A phone that turns notifications on: its `ready`, and the browser behind it.
fn subscribe(server: &Server, service: &FakePush, device: &str) -> (Client, Value, std::sync::Arc<Browser>) {
    let mut c = Client::connect(server);
    c.send(json!({"t":"hello","token":TOKEN,"device":{"id":device}}));
    let ready = c.recv();
    let (browser, endpoint) = service.browser(device);
    c.send(json!({"t":"push_subscribe","id":"s1","subscription":browser.subscription(&endpoint),"app_url":"https://pi.example/"}));
    assert_eq!(c.recv(), json!({"t":"push_subscribed","id":"s1"}));
    (c, ready, browser)
}

/// Closes the phone's socket (its screen locked) and waits until the gateway saw it.
fn lock(server: &Server, mut c: Client, device: &str) {
    let _ = c.ws.close(None);
    let _ = c.closed();
    server.wait_for_log(&format!("{device:?} closed"));
}

fn health(server: &Server) -> Value {
    let resp = server.http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    serde_json::from_str(resp.split("\r\n\r\n").nth(1).unwrap()).unwrap()
}

fn service_conn(server: &Server) -> Client {
    let mut c = Client::connect(server);
    c.send(json!({"t":"hello","token":SERVICE,"device":{"id":"cron"}}));
    assert_eq!(c.recv()["t"], "ready");
    c
}

/// Checks that nothing more is pushed for what came before, by waiting for an event rather
/// than sleeping and counting: a marker `deliver` to `device` (locked and subscribed) must be
/// push number `before + 1`. Pushes leave in the order they fall due (a card at once, a reply
/// or a deliver after the 2 s coalescing window, a retry later still), so a push owed to
/// anything earlier would come first.
fn the_next_push_is_a_marker(setup: &Setup, server: &Server, device: &str, before: usize) {
    let mut cron = service_conn(server);
    cron.send(json!({"t":"deliver","id":"marker","target":format!("mobile:{device}"),"text":"marker"}));
    assert_eq!(cron.recv()["held"], true);
    let pushes = setup.service.wait_for(before + 1, Duration::from_secs(10));
    let marker = pushes[before].payload.as_ref().unwrap();
    assert_eq!(pushes.len(), before + 1, "{pushes:#?}");
    assert_eq!(marker["notification"]["body"], "marker", "{pushes:#?}");
    assert_eq!(marker["hermes"]["kind"], "deliver", "{pushes:#?}");
}

#[test]
fn a_final_reply_for_a_locked_phone_is_one_push_that_decrypts_and_is_signed() {
    let setup = Setup::new();
    let server = setup.gateway(&[("MOBILE_DEMO_STEP", "0.15")]);
    let (mut c, ready, _) = subscribe(&server, &setup.service, "tel-1");
    let vapid = ready["capabilities"]["push"]["webpush"]["vapid_public_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(setup.service.pushes().is_empty(), "subscribing sends nothing by itself");
    // The reply streams for about a second; the phone leaves at once.
    c.send(json!({"t":"text","id":"m1","text":"/stream the answer comes while you sleep"}));
    lock(&server, c, "tel-1");
    let pushes = setup.service.wait_for(1, Duration::from_secs(10));
    let p = &pushes[0];
    assert_eq!(p.problem, None, "{p:#?}");
    assert_eq!(p.vapid_key, vapid, "k= is the key ready announced");
    assert_eq!(p.claims["aud"], format!("https://127.0.0.1:{}", setup.service.port));
    assert_eq!(p.claims["sub"], "mailto:owner@example.org");
    let payload = p.payload.as_ref().unwrap();
    assert_eq!(payload["web_push"], 8030);
    assert_eq!(payload["notification"]["title"], "Hermes replied");
    assert_eq!(payload["notification"]["body"], "the answer comes while you sleep");
    assert_eq!(payload["hermes"]["kind"], "reply");
    assert!(payload["notification"]["navigate"]
        .as_str()
        .unwrap()
        .starts_with("https://pi.example/#message="));
    let ttl: u64 = p.header("TTL").unwrap().parse().unwrap();
    assert!(ttl > 3600, "{ttl}");
    assert!(!format!("{p:?}").contains(TOKEN), "the app token is never in a push");
    // One final reply, one push: nothing more comes for it.
    the_next_push_is_a_marker(&setup, &server, "tel-1", 1);
    // Back online, the phone gets the reply that was held.
    let mut c = Client::hello(&server, "tel-1");
    let frames = c.until("message");
    let last = frames.last().unwrap();
    assert_eq!(last["text"], "the answer comes while you sleep");
}

#[test]
fn a_card_for_a_locked_phone_is_urgent_with_a_topic_and_a_ttl_within_the_card() {
    let setup = Setup::new();
    let agent = format!("exec:{}", scripted_agent());
    let server = setup.gateway(&[("MOBILE_AGENT", &agent), ("MOBILE_PROMPT_TTL", "120")]);
    let (mut c, _, _) = subscribe(&server, &setup.service, "tel-1");
    c.send(json!({"t":"text","id":"m1","text":"later 800 card"}));
    lock(&server, c, "tel-1");
    let pushes = setup.service.wait_for(1, Duration::from_secs(10));
    let p = &pushes[0];
    assert_eq!(p.problem, None, "{p:#?}");
    assert_eq!(p.header("Urgency"), Some("high"));
    let topic = p.header("Topic").expect("a Topic per card");
    assert!(
        topic.len() <= 32
            && topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    let ttl: u64 = p.header("TTL").unwrap().parse().unwrap();
    assert!(
        ttl <= 120 && ttl > 100,
        "TTL {ttl} is at most the time the card has left"
    );
    let payload = p.payload.as_ref().unwrap();
    assert_eq!(payload["notification"]["title"], "Hermes asks to run a command");
    assert_eq!(payload["notification"]["body"], "rm -rf /tmp/x");
    assert_eq!(payload["hermes"]["kind"], "card");
    let card_id = payload["hermes"]["id"].as_str().unwrap().to_owned();
    // Opening the app shows the card, still open, and answering it reaches the agent.
    let mut c = Client::hello(&server, "tel-1");
    let prompt = c.until("prompt").pop().unwrap();
    assert_eq!(prompt["id"], card_id.as_str());
    c.send(json!({"t":"prompt","prompt_id":card_id,"option_id":"once"}));
    assert_eq!(c.until("prompt_done").pop().unwrap()["option_id"], "once");
}

#[test]
fn a_deliver_for_a_locked_phone_is_held_pushed_and_shown_on_return() {
    let setup = Setup::new();
    let server = setup.gateway(&[]);
    let (c, _, _) = subscribe(&server, &setup.service, "tel-1");
    lock(&server, c, "tel-1");
    let mut cron = service_conn(&server);
    cron.send(json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"Backups finished at 03:00"}));
    assert_eq!(
        cron.recv(),
        json!({"t":"delivered","id":"d1","device":"tel-1","held":true})
    );
    let p = &setup.service.wait_for(1, Duration::from_secs(10))[0];
    assert_eq!(p.problem, None, "{p:#?}");
    assert_eq!(
        p.payload.as_ref().unwrap()["notification"]["body"],
        "Backups finished at 03:00"
    );
    // S3 is unchanged for a device without a subscription.
    cron.send(json!({"t":"deliver","id":"d2","target":"mobile:tel-9","text":"x"}));
    let e = cron.recv();
    assert_eq!(
        (e["t"].as_str(), e["code"].as_str()),
        (Some("error"), Some("device_offline"))
    );
    let mut c = Client::hello(&server, "tel-1");
    assert_eq!(c.until("message").pop().unwrap()["text"], "Backups finished at 03:00");
}

#[test]
fn a_connected_phone_gets_no_push() {
    let setup = Setup::new();
    let server = setup.gateway(&[]);
    // A second phone, locked, for the marker at the end.
    let (other, _, _) = subscribe(&server, &setup.service, "tel-2");
    lock(&server, other, "tel-2");
    let (mut c, _, _) = subscribe(&server, &setup.service, "tel-1");
    c.send(json!({"t":"text","id":"m1","text":"hello"}));
    assert_eq!(c.until("message").pop().unwrap()["text"], "echo: hello");
    c.send(json!({"t":"text","id":"m2","text":"/approve ls"}));
    c.until("prompt");
    let mut cron = service_conn(&server);
    cron.send(json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"hi"}));
    assert_eq!(cron.recv(), json!({"t":"delivered","id":"d1","device":"tel-1"}));
    // Nothing for tel-1, not even past the coalescing window: the first push is tel-2's,
    // and the only connection to the service is the one that carried it.
    the_next_push_is_a_marker(&setup, &server, "tel-2", 0);
    assert_eq!(setup.service.connections.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn replies_close_together_make_one_push() {
    let setup = Setup::new();
    let server = setup.gateway(&[]);
    let (c, _, _) = subscribe(&server, &setup.service, "tel-1");
    lock(&server, c, "tel-1");
    let mut cron = service_conn(&server);
    for n in 1..=3 {
        cron.send(json!({"t":"deliver","id":format!("d{n}"),"target":"mobile:tel-1","text":format!("note {n}")}));
        assert_eq!(cron.recv()["held"], true);
    }
    let p = setup.service.wait_for(1, Duration::from_secs(10))[0].clone();
    assert_eq!(
        p.payload.as_ref().unwrap()["notification"]["title"],
        "Hermes: 3 new messages"
    );
    assert_eq!(p.payload.as_ref().unwrap()["notification"]["body"], "note 3");
    the_next_push_is_a_marker(&setup, &server, "tel-1", 1);
}

#[test]
fn a_410_removes_the_subscription_for_good() {
    let setup = Setup::new();
    let server = setup.gateway(&[]);
    let (c, _, _) = subscribe(&server, &setup.service, "tel-1");
    assert_eq!(health(&server)["push_subscriptions"], 1);
    lock(&server, c, "tel-1");
    setup.service.answer_next(410, &[]);
    let mut cron = service_conn(&server);
    cron.send(json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"one"}));
    assert_eq!(cron.recv()["held"], true);
    setup.service.wait_for(1, Duration::from_secs(10));
    wait_until("the subscription to go", Duration::from_secs(5), || {
        health(&server)["push_subscriptions"] == 0
    });
    let h = health(&server);
    assert!(h["push_last_error"].as_str().unwrap().contains("410"), "{h}");
    // Never used again: a later deliver is S3's device_offline, and nothing is POSTed.
    cron.send(json!({"t":"deliver","id":"d2","target":"mobile:tel-1","text":"two"}));
    assert_eq!(cron.recv()["code"], "device_offline");
    let (other, _, _) = subscribe(&server, &setup.service, "tel-2");
    lock(&server, other, "tel-2");
    the_next_push_is_a_marker(&setup, &server, "tel-2", 1);
    // The removal was kept.
    let kept = std::fs::read_to_string(server.state_dir.join("push-subscriptions.json")).unwrap();
    assert!(!kept.contains("/push/tel-1"), "{kept}");
}

#[test]
fn a_subscription_gone_is_not_used_by_a_notification_already_waiting() {
    // A deliver waits out the 2 s coalescing window with the device's subscriptions as
    // they were; meanwhile a card's push learns (410) that the subscription is gone.
    let setup = Setup::new();
    let agent = format!("exec:{}", scripted_agent());
    let server = setup.gateway(&[("MOBILE_AGENT", &agent)]);
    let (mut c, _, _) = subscribe(&server, &setup.service, "tel-1");
    c.send(json!({"t":"text","id":"m1","text":"later 800 card"}));
    lock(&server, c, "tel-1");
    setup.service.answer_next(410, &[]);
    let mut cron = service_conn(&server);
    cron.send(json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"one"}));
    assert_eq!(cron.recv()["held"], true);
    let pushes = setup.service.wait_for(1, Duration::from_secs(10));
    assert_eq!(pushes[0].payload.as_ref().unwrap()["hermes"]["kind"], "card");
    // The deliver's push falls due before the marker's: had it been POSTed to the
    // subscription that is gone, it would be the second push.
    let (other, _, _) = subscribe(&server, &setup.service, "tel-2");
    lock(&server, other, "tel-2");
    the_next_push_is_a_marker(&setup, &server, "tel-2", 1);
    let h = health(&server);
    assert_eq!(h["push_subscriptions"], 1, "tel-1's is gone, tel-2's stays: {h}");
    assert!(h["push_last_error"].as_str().unwrap().contains("410"), "{h}");
}

#[test]
fn a_429_is_retried_no_sooner_than_its_retry_after() {
    let setup = Setup::new();
    let server = setup.gateway(&[]);
    let (c, _, _) = subscribe(&server, &setup.service, "tel-1");
    lock(&server, c, "tel-1");
    setup.service.answer_next(429, &[("Retry-After", "3")]);
    let mut cron = service_conn(&server);
    cron.send(json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"one"}));
    cron.recv();
    let pushes = setup.service.wait_for(2, Duration::from_secs(15));
    let gap = pushes[1].at.duration_since(pushes[0].at);
    assert!(gap >= Duration::from_secs(3), "retried after {gap:?}");
    assert_eq!(pushes[1].problem, None);
    assert_eq!(pushes[1].payload, pushes[0].payload);
}

#[test]
fn push_test_answers_push_sent_or_an_error_naming_the_status() {
    let setup = Setup::new();
    let server = setup.gateway(&[]);
    let mut c = Client::hello(&server, "tel-1");
    c.send(json!({"t":"push_test","id":"t0"}));
    let e = c.recv();
    assert_eq!(
        (e["t"].as_str(), e["id"].as_str()),
        (Some("error"), Some("t0")),
        "no subscription: {e}"
    );
    let (browser, endpoint) = setup.service.browser("tel-1");
    c.send(json!({"t":"push_subscribe","id":"s1","subscription":browser.subscription(&endpoint)}));
    assert_eq!(c.recv()["t"], "push_subscribed");
    c.send(json!({"t":"push_test","id":"t1"}));
    assert_eq!(
        c.recv(),
        json!({"t":"push_sent","id":"t1"}),
        "sent even while connected"
    );
    let p = &setup.service.pushes()[0];
    assert_eq!(p.problem, None);
    assert_eq!(p.payload.as_ref().unwrap()["hermes"]["kind"], "test");
    setup.service.answer_next(410, &[]);
    c.send(json!({"t":"push_test","id":"t2"}));
    let e = c.recv();
    assert_eq!((e["t"].as_str(), e["id"].as_str()), (Some("error"), Some("t2")));
    assert!(e["message"].as_str().unwrap().contains("410"), "{e}");
}

#[test]
fn keys_and_subscriptions_survive_a_restart_in_private_files() {
    let setup = Setup::new();
    let server = setup.gateway(&[]);
    let (c, ready, browser) = subscribe(&server, &setup.service, "tel-1");
    let key = ready["capabilities"]["push"]["webpush"]["vapid_public_key"].clone();
    lock(&server, c, "tel-1");
    let dir = server.state_dir.clone();
    for file in ["push-vapid-key.p8", "push-subscriptions.json"] {
        wait_until(file, Duration::from_secs(5), || dir.join(file).exists());
        let mode = std::fs::metadata(dir.join(file)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}");
    }
    // Stop it, keeping its state directory, and start again on it.
    let mut server = server;
    server.state_dir = temp_dir("moved-away");
    drop(server);
    let env = setup.env();
    let mut cmd = std::process::Command::new(binary());
    cmd.env_clear()
        .env("MOBILE_PORT", "0")
        .env("MOBILE_HOST", "127.0.0.1")
        .env("MOBILE_TOKEN", TOKEN)
        .env("MOBILE_STATE_DIR", &dir)
        .env("RUST_LOG", "debug");
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let server = Server::spawn(cmd, dir);
    server.wait_for_log("1 subscription(s) kept");
    let mut c = Client::connect(&server);
    c.send(json!({"t":"hello","token":TOKEN,"device":{"id":"tel-2"}}));
    assert_eq!(
        c.recv()["capabilities"]["push"]["webpush"]["vapid_public_key"],
        key,
        "the same key"
    );
    let mut cron = service_conn(&server);
    cron.send(json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"after the restart"}));
    assert_eq!(cron.recv()["held"], true);
    let p = &setup.service.wait_for(1, Duration::from_secs(10))[0];
    assert_eq!(p.problem, None, "decrypts with the browser's keys from before: {p:#?}");
    assert_eq!(p.payload.as_ref().unwrap()["notification"]["body"], "after the restart");
    drop(browser);
}

#[test]
fn content_none_says_nothing_of_the_text() {
    let setup = Setup::new();
    let agent = format!("exec:{}", scripted_agent());
    let server = setup.gateway(&[("MOBILE_PUSH_CONTENT", "none"), ("MOBILE_AGENT", &agent)]);
    let (mut c, _, _) = subscribe(&server, &setup.service, "tel-1");
    c.send(json!({"t":"text","id":"m1","text":"later 800 card"}));
    lock(&server, c, "tel-1");
    let mut cron = service_conn(&server);
    cron.send(json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"the secret plan"}));
    cron.recv();
    let pushes = setup.service.wait_for(2, Duration::from_secs(10));
    for p in &pushes {
        let text = p.payload.as_ref().unwrap().to_string();
        assert!(
            !text.contains("secret") && !text.contains("rm -rf") && !text.contains("delete"),
            "{text}"
        );
    }
}

#[test]
fn an_endpoint_whose_host_is_not_allowed_is_forbidden_and_never_contacted() {
    let setup = Setup::new();
    let other = FakePush::start();
    let server = setup.gateway(&[]);
    let mut c = Client::hello(&server, "tel-1");
    let browser = Browser::new();
    for (id, endpoint) in [
        ("s1", format!("https://127.0.0.1:{}/push/x", other.port)),
        ("s2", format!("https://localhost:{}/push/x", setup.service.port)),
        ("s3", format!("http://127.0.0.1:{}/push/x", setup.service.port)),
        ("s4", format!("https://u@127.0.0.1:{}/push/x", setup.service.port)),
    ] {
        // s3 (http) is outside the schema too: the gateway's own refusal is under test.
        c.send_unchecked(json!({"t":"push_subscribe","id":id,"subscription":browser.subscription(&endpoint)}));
        let e = c.recv();
        assert_eq!(
            (e["code"].as_str(), e["id"].as_str(), e["fatal"].as_bool()),
            (Some("forbidden"), Some(id), Some(false)),
            "{endpoint}: {e}"
        );
    }
    // Malformed subscriptions are bad frames, not fatal.
    c.send_unchecked(json!({"t":"push_subscribe","id":"b1","subscription":{"endpoint":format!("https://127.0.0.1:{}/p", setup.service.port),"keys":{"p256dh":"AAAA","auth":"AAAA"}}}));
    assert_eq!(c.recv()["code"], "bad_frame");
    let mut off_curve = browser.p256dh();
    off_curve[64] ^= 1;
    let sub = json!({"endpoint":format!("https://127.0.0.1:{}/p", setup.service.port),"keys":{"p256dh":fake_push::b64(&off_curve),"auth":fake_push::b64(&browser.auth)}});
    c.send(json!({"t":"push_subscribe","id":"b2","subscription":sub}));
    let e = c.recv();
    assert_eq!(
        (e["code"].as_str(), e["fatal"].as_bool()),
        (Some("bad_frame"), Some(false)),
        "{e}"
    );
    c.send(json!({"t":"push_test","id":"t1"}));
    assert_eq!(c.recv()["t"], "error");
    assert_eq!(other.connections.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(setup.service.connections.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn push_off_announces_nothing() {
    let server = Server::start(&[("MOBILE_PUSH", "off")]);
    let mut c = Client::connect(&server);
    c.send(json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"}}));
    let ready = c.recv();
    assert!(ready["capabilities"].get("push").is_none(), "{ready}");
    assert!(!server.state_dir.join("push-subscriptions.json").exists());
}

#[test]
fn ntfy_gets_one_post_per_event_with_its_headers() {
    let (tx, rx) = std::sync::mpsc::channel::<upstream::Request>();
    let tx = std::sync::Mutex::new(tx);
    let ntfy = upstream::Upstream::start(move |_, req, s| {
        let _ = tx.lock().unwrap().send(req.clone());
        let _ = std::io::Write::write_all(
            s,
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        );
    });
    let url = format!("http://127.0.0.1:{}/hermes-abc123", ntfy.port);
    let agent = format!("exec:{}", scripted_agent());
    let server = Server::start(&[
        ("MOBILE_NTFY_URL", &url),
        ("MOBILE_NTFY_TOKEN", "tk_secret123456789"),
        ("MOBILE_PUBLIC_URL", "https://pi.example/chat/"),
        ("MOBILE_AGENT", &agent),
    ]);
    let mut c = Client::hello(&server, "tel-1");
    c.send(json!({"t":"text","id":"m1","text":"later 800 card"}));
    lock(&server, c, "tel-1");
    let req = rx.recv_timeout(Duration::from_secs(10)).expect("an ntfy POST");
    let header = |name: &str| {
        req.head.lines().find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_owned())
        })
    };
    assert!(req.head.starts_with("POST /hermes-abc123 HTTP/1.1"), "{}", req.head);
    assert_eq!(header("Title").as_deref(), Some("Hermes asks to run a command"));
    assert_eq!(header("Priority").as_deref(), Some("high"));
    assert!(header("Tags").is_some());
    assert!(header("Click").unwrap().starts_with("https://pi.example/chat/#card="));
    assert_eq!(header("Authorization").as_deref(), Some("Bearer tk_secret123456789"));
    assert_eq!(req.body, "rm -rf /tmp/x");
    assert!(
        !server.log_text().contains("tk_secret123456789"),
        "the ntfy token is never logged"
    );
    let start = Instant::now();
    assert!(
        rx.recv_timeout(Duration::from_millis(2500)).is_err(),
        "one POST per event"
    );
    assert!(start.elapsed() >= Duration::from_millis(2000));
}
