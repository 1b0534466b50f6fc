//! Accepting connections and answering plain HTTP: the request head, the response (a
//! page, `/healthz`, a refusal), then either the drain of a plain response or the
//! upgrade to a WebSocket for a phone or an `/agent` peer.

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

use hermes_mobile::throttle::SourceKey;
use hermes_mobile::Peer;
use mio::net::TcpStream;
use mio::{Interest, Token};

use super::link_transports::PeerHome;
use super::{conn_id, conn_timer, Server, DRAIN_LINGER};
use crate::agent::io::PeerInput;
use crate::conn::slots::{self, Admission};
use crate::conn::{Discarded, Phase, Upgrade};
use crate::http::{self, Head, Route};
use crate::timer::{ConnTimer, TimerKey};

/// Whose failed hellos a connection's count with (L52): the peer's address, or, behind a
/// local proxy, the client address the proxy reported (a remote peer's own claim is not
/// taken).
pub(super) fn request_source(peer: SocketAddr, client: Option<std::net::IpAddr>) -> SourceKey {
    match (crate::conn::source_of(peer), client) {
        (None, Some(client)) => SourceKey::of(client),
        _ => SourceKey::of(peer.ip()),
    }
}

/// How long a new socket has to send its request head (L54).
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

impl Server {
    pub(super) fn accept_all(&mut self, now: Instant) {
        loop {
            let Some(listener) = &self.listener else { return };
            match listener.accept() {
                Ok((stream, peer)) => {
                    self.accept_failing = false;
                    self.on_accept(stream, peer, now)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::ConnectionAborted => {}
                Err(e) => {
                    // EMFILE and friends: the pending connection stays in the backlog; try again
                    // shortly rather than spin or die.
                    if !self.accept_failing {
                        log::warn!("accept failed: {e}; retrying every 100 ms until it works");
                    }
                    self.accept_failing = true;
                    self.wheel.arm(now + Duration::from_millis(100), TimerKey::AcceptRetry);
                    return;
                }
            }
        }
    }

    pub(super) fn on_accept(&mut self, mut stream: TcpStream, peer: SocketAddr, now: Instant) {
        let slots = self.conns.slots();
        match slots::admit(&slots, crate::conn::source_of(peer), self.config.max_connections) {
            Admission::Admit => {}
            Admission::AdmitDropping(old) => {
                // L54: unauthenticated sockets make room for each other, never for nobody.
                self.evictions += 1;
                if self.evictions.is_power_of_two() {
                    log::warn!(
                        "unauthenticated sockets are at their share of MOBILE_MAX_CONNECTIONS: dropping the oldest ({} so far)",
                        self.evictions
                    );
                }
                self.kill(
                    old,
                    "dropped for a newer socket: unauthenticated sockets' share is full (L54)",
                );
            }
            Admission::Refuse => {
                log::warn!(
                    "refused {peer}: {} authenticated connections open (MOBILE_MAX_CONNECTIONS)",
                    slots.len()
                );
                let _ = stream.write(&http::response(
                    "503 Service Unavailable",
                    "text/plain",
                    "too many connections\n",
                    "",
                ));
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
        }
        let _ = stream.set_nodelay(true);
        let registry = self.poll.registry();
        let register = |stream: &mut TcpStream, key| {
            registry.register(stream, Token(key), Interest::READABLE | Interest::WRITABLE)
        };
        let (key, generation) = match self.conns.insert(stream, peer, now, register) {
            Ok(added) => added,
            Err(e) => return log::warn!("cannot register {peer}: {e}"),
        };
        // L54: the request head comes soon (a browser sends it at once), so an idle socket
        // is not kept for the whole hello timeout.
        self.wheel.insert(
            now + self.config.core.hello_timeout.min(HEAD_TIMEOUT),
            conn_timer(key, generation, ConnTimer::Head),
        );
        // decisions H7: the request head and the upgrade are inside the hello timeout.
        self.wheel.insert(
            now + self.config.core.hello_timeout,
            conn_timer(key, generation, ConnTimer::Hello),
        );
        log::debug!("conn {key}: accepted from {peer}");
        // Edge-triggered: the request may already be waiting.
        self.on_io(key, now);
    }

    pub(super) fn on_io(&mut self, key: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        match conn.phase() {
            Phase::Http { .. } => self.on_http(key, now),
            Phase::Respond { .. } => self.on_respond(key, now),
            // Its answer waits for the file worker; what the peer sends meanwhile waits too.
            Phase::Answer(_) => {}
            Phase::Ws(..) => self.on_ws(key, now),
            Phase::Drain(_) => match conn.drain() {
                Discarded::Closed => self.kill(key, "http response sent"),
                Discarded::Budget => self.conns.turn().read_again(key),
                Discarded::All => {}
            },
            Phase::Dead(_) => {}
        }
    }

    pub(super) fn on_http(&mut self, key: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        // A client may send its whole request and then shut its side (half-close): what it
        // sent is still answered.
        let ended = match conn.read_head() {
            Ok(open) => !open,
            Err(e) => return self.kill(key, &format!("read failed: {e}")),
        };
        let incomplete = "closed before the request was complete";
        let Phase::Http { head, .. } = conn.phase() else { return };
        let Head::Complete { route, len, path } = http::parse(head) else {
            if ended {
                self.kill(key, incomplete);
            }
            return;
        };
        if ended && matches!(route, Route::Upgrade { .. }) {
            return self.kill(key, incomplete);
        }
        let leftover = head.get(len..).unwrap_or_default().to_vec();
        let (out, upgrade) = match route {
            Route::Upgrade { .. } if self.shutting_down => (
                http::response("503 Service Unavailable", "text/plain", "shutting down\n", ""),
                None,
            ),
            Route::Upgrade { agent: true, .. } if !self.agent_route => (
                http::response(
                    "404 Not Found",
                    "text/plain; charset=utf-8",
                    "no /agent here (MOBILE_AGENT=link with MOBILE_AGENT_TOKEN opens it)\n",
                    "",
                ),
                None,
            ),
            Route::Upgrade {
                response,
                forwarded,
                client,
                agent,
            } => (
                response,
                Some(Upgrade {
                    leftover,
                    forwarded,
                    client,
                    agent,
                }),
            ),
            Route::Health => (self.health_response(), None),
            Route::File(req) => match self.ask_file(key, req, now) {
                Some(out) => (out, None),
                None => return, // answered once the file worker has read it
            },
            Route::CardAnswer(_) | Route::Pair(_) => {
                let answer = match route {
                    Route::CardAnswer(req) => self.ask_card_answer(key, req, len, now),
                    Route::Pair(req) => self.ask_pair(key, req, len, now),
                    _ => None,
                };
                match answer {
                    Some(out) => (out, None),
                    // Its body is still coming (it never will once the client shut its side),
                    // or its answer waits for a commit.
                    None => {
                        if ended
                            && self
                                .conns
                                .get(key)
                                .is_some_and(|c| matches!(c.phase(), Phase::Http { .. }))
                        {
                            self.kill(key, incomplete);
                        }
                        return;
                    }
                }
            }
            Route::Asset(req) => match &self.config.web {
                Some(web) => (web.respond(&req), None),
                None => (
                    http::response("404 Not Found", "text/plain; charset=utf-8", "not found\n", ""),
                    None,
                ),
            },
            Route::Reply(bytes) => (bytes, None),
        };
        let status = String::from_utf8_lossy(&out[..out.len().min(12)]).into_owned();
        log::debug!(
            "conn {key}: GET {path:?} -> {}",
            status.trim_start_matches("HTTP/1.1 ").trim_end()
        );
        let Some(conn) = self.conns.get_mut(key) else { return };
        conn.respond(out, upgrade);
        self.on_respond(key, now);
    }

    /// `/healthz`: what the core and the loop hold, for an operator watching memory.
    fn health_response(&self) -> Vec<u8> {
        let stats = self.wiring.core().stats();
        let body = serde_json::json!({
            "status": "ok",
            "version": env!("CARGO_PKG_VERSION"),
            "connections": stats.connections,
            "devices_online": stats.devices_online,
            // Every socket the server holds, this request's own included: closing
            // ones and plain HTTP ones too, which `connections` does not count.
            "sockets": self.conns.len(),
            // What the core holds, for an operator watching memory (L32, L36).
            "devices_known": stats.devices_known,
            "held_bytes": stats.held_bytes,
            "upload_bytes": stats.upload_bytes,
            "open_prompts": stats.open_prompts,
            "dedup_entries": stats.dedup_entries,
            "timers": stats.timers,
            "queued_bytes": self.conns.queued_bytes(),
            // L51: what messages read in part and unfinished uploads hold.
            "partial_bytes": self.conns.partial_bytes(),
            "upload_held": stats.upload_held,
            "agent": self.wiring.agent().health(),
            // Push (issue 18): how many subscriptions, and the last push that failed.
            "push_subscriptions": self.wiring.core().push_subscription_count(),
            "push_last_error": self.wiring.push().and_then(|p| p.last_error()),
            // The journal (issue 24, L62): "ok", or why the gateway runs without one.
            "journal": self.journal_status,
            "journal_bytes": self.journal_bytes(),
            // Issue 25: `POST /card-answer`s refused (a wrong token, option or device).
            "card_answer_refusals": self.wiring.card_answer_refusals(),
        })
        .to_string();
        http::response("200 OK", "application/json", &body, "Cache-Control: no-store\r\n")
    }

    pub(super) fn on_respond(&mut self, key: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        match conn.write_response() {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => return self.kill(key, &format!("write failed: {e}")),
        }
        let Some(Upgrade {
            leftover,
            forwarded,
            client,
            agent,
        }) = conn.take_upgrade()
        else {
            conn.start_drain();
            let generation = conn.generation;
            self.wheel
                .insert(now + DRAIN_LINGER, conn_timer(key, generation, ConnTimer::Drain));
            return self.on_io(key, now);
        };
        self.conns.upgrade(key, leftover, client, now);
        let Some(conn) = self.conns.get_mut(key) else { return };
        let (generation, peer, accepted_at) = (conn.generation, conn.peer, conn.accepted_at);
        if agent {
            // An agent over the network: the link, not the core, speaks with it; its
            // `hello` must carry MOBILE_AGENT_TOKEN (checked by the link).
            let link_peer = self.link_transports.new_peer(PeerHome::Ws(key, generation));
            self.conns.make_agent_peer(key, link_peer);
            log::info!("conn {key}: {peer} opened /agent");
            let opened = PeerInput::Opened {
                peer: link_peer,
                needs_token: true,
                source: request_source(peer, client),
            };
            self.wiring.handle_peer(self.time(now), opened);
            self.wheel.insert(
                now + self.config.keepalive,
                conn_timer(key, generation, ConnTimer::KeepAlive),
            );
            return self.on_ws(key, now);
        }
        conn.open_phone();
        let loopback = crate::conn::source_of(peer).is_none();
        let source = request_source(peer, client);
        log::info!(
            "conn {key}: {peer} opened a WebSocket{}",
            if forwarded { " (via a proxy)" } else { "" }
        );
        // decisions H7: the hello timeout counts from accept, not from now.
        let accepted = self.time(accepted_at);
        self.wiring.handle_open(
            accepted,
            conn_id(key, generation),
            Peer {
                loopback,
                forwarded,
                source,
            },
        );
        self.wheel.insert(
            now + self.config.keepalive,
            conn_timer(key, generation, ConnTimer::KeepAlive),
        );
        // A client may have sent its first frames right behind the upgrade request.
        self.on_ws(key, now);
    }
}
