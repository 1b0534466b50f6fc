//! The server's deadlines, all on its one wheel (issue 17): what each is for, as a typed
//! key, and K2's keep-alive rule as a pure function of time.
//!
//! The core keeps its own deadlines in its own heap (`src/gateway/timers.rs`); its earliest,
//! with the agent's and push's, is one key here, [`TimerKey::Wiring`]; docs/design.md says
//! why there are two mechanisms.

use std::time::{Duration, Instant};

use hermes_mobile::agent_link::PeerId;

/// A connection, as the slab knows it: its key and the generation that tells a reused
/// key from the connection a timer was armed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnRef {
    pub key: usize,
    pub generation: u32,
}

/// An HTTP agent's call, as the client's slab knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallRef {
    pub slot: usize,
    pub generation: u32,
}

/// What a connection's deadline is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnTimer {
    /// H7: the request, its upgrade and (on `/agent`) the agent's hello, inside the hello
    /// timeout counted from accept.
    Hello,
    /// L54: the request head, complete within a few seconds of accept.
    Head,
    /// K2: ping a quiet connection, close a silent one.
    KeepAlive,
    /// L28: a close that was decided, or whose close frame is out, is over by now: after
    /// this the socket is dropped, whatever is queued.
    CloseBy,
    /// A plain HTTP response is out: the socket is dropped by now even if the peer keeps
    /// sending.
    Drain,
    /// A `/files/` answer (L63) is read and written by now, or the socket is dropped; it
    /// has longer than the hello timeout, since a file takes a slow phone a while.
    FileAnswer,
    /// A card's answer (issue 25) waits for the journal no longer than this.
    CardAnswer,
    /// A pairing (issue 26) waits for the journal no longer than this.
    Pair,
}

/// Every deadline of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKey {
    Conn(ConnRef, ConnTimer),
    /// A call's current deadline (connect, first byte, idle): the client keeps which.
    Call(CallRef),
    /// A Unix socket peer of the agent link must have said hello by now.
    AgentHello(PeerId),
    /// A control socket connection (issue 26) is over by now: its slab key and serial.
    Control(usize, u64),
    /// The wiring's earliest deadline: the core's, the agent's or push's (coalesced
    /// notifications and retries). Armed: one at a time.
    Wiring,
    /// Hand freed heap pages back to the kernel, a little after memory was let go (armed).
    Trim,
    /// Retry `accept` after it failed for lack of resources (armed).
    AcceptRetry,
    /// Start the `exec:` agent again after it exited (armed).
    AgentRestart,
    /// Reap (or kill) an `exec:` agent that was told to stop (armed).
    AgentReap,
    /// The shutdown's grace period is over (armed).
    Shutdown,
}

/// What K2 says of a connection at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    /// Heard from recently enough: look again then.
    Wait(Instant),
    /// Quiet for `keepalive`: send a ping, and look again then.
    Ping(Instant),
    /// Silent for three times `keepalive`: close it (1001).
    Close,
}

/// decisions K2: ping after `keepalive` of quiet; close after three times that. `pinged`:
/// a ping was sent since the peer was last heard from. `now` may be late or early: the
/// answer is from the times alone, and the next look is never in the past.
pub fn keep_alive(now: Instant, last_rx: Instant, pinged: bool, keepalive: Duration) -> KeepAlive {
    let quiet = now.saturating_duration_since(last_rx);
    if quiet >= keepalive * 3 {
        return KeepAlive::Close;
    }
    let next = if quiet < keepalive {
        last_rx + keepalive
    } else {
        last_rx + keepalive * 3
    };
    let next = next.max(now + Duration::from_millis(10));
    if quiet >= keepalive && !pinged {
        KeepAlive::Ping(next)
    } else {
        KeepAlive::Wait(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k2_on_virtual_time() {
        // decisions K2, with keepalive 30 s: quiet for 30 s, a ping; silent for 90 s, closed.
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let k = Duration::from_secs(30);
        assert_eq!(keep_alive(s(10), s(0), false, k), KeepAlive::Wait(s(30)));
        assert_eq!(keep_alive(s(30), s(0), false, k), KeepAlive::Ping(s(90)));
        assert_eq!(
            keep_alive(s(45), s(0), true, k),
            KeepAlive::Wait(s(90)),
            "one ping, not one per look"
        );
        assert_eq!(keep_alive(s(89), s(0), true, k), KeepAlive::Wait(s(90)));
        assert_eq!(keep_alive(s(90), s(0), true, k), KeepAlive::Close);
        // Heard from again: the count starts over.
        assert_eq!(keep_alive(s(95), s(80), false, k), KeepAlive::Wait(s(110)));
        // A late look at a silent peer closes at once, ping or not.
        assert_eq!(keep_alive(s(500), s(0), false, k), KeepAlive::Close);
    }

    #[test]
    fn the_next_look_is_never_in_the_past() {
        let t0 = Instant::now();
        let k = Duration::from_millis(100);
        for late in [0u64, 50, 99, 100, 150, 299] {
            let now = t0 + Duration::from_millis(late);
            match keep_alive(now, t0, late >= 100, k) {
                KeepAlive::Wait(at) | KeepAlive::Ping(at) => assert!(at > now, "at {late} ms"),
                KeepAlive::Close => panic!("closed at {late} ms"),
            }
        }
    }
}
