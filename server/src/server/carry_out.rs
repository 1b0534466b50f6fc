//! The event loop carries out what the wiring decided: frames and closes to connections,
//! calls through the HTTP client, lines through the link's transports, files through the
//! file worker, records and reads through the journal's thread. It decides nothing: each
//! arm only moves the request to whatever does the I/O, and hands back what comes of it.

use std::time::Instant;

use hermes_mobile::{ConnId, Time};

use super::link_transports::PeerHome;
use super::{split_id, Server};
use crate::timer::CallRef;
use crate::wiring::WiringIo;

impl Server {
    pub(super) fn carry_out(&mut self, io: WiringIo, now: Instant) {
        match io {
            WiringIo::Send { conn, frame } => {
                if let Some(key) = self.live_key(conn) {
                    self.conns.queue(key, frame);
                }
            }
            WiringIo::Close { conn, code, reason } => {
                if let Some(key) = self.live_key(conn) {
                    self.close_ws(key, code, reason, reason, now);
                }
            }
            WiringIo::Authenticated { conn, device, service } => {
                let Some(key) = self.live_key(conn) else { return };
                log::info!(
                    "conn {key}: hello as {device:?}{}",
                    if service { " (service)" } else { "" }
                );
                if let Some(c) = self.conns.get_mut(key) {
                    c.phone_authenticated(device.0);
                }
                self.conns.turn().touch(key);
            }
            WiringIo::Call { id, request } => match self.http.as_mut() {
                Some(client) => client.start(self.poll.registry(), &mut self.wheel, id, request, now),
                None => log::error!("agent: a call with no HTTP agent configured"),
            },
            WiringIo::PushCall { id, target, request } => match self.http.as_mut() {
                Some(client) => client.start_to(self.poll.registry(), &mut self.wheel, id, target, request, now),
                None => log::error!("push: no HTTP client"),
            },
            WiringIo::Cancel(id) => {
                if let Some(client) = self.http.as_mut() {
                    client.cancel(self.poll.registry(), id);
                }
            }
            // A pipe or socket to the agent: after the phones' frames of this step (`drive`),
            // in order (see `link_out`). An agent on `/agent` is a WebSocket, queued as now.
            io @ (WiringIo::LinkWrite { peer, .. } | WiringIo::LinkClose { peer, .. })
                if !matches!(self.link_transports.home(peer), Some(PeerHome::Ws(..))) =>
            {
                self.link_out.push(io)
            }
            WiringIo::LinkWrite { peer, line, owed } => self.write_link_line(peer, line, owed, now),
            WiringIo::LinkClose { peer, reason } => self.end_link_peer(peer, &reason, now),
            WiringIo::SaveFile { ticket, event } => self.files.save(ticket, event),
            WiringIo::SaveMedia { name, data } => self.files.save_media(name, data),
            WiringIo::DeleteMedia { device } => self.files.delete_media(device),
            WiringIo::LoadFile { ticket, path, limit } => self.files.load(ticket, path, limit),
            WiringIo::Persist { path, contents } => self.files.persist(path, contents),
            WiringIo::PersistLatest { path, contents } => self.files.persist_latest(path, contents),
            WiringIo::JournalWrite(records) => self.write_journal(records),
            WiringIo::JournalRead { token, read } => self.read_journal(token, read),
            WiringIo::CardAnswered { request, reply } => self.card_answered(request, reply, now),
            WiringIo::Paired { request, outcome } => self.pair_answered(request, outcome, now),
            WiringIo::Revoked { request, outcome } => self.control_revoked(request, outcome),
        }
    }

    /// The slab key of a connection the core names, if it is still the same connection.
    fn live_key(&mut self, conn: ConnId) -> Option<usize> {
        let (key, generation) = split_id(conn);
        self.conns.live(key, generation).map(|_| key)
    }

    /// Hands the HTTP client's news to the wiring; whether there was any.
    pub(super) fn upstream_news(&mut self, t: Time) -> bool {
        let Some(client) = self.http.as_mut() else { return false };
        let mut any = false;
        while let Some((id, event)) = client.poll_event() {
            any = true;
            self.wiring.handle_call(t, id, event);
        }
        any
    }

    pub(super) fn on_upstream_ready(&mut self, key: usize, now: Instant) {
        if let Some(client) = self.http.as_mut() {
            client.on_ready(key, self.poll.registry(), &mut self.wheel, now);
        }
    }

    pub(super) fn on_upstream_timer(&mut self, call: CallRef, now: Instant) {
        if let Some(client) = self.http.as_mut() {
            client.on_timer(call, self.poll.registry(), &mut self.wheel, now);
        }
    }

    /// The waker fired: DNS answers may be in.
    pub(super) fn on_upstream_wake(&mut self, now: Instant) {
        if let Some(client) = self.http.as_mut() {
            client.on_wake(self.poll.registry(), &mut self.wheel, now);
        }
    }

    pub(super) fn upstream_read_again(&mut self, now: Instant) {
        if let Some(client) = self.http.as_mut() {
            if client.wants_read_again() {
                client.read_again(self.poll.registry(), &mut self.wheel, now);
            }
        }
    }
}
