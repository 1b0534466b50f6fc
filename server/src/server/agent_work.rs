//! The event loop's side of the agent port: the agent's [`AgentIo`] carried out (calls by
//! the HTTP client, lines by the link's transports, files by the file worker, all off the
//! loop's critical path) and the answers handed back, whatever the backend.

use std::time::Instant;

use super::Server;
use crate::agent::io::{AgentIo, LoadError};
use crate::fileio::Ticket;
use crate::timer::CallRef;

type LoadResult = Result<Vec<u8>, LoadError>;

impl Server {
    /// Carries out what the agent asked for and hands it the HTTP client's news; whether
    /// anything happened.
    pub(super) fn pump_agent_io(&mut self, now: Instant) -> bool {
        let t = self.time(now);
        let mut progress = false;
        loop {
            let mut any = false;
            while let Some(io) = self.agent.poll_io() {
                any = true;
                self.carry_out(io, now);
            }
            if let Some(client) = self.http.as_mut() {
                while let Some((id, event)) = client.poll_event() {
                    any = true;
                    match self.push.as_mut() {
                        Some(push) if crate::push::owns(id) => push.handle_call(t, id, event),
                        _ => self.agent.handle_call(t, id, event),
                    }
                }
            }
            if !any {
                break;
            }
            progress = true;
        }
        progress
    }

    /// Carries out push's calls and tells the core what push learned; whether anything
    /// happened.
    pub(super) fn pump_push(&mut self, now: Instant) -> bool {
        let t = self.time(now);
        let Some(push) = self.push.as_mut() else { return false };
        let mut progress = false;
        while let Some(io) = push.poll(t, &mut self.core) {
            progress = true;
            match io {
                crate::push::PushIo::Call { id, target, request } => match self.http.as_mut() {
                    Some(client) => client.start_to(self.poll.registry(), &mut self.wheel, id, target, request, now),
                    None => log::error!("push: no HTTP client"),
                },
                crate::push::PushIo::Persist { path, contents } => self.files.persist_latest(path, contents),
            }
        }
        progress
    }

    fn carry_out(&mut self, io: AgentIo, now: Instant) {
        match io {
            AgentIo::Call { id, request } => match self.http.as_mut() {
                Some(client) => client.start(self.poll.registry(), &mut self.wheel, id, request, now),
                None => log::error!("agent: a call with no HTTP agent configured"),
            },
            AgentIo::Cancel(id) => {
                if let Some(client) = self.http.as_mut() {
                    client.cancel(self.poll.registry(), id);
                }
            }
            AgentIo::Load { tag, path, limit } => {
                let ticket = self.files.load(path, limit);
                self.agent_loads.push((ticket, tag));
            }
            AgentIo::Persist { path, contents } => self.files.persist(path, contents),
            AgentIo::Write { peer, line } => self.write_link_line(peer, line, now),
            AgentIo::Close { peer, reason } => self.end_link_peer(peer, &reason, now),
            AgentIo::Handed(key) => self.core.handle_agent_handed(key),
        }
    }

    /// A file the agent asked for was read.
    pub(super) fn agent_loaded(&mut self, ticket: Ticket, result: LoadResult, now: Instant) {
        let Some(at) = self.agent_loads.iter().position(|(t, _)| *t == ticket) else {
            return;
        };
        let (_, tag) = self.agent_loads.swap_remove(at);
        let t = self.time(now);
        self.agent.handle_loaded(t, tag, result);
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
