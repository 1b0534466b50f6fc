//! `hermes-mobile token` as a Pi owner runs it beside the service: it finds the state
//! directory through the service's settings file (docs/raspberry-pi.md).
mod common;
use common::*;
use std::process::Command;

fn token(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(binary())
        .arg("token")
        .args(args)
        .env_clear()
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn token_reads_the_state_dir_from_the_settings_file_and_never_creates_one_there() {
    let dir = std::env::temp_dir().join(format!("hm-token-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let settings = dir.join("hermes-mobile.env");
    std::fs::write(
        &settings,
        format!("# the service's\nMOBILE_STATE_DIR={}\n", state.display()),
    )
    .unwrap();
    let settings = settings.to_str().unwrap();

    // Before the service ever ran: a clear answer, and no root-owned token left behind.
    let (code, out, err) = token(&["--env-file", settings]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("start the service"), "{err}");
    assert!(!state.join("token").exists());

    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("token"), "service-made-token\n").unwrap();
    let (code, out, err) = token(&["--env-file", settings]);
    assert_eq!((code, out.trim()), (0, "service-made-token"), "{err}");

    // A named settings file that is missing is an error, not a silent fallback.
    let (code, _, err) = token(&["--env-file", dir.join("nope.env").to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("nope.env"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}
