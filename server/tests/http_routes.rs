//! Plain HTTP routes and connection limits.
mod common;
use common::*;

#[test]
fn healthz_reports_status_and_counts() {
    let server = Server::start(&[]);
    let _phone = Client::hello(&server, "tel-1");
    let resp = server.http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    let body: serde_json::Value = serde_json::from_str(resp.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["status"], "ok");
    assert_eq!(body["devices_online"], 1);
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn ws_without_upgrade_is_426_and_unknown_paths_404() {
    let server = Server::start(&[]);
    assert!(server
        .http("GET /ws HTTP/1.1\r\nHost: x\r\n\r\n")
        .starts_with("HTTP/1.1 426"));
    assert!(server
        .http("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
        .starts_with("HTTP/1.1 404"));
    assert!(server.http("garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
    let huge = format!("GET /ws HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(10_000));
    assert!(server.http(&huge).starts_with("HTTP/1.1 431"));
}

#[test]
fn query_strings_never_reach_the_log() {
    // decisions H1
    let server = Server::start(&[]);
    server.http("GET /ws?token=leaky-secret HTTP/1.1\r\nHost: x\r\n\r\n");
    server.http("GET /healthz?token=leaky-secret HTTP/1.1\r\nHost: x\r\n\r\n");
    let _c = Client::hello(&server, "tel-1");
    assert!(!server.log_text().contains("leaky-secret"));
}

#[test]
fn connections_over_the_cap_get_503() {
    let server = Server::start(&[("MOBILE_MAX_CONNECTIONS", "2")]);
    let _a = Client::hello(&server, "tel-1");
    let _b = Client::hello(&server, "tel-2");
    assert!(server.http("GET /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 503"));
}
