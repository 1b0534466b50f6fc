//! The `/card-answer` route on the loop (issue 25): its body is read with its head (at
//! most 4 KiB, inside the head's deadline), the wiring judges it, and a connection whose
//! answer waits for the journal's commit waits in `Phase::Answer` meanwhile, no longer
//! than [`CARD_ANSWER_TIMEOUT`].

use std::time::{Duration, Instant};

use super::{conn_timer, Server};
use crate::card_answer::{self, Reply, MAX_BODY_BYTES};
use crate::conn::Phase;
use crate::http::CardAnswerRequest;
use crate::timer::{ConnRef, ConnTimer};

/// Answers waiting for their commit at once: more get 503 (a commit takes milliseconds).
const MAX_WAITING: usize = 64;
/// A commit slower than this is answered 503; the answer may still be applied after, and
/// the app shows how the card closed.
pub(super) const CARD_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Answers waiting for their commit.
#[derive(Debug, Default)]
pub(super) struct CardAnswers {
    /// The wiring's request id, the connection, and the origin its answer names.
    waiting: Vec<(u64, ConnRef, Option<String>)>,
    next: u64,
}

impl CardAnswers {
    pub(super) fn has(&self, conn: ConnRef) -> bool {
        self.waiting.iter().any(|(_, c, _)| *c == conn)
    }
}

impl Server {
    /// `POST /card-answer` whose head is read: its answer now, or `None` when the body is
    /// still coming (this runs again as it comes) or the answer waits for a commit.
    pub(super) fn ask_card_answer(
        &mut self,
        key: usize,
        req: CardAnswerRequest,
        head_len: usize,
        now: Instant,
    ) -> Option<Vec<u8>> {
        let public_url = self.wiring.push().and_then(|p| p.public_url()).map(str::to_owned);
        let origin = card_answer::own_origin(req.origin.as_deref(), req.host.as_deref(), public_url.as_deref());
        let t = self.time(now);
        let mut refuse = |r: Reply, why: &'static str| {
            self.wiring.card_answer_refused(t, why);
            Some(r.response(origin.as_deref()))
        };
        let length = match (req.length, req.encoded) {
            (Err(()), _) => {
                return refuse(
                    Reply::Malformed("Content-Length is not one number"),
                    "a bad Content-Length",
                )
            }
            (_, true) | (Ok(None), _) => return refuse(Reply::LengthRequired, "no Content-Length"),
            (Ok(Some(n)), false) => n,
        };
        if length > MAX_BODY_BYTES {
            return refuse(Reply::TooLarge, "a body over 4 KiB");
        }
        let conn = self.conns.get(key)?;
        let generation = conn.generation;
        let Phase::Http { head, .. } = conn.phase() else {
            return None;
        };
        if head.len() < head_len + length {
            return None; // the rest of the body is on its way (the head's deadline holds)
        }
        let body = match card_answer::parse(&head[head_len..head_len + length]) {
            Ok(body) => body,
            Err(why) => {
                self.wiring.card_answer_refused(t, "a malformed body");
                return Some(Reply::Malformed(why).response(origin.as_deref()));
            }
        };
        let conns = &self.conns;
        self.card_answers.waiting.retain(|(_, c, _)| {
            conns
                .get(c.key)
                .is_some_and(|conn| conn.generation == c.generation && matches!(conn.phase(), Phase::Answer(_)))
        });
        if self.card_answers.waiting.len() >= MAX_WAITING {
            return Some(Reply::Busy.response(origin.as_deref()));
        }
        self.card_answers.next += 1;
        let request = self.card_answers.next;
        if let Some(r) = self.wiring.handle_card_answer(t, request, &body) {
            return Some(r.response(origin.as_deref()));
        }
        let at = ConnRef { key, generation };
        self.card_answers.waiting.push((request, at, origin));
        self.conns.get_mut(key)?.await_answer();
        self.wheel.insert(
            now + CARD_ANSWER_TIMEOUT,
            conn_timer(key, generation, ConnTimer::CardAnswer),
        );
        None
    }

    /// The wiring's answer to a waiting `/card-answer`.
    pub(super) fn card_answered(&mut self, request: u64, reply: Reply, now: Instant) {
        let Some(at) = self.card_answers.waiting.iter().position(|(r, _, _)| *r == request) else {
            return;
        };
        let (_, conn, origin) = self.card_answers.waiting.swap_remove(at);
        self.respond_card_answer(conn, reply, origin.as_deref(), now);
    }

    /// Its commit took too long: 503.
    pub(super) fn card_answer_overdue(&mut self, conn: ConnRef, now: Instant) {
        let Some(at) = self.card_answers.waiting.iter().position(|(_, c, _)| *c == conn) else {
            return;
        };
        let (_, conn, origin) = self.card_answers.waiting.swap_remove(at);
        log::warn!("conn {}: a card's answer waited too long for the journal", conn.key);
        self.respond_card_answer(conn, Reply::Busy, origin.as_deref(), now);
    }

    fn respond_card_answer(&mut self, conn: ConnRef, reply: Reply, origin: Option<&str>, now: Instant) {
        let Some(c) = self.conns.live(conn.key, conn.generation) else {
            return;
        };
        if !matches!(c.phase(), Phase::Answer(_)) {
            return;
        }
        log::debug!("conn {}: POST /card-answer -> {reply:?}", conn.key);
        c.respond(reply.response(origin), None);
        self.on_respond(conn.key, now);
    }
}
