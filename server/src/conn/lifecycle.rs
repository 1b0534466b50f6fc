//! A WebSocket's life, as one state with the deadline it carries (issue 17), like
//! quinn-proto's connection `State`: open (with K2's keep-alive clock), closing (a close
//! was decided; what was queued before it goes first), close sent (our close frame is
//! out; the peer's is awaited). Transitions are this type's methods only; the socket work
//! they call for is `Conn`'s, and the wheel only wakes the owner at the deadlines.
//!
//! What happens to a connection that stops reading while closing? `Closing` and
//! `CloseSent` both carry `by`: at `by` it is dropped, whatever is still queued or
//! however it stalls (decisions L28; issue 8's stuck close). See the table test below.

use std::time::{Duration, Instant};

use crate::timer::{keep_alive, KeepAlive};

/// How long a connection may take to go once its close is decided, whatever it still has
/// queued or however it stalls its reads: after this the socket is dropped (issue 8 #1).
pub const CLOSE_DEADLINE: Duration = Duration::from_secs(5);
/// How long the peer has to answer our close frame.
pub const LINGER: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lifecycle {
    /// Open. `last_rx`: when the peer was last heard from; `pinged`: a ping went out
    /// since (decisions K2).
    Open { last_rx: Instant, pinged: bool },
    /// A close is decided: the frames queued before it go first, then this close frame.
    Closing { code: u16, reason: String, by: Instant },
    /// Our close frame is out; waiting for the peer's.
    CloseSent { by: Instant },
}

impl Lifecycle {
    pub fn open(now: Instant) -> Lifecycle {
        Lifecycle::Open {
            last_rx: now,
            pinged: false,
        }
    }

    /// The peer was heard from (any frame, a pong included).
    pub fn heard(&mut self, now: Instant) {
        if let Lifecycle::Open { last_rx, pinged } = self {
            *last_rx = now;
            *pinged = false;
        }
    }

    /// A close with `code`/`reason` is decided. A close already decided or sent keeps its
    /// own frame; the deadline is the earliest asked for. Returns it.
    pub fn decide_close(&mut self, code: u16, reason: &str, now: Instant) -> Instant {
        let by = now + CLOSE_DEADLINE;
        match self {
            Lifecycle::Open { .. } => {
                *self = Lifecycle::Closing {
                    code,
                    reason: reason.to_owned(),
                    by,
                }
            }
            Lifecycle::Closing { by: due, .. } | Lifecycle::CloseSent { by: due } => *due = (*due).min(by),
        }
        self.close_by().expect("closing now")
    }

    /// The close frame to write now that the queued frames are out, if a close is
    /// decided and its frame not yet sent: the peer then has `LINGER` to answer.
    pub fn take_close_frame(&mut self, now: Instant) -> Option<(u16, String)> {
        let Lifecycle::Closing { code, reason, by } = self else {
            return None;
        };
        let frame = (*code, std::mem::take(reason));
        *self = Lifecycle::CloseSent {
            by: (*by).min(now + LINGER),
        };
        Some(frame)
    }

    /// A close is decided or sent.
    pub fn is_closing(&self) -> bool {
        !matches!(self, Lifecycle::Open { .. })
    }

    /// Our close frame is out: frames queued after it are not sent.
    pub fn close_sent(&self) -> bool {
        matches!(self, Lifecycle::CloseSent { .. })
    }

    /// When the socket is dropped if the close has not finished.
    pub fn close_by(&self) -> Option<Instant> {
        match self {
            Lifecycle::Open { .. } => None,
            Lifecycle::Closing { by, .. } | Lifecycle::CloseSent { by } => Some(*by),
        }
    }

    /// L28: the close did not finish in time: drop the socket.
    pub fn close_overdue(&self, now: Instant) -> bool {
        self.close_by().is_some_and(|by| now >= by)
    }

    /// K2 at `now`, for an open connection (`None` once a close is decided: the close
    /// deadline rules then). A ping asked for counts as sent.
    pub fn keep_alive(&mut self, now: Instant, keepalive: Duration) -> Option<KeepAlive> {
        let Lifecycle::Open { last_rx, pinged } = self else {
            return None;
        };
        let due = keep_alive(now, *last_rx, *pinged, keepalive);
        if matches!(due, KeepAlive::Ping(_)) {
            *pinged = true;
        }
        Some(due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row: a state, what happens, and what the connection must then do.
    #[derive(Debug)]
    enum Step {
        Heard(u64),
        Decide(u16, u64),
        /// The writer took everything queued: the close frame may go now.
        FrameOut(u64),
        Tick(u64),
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Seen {
        Nothing,
        CloseFrame(u16),
        Ping,
        CloseIdle,
        Drop,
        Wait,
    }

    fn run(steps: &[Step]) -> Vec<Seen> {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let keepalive = Duration::from_secs(30);
        let mut life = Lifecycle::open(t0);
        let mut seen = Vec::new();
        for step in steps {
            seen.push(match *step {
                Step::Heard(ms) => {
                    life.heard(at(ms));
                    Seen::Nothing
                }
                Step::Decide(code, ms) => {
                    life.decide_close(code, "why", at(ms));
                    Seen::Nothing
                }
                Step::FrameOut(ms) => match life.take_close_frame(at(ms)) {
                    Some((code, _)) => Seen::CloseFrame(code),
                    None => Seen::Nothing,
                },
                Step::Tick(ms) if life.close_overdue(at(ms)) => Seen::Drop,
                Step::Tick(ms) => match life.keep_alive(at(ms), keepalive) {
                    Some(KeepAlive::Ping(_)) => Seen::Ping,
                    Some(KeepAlive::Close) => Seen::CloseIdle,
                    Some(KeepAlive::Wait(_)) | None => Seen::Wait,
                },
            });
        }
        seen
    }

    #[test]
    fn the_lifecycle_table() {
        use Seen::*;
        use Step::*;
        let rows: &[(&str, &[Step], &[Seen])] = &[
            (
                "blocked while a close is decided (issue 8's stuck close): the frame never goes, the socket is dropped at 5 s",
                &[Decide(1000, 0), Tick(4_999), Tick(5_000)],
                &[Nothing, Wait, Drop],
            ),
            (
                "stops reading while closing: our frame is out, the peer never answers, dropped 2 s later",
                &[Decide(1000, 0), FrameOut(100), Tick(2_099), Tick(2_100)],
                &[Nothing, CloseFrame(1000), Wait, Drop],
            ),
            (
                "a second close keeps the first frame and the earlier deadline",
                &[Decide(1008, 0), Decide(1001, 3_000), FrameOut(3_500), Tick(5_000)],
                &[Nothing, Nothing, CloseFrame(1008), Drop],
            ),
            (
                "quiet then ping (K2): one ping for a quiet spell",
                &[Tick(29_999), Tick(30_000), Tick(45_000)],
                &[Wait, Ping, Wait],
            ),
            (
                "silent then close (K2): 90 s without a word",
                &[Tick(30_000), Tick(90_000)],
                &[Ping, CloseIdle],
            ),
            (
                "heard from again: the keep-alive count starts over",
                &[Tick(30_000), Heard(40_000), Tick(69_999), Tick(70_000)],
                &[Ping, Nothing, Wait, Ping],
            ),
            (
                "an oversized message's 1009 close (G7) goes after what was queued, and the peer has 2 s",
                &[Decide(1009, 0), FrameOut(10), Tick(2_009), Tick(2_010)],
                &[Nothing, CloseFrame(1009), Wait, Drop],
            ),
            (
                "no keep-alive once closing: the close deadline rules",
                &[Decide(1001, 0), Tick(3_000)],
                &[Nothing, Wait],
            ),
        ];
        for (what, steps, want) in rows {
            assert_eq!(run(steps), *want, "{what}");
        }
    }
}
