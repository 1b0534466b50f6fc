//! Timers of the event loop and graceful shutdown.

use std::time::{Duration, Instant};

use super::{conn_id, Server, SHUTDOWN_GRACE};
use crate::conn::Phase;
use crate::wheel::{Entry, TimerKind};

impl Server {
    pub(super) fn fire_timers(&mut self, now: Instant) {
        let mut due = std::mem::take(&mut self.due);
        self.wheel.expire(now, &mut due);
        for entry in due.drain(..) {
            self.on_timer(entry, now);
        }
        self.due = due;
    }

    fn on_timer(&mut self, entry: Entry, now: Instant) {
        let t = self.time(now);
        match entry.kind {
            TimerKind::Core => {
                self.core_wake = None;
                self.core.handle_timeout(t);
                // Its timeouts expire held output, dedup entries and cards: memory let go.
                self.schedule_trim(now);
            }
            TimerKind::Agent => {
                self.agent_wake = None;
                self.agent.handle_timeout(t);
            }
            TimerKind::AgentRestart => {
                let due = self.link_transports.restart_at.is_some_and(|at| at <= now);
                if due && self.shutdown_at.is_none() {
                    self.start_child(now);
                }
            }
            TimerKind::AgentReap => {
                if let Some(at) = self.link_transports.reap(now) {
                    self.wheel.insert(at, TimerKind::AgentReap, 0, 0);
                }
            }
            TimerKind::AgentHello => {
                self.agent_hello_due(hermes_mobile::agent_link::PeerId(entry.key as u64), now);
            }
            TimerKind::Upstream => self.on_upstream_timer(entry, now),
            TimerKind::Trim => {
                self.trim_armed = false;
                crate::memory::trim();
            }
            TimerKind::AcceptRetry => {
                self.accept_retry_armed = false;
                self.accept_all(now)
            }
            kind => {
                let Some(conn) = self.conns.live(entry.key, entry.generation) else {
                    return; // lazily cancelled: the connection is gone
                };
                match kind {
                    TimerKind::HttpHead
                        if matches!(conn.phase, Phase::Http { .. } | Phase::Respond { .. } | Phase::Drain(_)) =>
                    {
                        self.kill(entry.key, "no complete request within the hello timeout")
                    }
                    TimerKind::HttpHead if conn.agent_peer().is_some() && conn.device.is_none() => {
                        self.kill(entry.key, "no agent hello within the hello timeout")
                    }
                    TimerKind::KeepAlive => self.keep_alive(entry.key, now),
                    TimerKind::Linger if conn.closing || conn.close_after.is_some() => {
                        // decisions L28: dropped, whatever is still queued.
                        let why = conn.reason.take().unwrap_or_else(|| "closing".into());
                        conn.reason = Some(format!("{why}; close did not finish in time"));
                        self.kill(entry.key, "close did not finish in time")
                    }
                    TimerKind::Linger if matches!(conn.phase, Phase::Drain(_)) => {
                        self.kill(entry.key, "http response sent")
                    }
                    _ => {}
                }
            }
        }
    }

    /// decisions K2: ping after `keepalive` of quiet; close 1001 after three times that.
    fn keep_alive(&mut self, key: usize, now: Instant) {
        let keepalive = self.config.keepalive;
        let Some(conn) = self.conns.get_mut(key) else { return };
        if conn.closing || conn.close_after.is_some() {
            return;
        }
        let quiet = now.saturating_duration_since(conn.last_rx);
        let generation = conn.generation;
        if quiet >= keepalive * 3 {
            conn.in_core = false;
            self.core.handle_close(self.time(now), conn_id(key, generation));
            return self.decide_close(key, 1001, "idle", "silent too long", now);
        }
        if quiet >= keepalive && !conn.pinged {
            conn.pinged = true;
            if let Err(reason) = conn.ping() {
                return self.kill(key, &reason);
            }
        }
        let next = if quiet < keepalive {
            conn.last_rx + keepalive
        } else {
            conn.last_rx + keepalive * 3
        };
        self.wheel.insert(
            next.max(now + Duration::from_millis(10)),
            TimerKind::KeepAlive,
            key,
            generation,
        );
    }

    pub(super) fn begin_shutdown(&mut self, now: Instant) {
        log::info!("shutting down: closing {} connections", self.conns.len());
        self.shutdown_at = Some(now + SHUTDOWN_GRACE);
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
        let keys = self.conns.keys();
        let t = self.time(now);
        for key in keys {
            let Some(conn) = self.conns.get_mut(key) else { continue };
            if !matches!(conn.phase, Phase::Ws(_)) {
                self.kill(key, "shutting down");
                continue;
            }
            if conn.in_core {
                conn.in_core = false;
                self.core.handle_close(t, conn_id(key, conn.generation));
            }
            self.decide_close(key, 1001, "shutdown", "server shutting down", now);
        }
        self.drive(now);
    }
}
