//! `POST /card-answer` (issue 25) against the real gateway over loopback: a fake push
//! service over TLS decrypts what a locked phone is sent (tests/common/fake_push.rs), the
//! test takes a button's token from it and POSTs it as the service worker or the ntfy app
//! would, and the scripted agent, the phone and a restarted gateway see the outcome.
mod common;
#[path = "common/fake_push.rs"]
mod fake_push;
#[path = "common/upstream.rs"]
mod upstream;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use fake_push::FakePush;
use serde_json::{json, Value};

struct Setup {
    service: FakePush,
    ca_file: PathBuf,
    agent_log: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let service = FakePush::start();
        let dir = temp_dir("card-answer-ca");
        std::fs::create_dir_all(&dir).unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, &service.ca_pem).unwrap();
        Setup {
            service,
            agent_log: dir.join("agent.log"),
            ca_file,
        }
    }

    /// A gateway on `state_dir` whose agent is the scripted child (its lines logged).
    fn gateway(&self, state_dir: PathBuf, extra: &[(&str, &str)]) -> Server {
        let env = [
            (
                "MOBILE_PUSH_HOSTS".to_owned(),
                format!("127.0.0.1:{}", self.service.port),
            ),
            ("MOBILE_PUSH_CA_FILE".to_owned(), self.ca_file.display().to_string()),
            ("MOBILE_PUSH_SUBJECT".to_owned(), "mailto:owner@example.org".to_owned()),
            ("MOBILE_AGENT".to_owned(), format!("exec:{}", scripted_agent())),
            ("AGENT_LOG".to_owned(), self.agent_log.display().to_string()),
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ];
        let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        all.extend_from_slice(extra);
        Server::start_in(state_dir, &all)
    }

    /// The agent's lines so far that answered a card.
    fn answers(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.agent_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["t"] == "prompt_answered")
            .collect()
    }
}

/// `device` turns notifications on, asks the agent for `what` (a card) and locks its
/// screen; the card's push as the browser decrypts it.
fn card_for_locked_phone(setup: &Setup, server: &Server, device: &str, what: &str, pushes: usize) -> Value {
    let mut c = Client::connect(server);
    c.send(json!({"t":"hello","token":TOKEN,"device":{"id":device}}));
    assert_eq!(c.recv()["t"], "ready");
    let (browser, endpoint) = setup.service.browser(device);
    c.send(json!({"t":"push_subscribe","id":"s1","subscription":browser.subscription(&endpoint),"app_url":"https://pi.example/"}));
    assert_eq!(c.recv(), json!({"t":"push_subscribed","id":"s1"}));
    c.send(json!({"t":"text","id":"m1","text":format!("later 600 {what}")}));
    let _ = c.ws.close(None);
    let _ = c.closed();
    let all = setup.service.wait_for(pushes + 1, Duration::from_secs(10));
    let push = &all[pushes];
    assert_eq!(push.problem, None, "{push:#?}");
    push.payload.clone().expect("decrypted")
}

/// POSTs `body` to /card-answer; the status and the JSON answer.
fn post(server: &Server, body: &str, extra_headers: &str) -> (u16, Value, String) {
    let request = format!(
        "POST /card-answer HTTP/1.1\r\nHost: pi.example\r\nContent-Type: application/json\r\n{extra_headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let response = server.http(&request);
    let status = response.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let json = response
        .split("\r\n\r\n")
        .nth(1)
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json, response)
}

fn answer_body(prompt: &str, option: &str, token: &str) -> String {
    json!({"prompt_id": prompt, "option_id": option, "token": token}).to_string()
}

fn wait_for_answers(setup: &Setup, n: usize) -> Vec<Value> {
    wait_until("the agent's prompt_answered", Duration::from_secs(10), || {
        setup.answers().len() >= n
    });
    setup.answers()
}

#[test]
fn a_locked_phone_denies_from_the_notification_and_the_agent_acts_on_it() {
    let setup = Setup::new();
    let server = setup.gateway(temp_dir("card-answer"), &[]);
    let p = card_for_locked_phone(&setup, &server, "tel-1", "card", 0);
    let card = p["hermes"]["id"].as_str().unwrap().to_owned();
    let actions = &p["notification"]["actions"];
    assert_eq!(actions.as_array().map(Vec::len), Some(1), "{p}");
    assert_eq!(actions[0]["action"], "deny");
    let url = p["hermes"]["answer"]["url"].as_str().unwrap();
    assert_eq!(url, "https://pi.example/card-answer");
    let deny = p["hermes"]["answer"]["tokens"]["deny"].as_str().unwrap().to_owned();
    // A deny token used to approve is refused, and nothing reaches the agent.
    let (status, body, _) = post(&server, &answer_body(&card, "once", &deny), "");
    assert_eq!((status, body), (403, json!({"error":"forbidden"})));
    let (status, body, raw) = post(
        &server,
        &answer_body(&card, "deny", &deny),
        "Origin: https://pi.example\r\n",
    );
    assert_eq!((status, body), (200, json!({"option_id":"deny"})), "{raw}");
    assert!(raw.contains("\r\nCache-Control: no-store\r\n") && raw.contains("\r\nContent-Type: application/json\r\n"));
    assert!(raw.contains("\r\nAccess-Control-Allow-Origin: https://pi.example\r\n"));
    let answers = wait_for_answers(&setup, 1);
    assert_eq!(
        (answers[0]["prompt"].as_str(), answers[0]["option"].as_str()),
        (Some(card.as_str()), Some("deny"))
    );
    // Used once: the second press is 409, and another site gets no CORS header.
    let (status, body, raw) = post(
        &server,
        &answer_body(&card, "deny", &deny),
        "Origin: https://evil.example\r\n",
    );
    assert_eq!((status, body), (409, json!({"error":"closed"})));
    assert!(!raw.contains("Access-Control"));
    // The phone opens the app, resuming as the page does: its card is closed, with how.
    let mut c = Client::connect(&server);
    c.send(json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"},"resume":{"after":0}}));
    let done = c.until("prompt_done").pop().unwrap();
    assert_eq!(
        (done["id"].as_str(), done["option_id"].as_str()),
        (Some(card.as_str()), Some("deny"))
    );
    // The token is never logged; both refusals (the 403 and the 409) are counted.
    assert!(!server.log_text().contains(&deny));
    let health = server.http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(health.contains("\"card_answer_refusals\":2"), "{health}");
}

#[test]
fn the_route_answers_what_is_not_an_answer_with_json_and_never_panics() {
    let server = Server::start(&[]);
    let (status, body, _) = post(&server, "{not json", "");
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));
    let (status, body, _) = post(&server, &answer_body("nope", "deny", "x"), "");
    assert_eq!((status, body), (409, json!({"error":"closed"})));
    // Too large is refused from its length, before any of it is read.
    let raw = server.http("POST /card-answer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
    assert!(raw.starts_with("HTTP/1.1 413 "), "{raw}");
    assert!(raw.contains("no-store"));
    let raw = server.http("POST /card-answer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    assert!(raw.starts_with("HTTP/1.1 411 "), "{raw}");
    let raw = server.http("GET /card-answer HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(raw.starts_with("HTTP/1.1 405 ") && raw.contains("Allow: POST"), "{raw}");
    // A body that comes in two writes is read whole.
    use std::io::{Read, Write};
    let body = answer_body("nope", "deny", "x");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let head = format!(
        "POST /card-answer HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body.as_bytes()[..5]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(&body.as_bytes()[5..]).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 409 "), "{out}");
    // A client that shuts its side once the request is out is still answered.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(format!("{head}{body}").as_bytes()).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 409 "), "{out}");
    // Still serving.
    assert!(server
        .http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .starts_with("HTTP/1.1 200"));
}

#[test]
fn a_restart_between_the_push_and_the_button_still_answers() {
    let setup = Setup::new();
    let dir = temp_dir("card-answer-restart");
    let mut server = setup.gateway(dir.clone(), &[("MOBILE_NOTIFY_ACTIONS", "all")]);
    let p = card_for_locked_phone(&setup, &server, "tel-1", "card", 0);
    let card = p["hermes"]["id"].as_str().unwrap().to_owned();
    let once = p["hermes"]["answer"]["tokens"]["once"].as_str().unwrap().to_owned();
    assert_eq!(p["notification"]["actions"][0]["title"], "Approve once");
    // SIGKILL, the state directory kept.
    server.state_dir = temp_dir("moved-away");
    drop(server);
    let server = setup.gateway(dir, &[("MOBILE_NOTIFY_ACTIONS", "all")]);
    let (status, body, raw) = post(&server, &answer_body(&card, "once", &once), "");
    assert_eq!((status, body), (200, json!({"option_id":"once"})), "{raw}");
    let answers = wait_for_answers(&setup, 1);
    assert_eq!(answers[0]["option"], "once");
}

#[test]
fn ntfy_gets_the_buttons_as_http_actions_only_with_a_public_url() {
    let (tx, rx) = std::sync::mpsc::channel::<upstream::Request>();
    let tx = std::sync::Mutex::new(tx);
    let ntfy = upstream::Upstream::start(move |_, req, s| {
        let _ = tx.lock().unwrap().send(req.clone());
        let _ = std::io::Write::write_all(
            s,
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        );
    });
    let topic = format!("http://127.0.0.1:{}/hermes-abc123", ntfy.port);
    let agent = format!("exec:{}", scripted_agent());
    let actions_of = |req: &upstream::Request| {
        req.head
            .lines()
            .find_map(|l| l.strip_prefix("Actions: ").map(str::to_owned))
    };
    for public_url in [None, Some("https://pi.example/chat/")] {
        let mut env = vec![("MOBILE_NTFY_URL", topic.as_str()), ("MOBILE_AGENT", agent.as_str())];
        if let Some(url) = public_url {
            env.push(("MOBILE_PUBLIC_URL", url));
        }
        let server = Server::start(&env);
        let mut c = Client::hello(&server, "tel-1");
        c.send(json!({"t":"text","id":"m1","text":"later 600 confirm"}));
        let _ = c.ws.close(None);
        let _ = c.closed();
        let req = rx.recv_timeout(Duration::from_secs(10)).expect("an ntfy POST");
        let Some(actions) = actions_of(&req) else {
            assert_eq!(public_url, None, "{}", req.head);
            continue;
        };
        assert!(public_url.is_some(), "no buttons without MOBILE_PUBLIC_URL: {actions}");
        let prefix = "http, Cancel, https://pi.example/chat/card-answer, method=POST, headers.Content-Type=application/json, body='";
        let body = actions
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("', clear=true"))
            .unwrap_or_else(|| panic!("{actions}"));
        // The ntfy app POSTs that body: it answers the card.
        let (status, answer, raw) = post(&server, body, "");
        assert_eq!((status, answer), (200, json!({"option_id":"cancel"})), "{raw}");
    }
}

#[test]
fn a_card_answered_in_the_app_replaces_its_notification_on_the_lock_screen() {
    let setup = Setup::new();
    let server = setup.gateway(temp_dir("card-answer-app"), &[]);
    let p = card_for_locked_phone(&setup, &server, "tel-1", "card", 0);
    let card = p["hermes"]["id"].as_str().unwrap().to_owned();
    // The phone opens the app and answers there; the notification still on its lock
    // screen (another of its browsers) is replaced, quietly, with how.
    let mut c = Client::hello(&server, "tel-1");
    assert_eq!(c.until("prompt").pop().unwrap()["id"], card.as_str());
    c.send(json!({"t":"prompt","prompt_id":card,"option_id":"once"}));
    assert_eq!(c.until("prompt_done").pop().unwrap()["option_id"], "once");
    let pushes = setup.service.wait_for(2, Duration::from_secs(10));
    let (first, second) = (&pushes[0], &pushes[1]);
    assert_eq!(second.problem, None, "{second:#?}");
    let outcome = second.payload.as_ref().unwrap();
    assert_eq!(outcome["notification"]["tag"], p["notification"]["tag"]);
    assert_eq!(outcome["notification"]["silent"], true);
    assert_eq!(outcome["notification"]["title"], "Approved once: rm -rf /tmp/x");
    assert!(outcome["notification"].get("actions").is_none());
    assert_eq!(
        second.header("Topic"),
        first.header("Topic"),
        "it replaces one still held"
    );
    assert_eq!(second.header("Urgency"), Some("normal"));
}
