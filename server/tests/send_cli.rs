//! `hermes-mobile send` end to end, with its exit codes.
mod common;
use common::*;
use std::process::Command;

fn send(server: &Server, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(binary());
    cmd.arg("send")
        .args(args)
        .env_clear()
        // This machine's service settings (if the package is installed) are not the test's.
        .env("MOBILE_ENV_FILE", "")
        .env("MOBILE_PORT", server.port.to_string());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn delivers_text_and_files_with_exit_0() {
    let server = Server::start(&[("MOBILE_DELIVER_TOKENS", "cron-secret-0123456789")]);
    let mut phone = Client::hello(&server, "tel-1");
    let (code, out, err) = send(
        &server,
        &["--to", "mobile:tel-1", "--text", "backup done"],
        &[("MOBILE_DELIVER_TOKENS", "cron-secret-0123456789")],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("delivered to tel-1"));
    assert_eq!(phone.recv()["text"], "backup done");

    let file = server.state_dir.join("report.pdf");
    std::fs::create_dir_all(&server.state_dir).unwrap();
    std::fs::write(&file, b"%PDF-1.4 tiny").unwrap();
    let (code, _, err) = send(
        &server,
        &[
            "--to",
            "tel-1",
            "--file",
            file.to_str().unwrap(),
            "--token",
            "cron-secret-0123456789",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let media = phone.recv();
    assert_eq!(
        (
            media["kind"].as_str(),
            media["mime"].as_str(),
            media["filename"].as_str()
        ),
        (Some("document"), Some("application/pdf"), Some("report.pdf"))
    );
}

#[test]
fn offline_target_exits_3_with_the_servers_code() {
    let server = Server::start(&[]);
    let (code, _, err) = send(
        &server,
        &["--to", "mobile:tel-9", "--text", "hi"],
        &[("MOBILE_TOKEN", TOKEN)],
    );
    assert_eq!(code, 3);
    assert!(err.contains("device_offline"), "{err}");
}

#[test]
fn wrong_token_exits_4_and_usage_errors_exit_2() {
    let server = Server::start(&[]);
    let (code, _, err) = send(&server, &["--to", "tel-1", "--text", "hi", "--token", "nope"], &[]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("auth_failed"));
    let (code, _, _) = send(&server, &["--to", "tel-1"], &[("MOBILE_TOKEN", TOKEN)]);
    assert_eq!(code, 2, "nothing to send");
    // An id the gateway would cut (G8) could never be matched to its answer.
    let long = "i".repeat(129);
    let (code, _, err) = send(
        &server,
        &["--to", "tel-1", "--text", "hi", "--id", &long],
        &[("MOBILE_TOKEN", TOKEN)],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--id must be 1 to 128 characters"), "{err}");
}

#[test]
fn unreachable_gateway_exits_1() {
    let server = Server::start(&[]);
    let (code, _, err) = send(
        &server,
        &["--to", "tel-1", "--text", "hi", "--url", "ws://127.0.0.1:1/ws"],
        &[("MOBILE_TOKEN", TOKEN)],
    );
    assert_eq!(code, 1, "{err}");
}

#[test]
fn two_sends_at_once_with_the_app_token_both_deliver() {
    // issue 8 #16: they used to say hello as the same device and replace each other.
    let server = Server::start(&[]);
    let mut phone = Client::hello(&server, "tel-1");
    let port = server.port.to_string();
    let spawn = |text: &str| {
        Command::new(binary())
            .args(["send", "--to", "tel-1", "--text", text, "--token", TOKEN])
            .env_clear()
            .env("MOBILE_ENV_FILE", "")
            .env("MOBILE_PORT", &port)
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (spawn("from job a"), spawn("from job b"));
    assert_eq!((a.wait().unwrap().code(), b.wait().unwrap().code()), (Some(0), Some(0)));
    let mut texts = vec![phone.recv()["text"].clone(), phone.recv()["text"].clone()];
    texts.sort_by_key(|t| t.to_string());
    assert_eq!(texts, ["from job a", "from job b"]);
}
