//! decisions H7, G10: the hello timeout runs from accept; it is fatal.
mod common;
use common::*;
use hermes_mobile::Time;

#[test]
fn connection_is_open_at_14_999_s_and_closed_at_15_s() {
    let mut h = Harness::new();
    let conn = h.open();
    h.advance_to(Time::from_millis(14_999));
    assert!(!h.closed.contains_key(&conn));
    assert!(h.take(conn).is_empty());
    h.advance_to(Time::from_millis(15_000));
    let frames = h.take(conn);
    let err = error_of(&frames);
    assert_eq!(err["code"], "bad_frame");
    assert_eq!(err["fatal"], true);
    assert_eq!(h.closed[&conn], (1008, "bad_frame".to_owned()));
}

#[test]
fn hello_at_14_999_s_beats_the_timeout() {
    let mut h = Harness::new();
    let conn = h.open();
    h.advance_to(Time::from_millis(14_999));
    h.hello(conn, "tel-1");
    assert_eq!(h.take(conn)[0]["t"], "ready");
    h.advance_to(Time::from_secs(60));
    assert!(!h.closed.contains_key(&conn));
}

#[test]
fn timeout_counts_from_accept_not_from_first_byte() {
    // decisions H7: the HTTP upgrade is inside the 15 s too; a later open gets its own 15 s.
    let mut h = Harness::new();
    let first = h.open();
    h.advance_to(Time::from_secs(10));
    let second = h.open();
    h.advance_to(Time::from_secs(15));
    assert!(h.closed.contains_key(&first));
    assert!(!h.closed.contains_key(&second));
    h.advance_to(Time::from_secs(25));
    assert!(h.closed.contains_key(&second));
}

#[test]
fn spurious_timeouts_are_harmless() {
    let mut h = Harness::new();
    let conn = h.open();
    for ms in [0, 1, 5000, 5000, 14_999] {
        h.gw.handle_timeout(Time::from_millis(ms));
    }
    assert!(h.gw.poll_output().is_none());
    h.advance_to(Time::from_secs(15));
    assert!(h.closed.contains_key(&conn));
}
