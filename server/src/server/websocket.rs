//! A WebSocket's traffic in the loop: messages read into the core or the link, frames
//! queued and pumped out, closes decided, and connections ended.

use std::time::Instant;

use super::{conn_id, conn_timer, Server, AGENT_OUTBOX_LIMIT, TRIM_DELAY};
use crate::agent::io::PeerInput;
use crate::conn::{Drained, Incoming, Phase};
use crate::timer::{ConnTimer, TimerKey};

impl Server {
    pub(super) fn on_ws(&mut self, key: usize, now: Instant) {
        // Its read side already ended this turn: nothing more is read from it.
        if self.conns.turn().ends_after_drive(key) {
            return;
        }
        let t = self.time(now);
        let Some(conn) = self.conns.get_mut(key) else { return };
        if conn.agent_peer().is_some() && !conn.life().is_closing() {
            // Lines behind a command's file wait in the socket, not in memory (L42).
            if !self.wiring.wants_lines() {
                self.link_paused = true;
                return;
            }
        }
        let mut incoming = std::mem::take(&mut self.incoming);
        let read = self.conns.read_ws(key, now, &mut incoming);
        self.check_inbound_budget();
        let Some(conn) = self.conns.get_mut(key).filter(|c| !matches!(c.phase(), Phase::Dead(_))) else {
            // Dropped by the budget: what it sent in this read goes with it.
            incoming.clear();
            self.incoming = incoming;
            return;
        };
        let (id, in_core) = (conn_id(key, conn.generation), conn.in_core());
        let mut too_big = false;
        if let Some(peer) = conn.agent_peer() {
            let authenticated = conn.authenticated();
            for msg in incoming.drain(..) {
                let input = match &msg {
                    Incoming::Message(bytes) => PeerInput::Line { peer, line: bytes },
                    // tungstenite cannot read on after an oversized message: the link
                    // ends (1009), unlike a stream link, which skips the line (L38).
                    Incoming::TooBig => {
                        too_big = true;
                        PeerInput::TooBig { peer }
                    }
                    Incoming::InvalidUtf8 => PeerInput::Line { peer, line: &[0xff] },
                };
                self.wiring.handle_peer(t, input);
            }
            if !authenticated && self.wiring.peer_said_hello(peer) {
                // Its hello was accepted: lines up to the full limit from now on.
                conn.agent_authenticated();
            }
        }
        for msg in incoming.drain(..) {
            if !in_core {
                continue;
            }
            match msg {
                Incoming::Message(bytes) => self.wiring.handle_message(t, id, &bytes),
                Incoming::TooBig => self.wiring.handle_frame_too_big(t, id),
                // decisions G6: invalid UTF-8 is bad_frame; the core sees it as such.
                Incoming::InvalidUtf8 => self.wiring.handle_message(t, id, &[0xff]),
            }
        }
        self.incoming = incoming;
        // Pongs and close replies tungstenite queued go out at the end of the turn.
        self.conns.turn().touch(key);
        if too_big {
            return self.close_ws(key, 1009, "too_big", "agent sent a message over 16 MiB", now);
        }
        if read == Ok(Drained::Budget) {
            self.conns.turn().read_again(key);
        }
        if let Err(reason) = read {
            // Input in order: messages read from this connection in this turn (in this call
            // or an earlier one) are answered first, while the device is still online, so
            // the agent's reply is not held for a device that left (issue 8 #4).
            self.conns.turn().end_after_drive(key, reason);
        }
    }

    /// L51: messages read in part and unfinished uploads share a quarter of the memory
    /// budget; messages may always hold one whole message's worth, so that any single
    /// message can arrive. Past it, the connection holding the most of a message read in
    /// part is dropped at once (its buffers go with it; a close would keep them for L28's
    /// 5 s).
    fn check_inbound_budget(&mut self) {
        let share = self
            .config
            .max_inbound
            .saturating_sub(self.wiring.core().upload_held())
            .max(hermes_mobile::limits::MAX_FRAME_BYTES);
        while let Some(key) = self.conns.largest_partial_over(share) {
            let Some(conn) = self.conns.get(key) else { return };
            log::warn!(
                "conn {key}: {} dropped: it holds {} bytes of a message read in part, and such messages hold {} with uploads at {} (MOBILE_MEMORY_BUDGET's share is {})",
                conn.peer,
                conn.partial_bytes(),
                self.conns.partial_bytes(),
                self.wiring.core().upload_held(),
                self.config.max_inbound
            );
            self.kill(
                key,
                "a message read in part took the inbound share over the memory budget (L51)",
            );
        }
    }

    /// The one way a WebSocket is closed: it leaves the core (which is told, if it still
    /// knew it), then closes with `code`/`reason` once its queued frames are out. The
    /// deadline is armed now, when the close is decided, not when the close frame is
    /// written: a peer that stops reading would otherwise hold the socket, its buffers and
    /// a `MOBILE_MAX_CONNECTIONS` slot for as long as it likes.
    pub(super) fn close_ws(&mut self, key: usize, code: u16, reason: &str, log_reason: &str, now: Instant) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        if conn.leave_core() {
            let id = conn_id(key, conn.generation);
            self.wiring.handle_close(self.time(now), id);
        }
        let Some(conn) = self.conns.get_mut(key) else { return };
        let by = conn.decide_close(code, reason, log_reason, now);
        let generation = conn.generation;
        self.wheel.insert(by, conn_timer(key, generation, ConnTimer::CloseBy));
        self.conns.turn().touch(key);
    }

    pub(super) fn flush_conn(&mut self, key: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        if !matches!(conn.phase(), Phase::Ws(..)) {
            return;
        }
        // An `/agent` agent may be handed the whole queue of what waited for it (L40: up to
        // 32 MiB, inline files in base64): its own, larger bound, outside the phones' share.
        let limit = if conn.agent_peer().is_some() {
            AGENT_OUTBOX_LIMIT
        } else {
            self.config.max_queue_bytes
        };
        let close_by = conn.life().close_by();
        let generation = conn.generation;
        let wrote = conn.queued_bytes() > 0;
        let result = self.conns.pump(key, now);
        let Some(conn) = self.conns.get_mut(key) else { return };
        let too_slow = conn.queued_bytes() > limit;
        // The close frame went out: the peer's answer is awaited until an earlier deadline.
        let sooner = conn
            .life()
            .close_by()
            .filter(|by| close_by.is_some_and(|was| by < &was));
        if let Err(reason) = result {
            return self.kill(key, &reason);
        }
        if too_slow {
            return self.kill(key, "client too slow: frames not read");
        }
        if conn.agent_peer().is_some() {
            if conn.all_written() {
                if let Some(keys) = self.agent_ws_owed.remove(&key) {
                    self.wiring.handle_link_written(keys);
                    self.drained_news = true; // the records go in this wake-up
                }
            }
        } else if wrote && conn.queued_bytes() == 0 && conn.in_core() {
            // A resume's replay goes at the phone's pace (review A #5); `drive` carries on.
            self.wiring.handle_drained(conn_id(key, generation));
            self.drained_news = true;
        }
        if let Some(by) = sooner {
            self.wheel.insert(by, conn_timer(key, generation, ConnTimer::CloseBy));
        }
        // L36: frames queued for all clients together stay within the memory budget's share;
        // past it, the client with the most unread goes first.
        while let Some(slowest) = self.conns.slowest_phone_over(self.config.max_outbox_total) {
            self.kill(
                slowest,
                "client too slow: frames for all clients over the memory budget",
            );
        }
    }

    /// Ends a connection now. The slab entry is freed after the current batch.
    pub(super) fn kill(&mut self, key: usize, reason: &str) {
        let Some(conn) = self.conns.get(key) else { return };
        let was_ws = matches!(conn.phase(), Phase::Ws(..));
        let Some(conn) = self.conns.end(key, self.poll.registry()) else {
            return;
        };
        let id = conn_id(key, conn.generation);
        let reason = conn.end_reason(reason);
        if was_ws {
            match conn.who() {
                Some(who) => log::info!("conn {key}: {} {who:?} closed: {reason}", conn.peer),
                None => log::info!("conn {key}: {} (no hello) closed: {reason}", conn.peer),
            }
        } else {
            log::debug!("conn {key}: {reason}");
        }
        let in_core = conn.leave_core();
        let agent_peer = conn.agent_peer();
        // Lines still queued died with the connection: their events go to the next agent.
        if let Some(unwritten) = self.agent_ws_owed.remove(&key) {
            self.wiring.handle_link_unwritten(unwritten, self.shutting_down);
        }
        let t = self.time(Instant::now());
        if in_core {
            self.wiring.handle_close(t, id);
        }
        if let Some(peer) = agent_peer {
            self.link_transports.forget(peer);
            self.wiring.handle_peer(t, PeerInput::Closed { peer });
        }
        // What the wiring now has to do (a read-back, the link's notices, the core's
        // closing frames) goes in this wake-up, also when the end came while `drive`
        // flushed the frames (review E #6).
        self.drained_news = true;
        self.schedule_trim(Instant::now());
    }

    /// Arms one heap trim `TRIM_DELAY` from now unless one is armed: a burst of ends gets
    /// one trim after it, and an idle server none.
    pub(super) fn schedule_trim(&mut self, now: Instant) {
        self.wheel.arm(now + TRIM_DELAY, TimerKey::Trim);
    }
}
