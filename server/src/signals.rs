//! SIGINT/SIGTERM: stop the event loop gracefully. The handler only sets a flag and wakes the
//! poll (an eventfd write on Linux, which is async-signal-safe); the loop does the rest.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

static STOP: AtomicBool = AtomicBool::new(false);
static WAKER: OnceLock<mio::Waker> = OnceLock::new();

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

extern "C" {
    // From the C library every Rust program on Unix already links.
    fn signal(signum: i32, handler: usize) -> usize;
}

extern "C" fn on_signal(_signum: i32) {
    STOP.store(true, Ordering::SeqCst);
    if let Some(waker) = WAKER.get() {
        let _ = waker.wake();
    }
}

/// Installs the handlers; `waker` wakes the event loop.
pub fn install(waker: mio::Waker) {
    let _ = WAKER.set(waker);
    let handler = on_signal as extern "C" fn(i32) as usize;
    // SAFETY: `signal` is the C library's; the handler only touches an atomic and an eventfd.
    unsafe {
        signal(SIGINT, handler);
        signal(SIGTERM, handler);
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
