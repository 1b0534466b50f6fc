//! The event loop's side of the HTTP agents (issue 11): the agent's requests to the HTTP
//! client, the client's news back to the agent, and the agent's files through the file
//! worker (a `MEDIA:` file read, a conversation saved), all off the loop's critical path.

use std::time::Instant;

use super::Server;
use crate::agent::http::HttpIo;
use crate::fileio::{LoadError, Ticket};
use crate::wheel::Entry;

type LoadResult = Result<Vec<u8>, LoadError>;

impl Server {
    /// Carries out what the HTTP agent asked for and hands it the client's news; whether
    /// anything happened.
    pub(super) fn pump_http(&mut self, now: Instant) -> bool {
        let t = self.time(now);
        let Some(client) = self.http.as_mut() else { return false };
        let Some(agent) = self.agent.http_agent() else {
            return false;
        };
        let mut progress = false;
        loop {
            let mut any = false;
            while let Some(io) = agent.poll_io() {
                any = true;
                match io {
                    HttpIo::Call { id, request } => {
                        client.start(self.poll.registry(), &mut self.wheel, id, request, now)
                    }
                    HttpIo::Cancel(id) => client.cancel(self.poll.registry(), id),
                    HttpIo::Load { tag, path, limit } => {
                        let ticket = self.files.load(path, limit);
                        self.http_loads.push((ticket, tag));
                    }
                    HttpIo::Persist { path, contents } => self.files.persist(path, contents),
                }
            }
            while let Some((id, event)) = client.poll_event() {
                any = true;
                agent.handle_call(t, id, event);
            }
            if !any {
                break;
            }
            progress = true;
        }
        progress
    }

    /// A file the HTTP agent asked for was read; a result that is not its comes back.
    pub(super) fn http_loaded(&mut self, ticket: Ticket, result: LoadResult, now: Instant) -> Result<(), LoadResult> {
        let Some(at) = self.http_loads.iter().position(|(t, _)| *t == ticket) else {
            return Err(result);
        };
        let (_, tag) = self.http_loads.swap_remove(at);
        let t = self.time(now);
        if let Some(agent) = self.agent.http_agent() {
            agent.handle_loaded(t, tag, result);
        }
        Ok(())
    }

    pub(super) fn on_upstream_ready(&mut self, key: usize, now: Instant) {
        if let Some(client) = self.http.as_mut() {
            client.on_ready(key, self.poll.registry(), &mut self.wheel, now);
        }
    }

    pub(super) fn on_upstream_timer(&mut self, entry: Entry, now: Instant) {
        if let Some(client) = self.http.as_mut() {
            client.on_timer(entry.key, entry.generation, self.poll.registry(), &mut self.wheel, now);
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
