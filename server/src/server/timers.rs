//! Timers of the event loop and graceful shutdown.

use std::time::Instant;

use super::{conn_timer, Server, SHUTDOWN_GRACE};
use crate::conn::Phase;
use crate::timer::{ConnRef, ConnTimer, KeepAlive, TimerKey};

impl Server {
    pub(super) fn fire_timers(&mut self, now: Instant) {
        let mut due = std::mem::take(&mut self.due);
        self.wheel.expire(now, &mut due);
        for key in due.drain(..) {
            self.on_timer(key, now);
        }
        self.due = due;
    }

    fn on_timer(&mut self, key: TimerKey, now: Instant) {
        let t = self.time(now);
        match key {
            TimerKey::Wiring => {
                let core_due = self.wiring.core().poll_timeout().is_some_and(|at| at <= t);
                self.wiring.handle_timeout(t);
                if core_due {
                    // Its timeouts expire held output, dedup entries and cards: memory let go.
                    self.schedule_trim(now);
                }
            }
            TimerKey::AgentRestart => {
                if self.link_transports.take_restart() && !self.shutting_down {
                    self.start_child(now);
                }
            }
            TimerKey::AgentReap => {
                if let Some(at) = self.link_transports.reap(now) {
                    self.wheel.arm(at, TimerKey::AgentReap);
                }
            }
            TimerKey::AgentHello(peer) => self.agent_hello_due(peer, now),
            TimerKey::Control(key, serial) => self.control_overdue(key, serial),
            TimerKey::Call(call) => self.on_upstream_timer(call, now),
            TimerKey::Trim => crate::memory::trim(),
            TimerKey::AcceptRetry => self.accept_all(now),
            TimerKey::Shutdown => self.grace_over = true,
            TimerKey::Conn(conn, timer) => self.on_conn_timer(conn, timer, now),
        }
    }

    fn on_conn_timer(&mut self, at: ConnRef, timer: ConnTimer, now: Instant) {
        let Some(conn) = self.conns.live(at.key, at.generation) else {
            return; // lazily cancelled: the connection is gone
        };
        let in_http = matches!(
            conn.phase(),
            Phase::Http { .. } | Phase::Respond { .. } | Phase::Drain(_)
        );
        match timer {
            ConnTimer::Head if matches!(conn.phase(), Phase::Http { .. }) => {
                self.kill(at.key, "no complete request head in time (L54)")
            }
            // A file's answer (L63) has its own, longer deadline.
            ConnTimer::Hello if in_http && !self.file_answers.has(at) => {
                self.kill(at.key, "no complete request within the hello timeout")
            }
            ConnTimer::FileAnswer if matches!(conn.phase(), Phase::Answer(_) | Phase::Respond { .. }) => {
                self.kill(at.key, "the file's answer was not out in time")
            }
            ConnTimer::CardAnswer if self.card_answers.has(at) => self.card_answer_overdue(at, now),
            ConnTimer::Pair if self.pair_answers.has(at) => self.pair_overdue(at, now),
            ConnTimer::Hello if conn.agent_peer().is_some() && !conn.authenticated() => {
                self.kill(at.key, "no agent hello within the hello timeout")
            }
            ConnTimer::KeepAlive => self.keep_alive(at.key, now),
            ConnTimer::CloseBy if conn.life().close_overdue(now) => {
                // decisions L28: dropped, whatever is still queued.
                conn.close_overdue();
                self.kill(at.key, "close did not finish in time")
            }
            ConnTimer::Drain if matches!(conn.phase(), Phase::Drain(_)) => self.kill(at.key, "http response sent"),
            _ => {}
        }
    }

    /// decisions K2 (`timer::keep_alive`): ping after `keepalive` of quiet; close 1001
    /// after three times that. Nothing once a close is decided: its deadline rules.
    fn keep_alive(&mut self, key: usize, now: Instant) {
        let keepalive = self.config.keepalive;
        let Some(conn) = self.conns.get_mut(key) else { return };
        let generation = conn.generation;
        let next = match conn.keep_alive(now, keepalive) {
            Err(reason) => return self.kill(key, &reason),
            Ok(None) => return,
            Ok(Some(KeepAlive::Close)) => return self.close_ws(key, 1001, "idle", "silent too long", now),
            Ok(Some(KeepAlive::Ping(next) | KeepAlive::Wait(next))) => next,
        };
        self.wheel
            .insert(next, conn_timer(key, generation, ConnTimer::KeepAlive));
    }

    pub(super) fn begin_shutdown(&mut self, now: Instant) {
        log::info!("shutting down: closing {} connections", self.conns.len());
        self.shutting_down = true;
        self.wheel.arm(now + SHUTDOWN_GRACE, TimerKey::Shutdown);
        if let Some(mut listener) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
        }
        // The agent link's peers go first (the child gets SIGTERM), so that turns in flight
        // are ended for the phones while they are still connected.
        self.link_transports.stop_listening(self.poll.registry());
        for peer in self.link_transports.stream_peers() {
            self.end_link_peer(peer, "the gateway is shutting down", now);
        }
        self.drive(now);
        for key in self.conns.keys() {
            let Some(conn) = self.conns.get(key) else { continue };
            if !matches!(conn.phase(), Phase::Ws(..)) {
                self.kill(key, "shutting down");
                continue;
            }
            self.close_ws(key, 1001, "shutdown", "server shutting down", now);
        }
        self.drive(now);
    }
}
