//! decisions U2 and L31 (issue 8 #2), measured where it matters: on the heap. A counting
//! global allocator sees every byte the gateway holds for uploads, whatever `parts` a client
//! declares, not only what `Stats.upload_bytes` counts.
mod common;
use common::*;
use hermes_mobile::limits::MAX_SPECULATIVE_UPLOAD_BYTES;
use serde_json::json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The heap counter is process-wide: the tests of this file take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
/// Bookkeeping the budget does not count: map entries, ids, metadata, frames kept by the
/// harness. Small against the 8 MiB it guards.
const SLACK: usize = 512 * KIB;

fn chunk(id: &str, part: usize, parts: usize, data: &[u8]) -> serde_json::Value {
    json!({"t":"media","id":id,"kind":"document","filename":"f.bin","part":part,"parts":parts,"data":b64(data)})
}

#[test]
fn uploads_that_declare_2048_parts_hold_no_more_than_the_device_budget() {
    let _turn = ONE_AT_A_TIME.lock().unwrap();
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let part = vec![7u8; 4 * KIB];
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..8 {
        h.send(conn, chunk(&format!("u{i}"), 0, 2048, &part));
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(h.gw.stats().upload_bytes, 32 * KIB, "what the limits count");
    assert!(
        held <= 8 * MIB + SLACK,
        "eight 4 KiB parts of parts:2048 uploads hold {} KiB",
        held / KIB
    );
    assert!(h.take(conn).iter().all(|f| f["t"] != "error"));
}

#[test]
fn the_budget_holds_while_uploads_fill_it_in_any_order() {
    let _turn = ONE_AT_A_TIME.lock().unwrap();
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let before = LIVE.load(Ordering::Relaxed);
    let mut peak = 0;
    // Four uploads of 2 MiB in 64 KiB parts, interleaved, two of them in reverse.
    let part = vec![9u8; 64 * KIB];
    for n in 0..32 {
        for u in 0..4 {
            let p = if u % 2 == 0 { n } else { 31 - n };
            h.send(conn, chunk(&format!("f{u}"), p, 32, &part));
            if n < 31 {
                // Before the last round: nothing has completed, all of it is upload memory.
                peak = peak.max(LIVE.load(Ordering::Relaxed) - before);
            }
        }
    }
    assert!(peak <= 8 * MIB + SLACK, "peak {} KiB", peak / KIB);
    let done: Vec<_> = h.take_events();
    assert_eq!(done.len(), 4, "every file completed");
}

#[test]
fn across_devices_the_room_announced_by_first_parts_is_shared_and_bounded() {
    // decisions L31: 4 KiB sent must not pin 8 MiB per connection.
    let _turn = ONE_AT_A_TIME.lock().unwrap();
    let mut h = Harness::new();
    let part = vec![7u8; 4 * KIB];
    let conns: Vec<_> = (0..8).map(|d| h.connect(&format!("tel-{d}"))).collect();
    let before = LIVE.load(Ordering::Relaxed);
    for (d, conn) in conns.iter().enumerate() {
        for i in 0..8 {
            h.send(*conn, chunk(&format!("d{d}-u{i}"), 0, 2048, &part));
        }
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(h.gw.stats().upload_bytes, 8 * 32 * KIB);
    assert!(
        held <= MAX_SPECULATIVE_UPLOAD_BYTES + 8 * 32 * KIB + SLACK,
        "64 parts:2048 uploads over 8 devices hold {} KiB",
        held / KIB
    );
}
