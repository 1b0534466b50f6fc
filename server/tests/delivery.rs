//! `deliver` over real sockets: service tokens, loopback, proxies, offline targets (S1–S5).
mod common;
use common::*;
use serde_json::json;

#[test]
fn service_connection_delivers_to_a_phone() {
    // decisions S1, S5
    let server = Server::start(&[("MOBILE_DELIVER_TOKENS", "cron-secret-0123456789")]);
    let mut phone = Client::hello(&server, "tel-1");
    let mut cron = Client::connect(&server);
    cron.send(json!({"t":"hello","token":"cron-secret-0123456789","device":{"id":"cron"}}));
    assert_eq!(cron.recv()["t"], "ready");
    cron.send(json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"backup done"}));
    assert_eq!(cron.recv(), json!({"t":"delivered","id":"d1","device":"tel-1"}));
    let m = phone.recv();
    assert_eq!(
        (m["t"].as_str(), m["text"].as_str()),
        (Some("message"), Some("backup done"))
    );
}

#[test]
fn loopback_client_may_deliver_but_not_through_a_proxy() {
    // decisions S1: X-Forwarded-For marks a proxied connection
    let server = Server::start(&[]);
    let mut phone = Client::hello(&server, "tel-1");
    let mut local = Client::hello(&server, "cli");
    local.send(json!({"t":"deliver","id":"d1","target":"tel-1","text":"hi"}));
    assert_eq!(local.recv()["t"], "delivered");
    assert_eq!(phone.recv()["text"], "hi");

    let mut proxied = Client::connect_with(&server, &[("X-Forwarded-For", "203.0.113.9")]);
    proxied.send(json!({"t":"hello","token":TOKEN,"device":{"id":"web"}}));
    assert_eq!(proxied.recv()["t"], "ready");
    proxied.send(json!({"t":"deliver","id":"d2","target":"tel-1","text":"sneaky"}));
    let err = proxied.recv();
    assert_eq!(
        (err["code"].as_str(), err["fatal"].as_bool(), err["id"].as_str()),
        (Some("forbidden"), Some(false), Some("d2"))
    );
}

#[test]
fn offline_target_is_device_offline() {
    // decisions S3
    let server = Server::start(&[]);
    let mut local = Client::hello(&server, "cli");
    local.send(json!({"t":"deliver","id":"d1","target":"mobile:tel-9","text":"hi"}));
    let err = local.recv();
    assert_eq!(
        (err["code"].as_str(), err["id"].as_str()),
        (Some("device_offline"), Some("d1"))
    );
}
