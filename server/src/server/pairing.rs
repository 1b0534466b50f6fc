//! The `/pair` route on the loop (issue 26): its body is read with its head (at most 4 KiB,
//! inside the head's deadline), the core trades the code for a new device token, and the
//! connection waits in `Phase::Answer` for the commit that keeps the pairing, no longer
//! than [`PAIR_TIMEOUT`].

use std::time::{Duration, Instant};

use hermes_mobile::gateway::PairOutcome;

use super::http_side::request_source;
use super::{conn_timer, Server};
use crate::conn::Phase;
use crate::http::CardAnswerRequest;
use crate::pair_route::{self, PairReply, MAX_BODY_BYTES};
use crate::timer::{ConnRef, ConnTimer};

/// Pairings waiting for their commit at once: more get 503.
const MAX_WAITING: usize = 16;
pub(super) const PAIR_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub(super) struct PairAnswers {
    waiting: Vec<(u64, ConnRef)>,
    next: u64,
}

impl PairAnswers {
    pub(super) fn has(&self, conn: ConnRef) -> bool {
        self.waiting.iter().any(|(_, c)| *c == conn)
    }
}

impl Server {
    /// `POST /pair` whose head is read: its answer now, or `None` when the body is still
    /// coming (this runs again as it comes) or the pairing waits for its commit.
    pub(super) fn ask_pair(
        &mut self,
        key: usize,
        req: CardAnswerRequest,
        head_len: usize,
        now: Instant,
    ) -> Option<Vec<u8>> {
        let length = match (req.length, req.encoded) {
            (Err(()), _) => return Some(PairReply::Malformed("Content-Length is not one number").response()),
            (_, true) | (Ok(None), _) => return Some(PairReply::LengthRequired.response()),
            (Ok(Some(n)), false) => n,
        };
        if length > MAX_BODY_BYTES {
            return Some(PairReply::TooLarge.response());
        }
        if !req.json {
            // Another site's page could otherwise POST here from the owner's browser and
            // spend the owner's address's tries (a "simple" request needs no preflight).
            return Some(PairReply::NotJson.response());
        }
        let conn = self.conns.get(key)?;
        let (generation, peer) = (conn.generation, conn.peer);
        let Phase::Http { head, .. } = conn.phase() else {
            return None;
        };
        if head.len() < head_len + length {
            return None; // the rest of the body is on its way (the head's deadline holds)
        }
        let body = match pair_route::parse(&head[head_len..head_len + length]) {
            Ok(body) => body,
            Err(why) => return Some(PairReply::Malformed(why).response()),
        };
        let conns = &self.conns;
        self.pair_answers.waiting.retain(|(_, c)| {
            conns
                .get(c.key)
                .is_some_and(|conn| conn.generation == c.generation && matches!(conn.phase(), Phase::Answer(_)))
        });
        if self.pair_answers.waiting.len() >= MAX_WAITING {
            return Some(PairReply::Busy.response());
        }
        let token = match crate::state::random_bytes::<{ hermes_mobile::devices::tokens::TOKEN_BYTES }>() {
            Ok(random) => hermes_mobile::devices::tokens::encode(&random),
            Err(e) => {
                log::error!("no random source for a device token: {e}");
                return Some(PairReply::Outcome(PairOutcome::NotKept).response());
            }
        };
        self.pair_answers.next += 1;
        let request = self.pair_answers.next;
        let source = request_source(peer, req.client);
        self.wiring.handle_pair(self.time(now), request, source, body, token);
        self.pair_answers.waiting.push((request, ConnRef { key, generation }));
        self.conns.get_mut(key)?.await_answer();
        self.wheel
            .insert(now + PAIR_TIMEOUT, conn_timer(key, generation, ConnTimer::Pair));
        None
    }

    /// The core's answer to a waiting `/pair`: at once for a refusal, after the commit for
    /// a pairing.
    pub(super) fn pair_answered(&mut self, request: u64, outcome: PairOutcome, now: Instant) {
        let Some(at) = self.pair_answers.waiting.iter().position(|(r, _)| *r == request) else {
            if let PairOutcome::Paired { device, .. } = outcome {
                log::warn!("device {device:?} was paired, but its page had gone before the answer");
            }
            return;
        };
        let (_, conn) = self.pair_answers.waiting.swap_remove(at);
        self.respond_pair(conn, PairReply::Outcome(outcome), now);
    }

    /// Its commit took too long: 503.
    pub(super) fn pair_overdue(&mut self, conn: ConnRef, now: Instant) {
        let Some(at) = self.pair_answers.waiting.iter().position(|(_, c)| *c == conn) else {
            return;
        };
        let (_, conn) = self.pair_answers.waiting.swap_remove(at);
        log::warn!("conn {}: a pairing waited too long for the journal", conn.key);
        self.respond_pair(conn, PairReply::Busy, now);
    }

    fn respond_pair(&mut self, conn: ConnRef, reply: PairReply, now: Instant) {
        let Some(c) = self.conns.live(conn.key, conn.generation) else {
            return;
        };
        if !matches!(c.phase(), Phase::Answer(_)) {
            return;
        }
        log::debug!("conn {}: POST /pair -> {reply}", conn.key);
        c.respond(reply.response(), None);
        self.on_respond(conn.key, now);
    }
}
