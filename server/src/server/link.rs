//! The event loop's side of the agent link: the file worker's answers (saved uploads, read
//! files) to the wiring, the link's lines to and from its peers, and the `exec:` child's
//! life (start, restart with backoff, stop).

use std::time::Instant;

use hermes_mobile::agent_link::{LineItem, PeerId};
use hermes_mobile::journal::owed::EventKey;
use mio::Token;

use super::link_transports::{PeerHome, ReadEnd};
use super::{LinkRead, Server};
use crate::agent::io::PeerInput;
use crate::fileio::Done;
use crate::timer::TimerKey;

impl Server {
    /// The file worker finished something.
    pub(super) fn on_files_done(&mut self, now: Instant) {
        while let Some(done) = self.files.poll_done() {
            match done {
                Done::Saved { ticket, event, result } => self.wiring.handle_file_saved(ticket, event, result),
                Done::Loaded { ticket, result } => self.wiring.handle_file_loaded(self.time(now), ticket, result),
                Done::MediaSaved { name, result } => self.wiring.handle_media_saved(&name, result.is_ok()),
                Done::MediaRemoved(names) => self.wiring.handle_media_removed(&names),
                Done::Fetched { ticket, result } => self.file_fetched(ticket, result, now),
            }
        }
        // What the results decided leaves with the rest of the batch, in `run`'s drive.
    }

    /// A line for a peer of the link. An owed event it carries is the agent's once the
    /// line is written whole (L64): on a pipe or socket when its last byte left our
    /// outbox; on `/agent` once the connection's queue is written to the socket.
    /// A peer that ends first leaves it owed: it goes to the next agent (review D #8), also
    /// when the peer had ended before the line came (the link hears of an end after the
    /// lines it wrote in the same wake-up).
    pub(super) fn write_link_line(&mut self, peer: PeerId, mut line: String, owed: Option<EventKey>, now: Instant) {
        match self.link_transports.home(peer) {
            Some(PeerHome::Ws(key, generation)) if self.conns.live(key, generation).is_some() => {
                line.pop(); // a WebSocket message is the line without its newline
                self.conns.queue(key, line);
                if let Some(owed) = owed {
                    self.agent_ws_owed.entry(key).or_default().push(owed);
                }
            }
            Some(PeerHome::Ws(..)) | None => {
                self.link_transports.note_unwritten(owed);
                self.link_lines_written();
            }
            Some(home) => {
                if let Err(why) = self.link_transports.write(home, line, owed) {
                    self.end_link_peer(peer, &why, now);
                }
                self.link_lines_written();
            }
        }
    }

    /// Tells the core which owed events' lines were written whole, and which died with
    /// their peer (those go to the next agent; at shutdown, to the next start's).
    pub(super) fn link_lines_written(&mut self) {
        let keys = self.link_transports.take_written();
        if !keys.is_empty() {
            self.wiring.handle_link_written(keys);
        }
        let unwritten = self.link_transports.take_unwritten();
        if !unwritten.is_empty() {
            self.wiring.handle_link_unwritten(unwritten, self.shutting_down);
        }
    }

    /// Ends a peer of the link, whatever carries it; the link hears of it.
    pub(super) fn end_link_peer(&mut self, peer: PeerId, reason: &str, now: Instant) {
        let Some(home) = self.link_transports.home(peer) else {
            return;
        };
        match home {
            PeerHome::Ws(key, _) => {
                // The link learns of it when the connection is gone (`kill`).
                return self.close_ws(key, 1008, "agent link closed", reason, now);
            }
            PeerHome::Child => {
                let restart = !self.shutting_down;
                let registry = self.poll.registry();
                if let Some(delay) = self.link_transports.end_child(registry, now, reason, restart) {
                    self.wheel.arm(now + delay, TimerKey::AgentRestart);
                }
                if let Some(at) = self.link_transports.reap(now) {
                    self.wheel.arm(at, TimerKey::AgentReap);
                }
                self.link_lines_written();
            }
            PeerHome::Unix(key) => {
                log::info!("agent link: peer {} closed: {reason}", peer.0);
                self.link_transports.close_unix(self.poll.registry(), key);
                self.link_lines_written();
            }
        }
        let t = self.time(now);
        self.wiring.handle_peer(t, PeerInput::Closed { peer });
    }

    pub(super) fn start_child(&mut self, now: Instant) {
        match self.link_transports.spawn(self.poll.registry(), now) {
            Ok(peer) => {
                let opened = PeerInput::Opened {
                    peer,
                    needs_token: false,
                    source: Default::default(),
                };
                self.wiring.handle_peer(self.time(now), opened);
            }
            Err(e) => {
                log::error!("agent: cannot start the command: {e}");
                self.link_transports.want_restart();
                self.wheel
                    .arm(now + std::time::Duration::from_secs(5), TimerKey::AgentRestart);
            }
        }
    }

    pub(super) fn on_agent_accept(&mut self, now: Instant) {
        for peer in self.link_transports.accept(self.poll.registry()) {
            let opened = PeerInput::Opened {
                peer,
                needs_token: false,
                source: Default::default(),
            };
            self.wiring.handle_peer(self.time(now), opened);
            // A local peer that never says hello must not keep one of the few slots.
            let at = now + self.config.core.hello_timeout;
            self.wheel.insert(at, TimerKey::AgentHello(peer));
            // Edge-triggered: its hello may already be waiting.
            if let Some(home) = self.link_transports.home(peer) {
                self.read_link_peer(home, now);
            }
        }
    }

    /// A Unix peer's hello timeout: ended if it has not said hello.
    pub(super) fn agent_hello_due(&mut self, peer: PeerId, now: Instant) {
        let said_hello = self.wiring.peer_said_hello(peer);
        if !said_hello && self.link_transports.home(peer).is_some() {
            self.end_link_peer(peer, "no hello within the hello timeout", now);
        }
    }

    pub(super) fn on_unix_peer(&mut self, token: Token, now: Instant) {
        let Some(peer) = self.link_transports.unix_peer_of(token) else {
            return;
        };
        let Some(home) = self.link_transports.home(peer) else {
            return;
        };
        self.flush_link_peer(home, now);
        self.read_link_peer(home, now);
    }

    pub(super) fn flush_link_peer(&mut self, home: PeerHome, now: Instant) {
        let flushed = self.link_transports.flush(home);
        self.link_lines_written();
        if let Err(why) = flushed {
            let peer = match home {
                PeerHome::Child => self.link_transports.child_peer(),
                _ => self.link_transports.unix_peer_of_home(home),
            };
            if let Some(peer) = peer {
                self.end_link_peer(peer, &why, now);
            }
        }
    }

    /// Reads lines from a stream peer into the link, pausing while a command's file is read
    /// and stopping at this turn's budget.
    pub(super) fn read_link_peer(&mut self, home: PeerHome, now: Instant) {
        let t = self.time(now);
        let agent = &mut self.wiring;
        let mut paused_for_file = false;
        let mut on_line = |peer: PeerId, item: Option<LineItem>| {
            match item {
                None => {
                    let go_on = agent.wants_lines();
                    paused_for_file |= !go_on;
                    return go_on;
                }
                Some(LineItem::Line(line)) => agent.handle_peer(t, PeerInput::Line { peer, line: &line }),
                Some(LineItem::TooBig) => agent.handle_peer(t, PeerInput::TooBig { peer }),
            }
            true
        };
        let (peer, end) = match home {
            PeerHome::Child => (
                self.link_transports.child_peer(),
                self.link_transports.read_child(&mut on_line),
            ),
            PeerHome::Unix(key) => (
                self.link_transports.unix_peer_of_home(home),
                self.link_transports.read_unix(key, &mut on_line),
            ),
            PeerHome::Ws(key, generation) => {
                if self.conns.get(key).is_some_and(|c| c.generation == generation) {
                    self.on_ws(key, now);
                }
                return;
            }
        };
        self.link_paused |= paused_for_file;
        match (peer, end) {
            (Some(peer), Some(ReadEnd::Closed(why))) => self.end_link_peer(peer, &why, now),
            (Some(_), Some(ReadEnd::Budget)) => self.link_read_again.push(LinkRead::Peer(home)),
            _ => {}
        }
    }

    pub(super) fn read_child_stderr(&mut self) {
        if self.link_transports.read_child_stderr() {
            self.link_read_again.push(LinkRead::ChildStderr);
        }
    }

    /// After a command's file was read, the lines that waited behind it are read.
    pub(super) fn resume_link_reads(&mut self, now: Instant) {
        for _ in 0..64 {
            if !self.link_paused {
                return;
            }
            if !self.wiring.wants_lines() {
                return;
            }
            self.link_paused = false;
            for peer in self.link_transports.all_peers() {
                if let Some(home) = self.link_transports.home(peer) {
                    self.read_link_peer(home, now);
                }
            }
            self.drive(now);
        }
    }
}
