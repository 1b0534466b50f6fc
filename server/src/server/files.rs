//! The `/files/` route (L63): a file the media store keeps, for its own device's token.
//!
//! The credential is the core's to judge (the same check as a `hello` as that device, behind
//! the same throttle); the file is found and read by the file worker, never on the loop, and
//! the connection waits in `Phase::Answer` meanwhile. No path is ever built from the URL:
//! the key is 32 hex digits and the worker finds its file by listing the directory.

use std::time::{Duration, Instant};

use hermes_mobile::media::{self, FileRefusal};

use super::http_side::request_source;
use super::{conn_timer, Server};
use crate::conn::Phase;
use crate::fileio::{FetchError, Ticket};
use crate::http::{self, FileRequest};
use crate::timer::{ConnRef, ConnTimer};

/// Files being read or written out at once, over every connection: each holds up to 8 MiB
/// until its socket has taken it.
const MAX_FILE_ANSWERS: usize = 4;
/// How long a file's answer may take, from its request: 8 MiB to a phone on 1 Mbit/s takes
/// about a minute.
pub(super) const FILE_ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// The `/files/` answers under way.
#[derive(Debug, Default)]
pub(super) struct FileAnswers {
    /// Each read's ticket and the connection waiting for it (kept until it is written).
    under_way: Vec<(Ticket, ConnRef)>,
    next: Ticket,
}

impl FileAnswers {
    pub(super) fn has(&self, conn: ConnRef) -> bool {
        self.under_way.iter().any(|(_, c)| *c == conn)
    }
}

/// A plain answer of the route.
fn refusal(status: &str, extra: &str) -> Vec<u8> {
    let body = format!(
        "{}\n",
        status.split_once(' ').map_or(status, |(_, why)| why).to_lowercase()
    );
    http::response(status, "text/plain; charset=utf-8", &body, extra)
}

/// The file as its answer: its type guessed from its name (U6); only raster images are
/// shown inline, anything else is a download, and nothing in it may run (sandbox).
fn file_response(name: &str, data: &[u8]) -> Vec<u8> {
    let mime = hermes_mobile::mime::guess_mime(name);
    let inline = matches!(mime, "image/png" | "image/jpeg" | "image/gif" | "image/webp");
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {mime}\r\nContent-Length: {}\r\nCache-Control: private\r\n\
         X-Content-Type-Options: nosniff\r\nContent-Security-Policy: sandbox; default-src 'none'\r\n\
         Content-Disposition: {}\r\nConnection: close\r\n\r\n",
        data.len(),
        if inline { "inline" } else { "attachment" },
    );
    let mut out = Vec::with_capacity(head.len() + data.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(data);
    out
}

impl Server {
    /// A request of the route: its answer now, or `None` when the file worker reads the file
    /// first ([`Server::file_fetched`] answers).
    pub(super) fn ask_file(&mut self, key: usize, req: FileRequest, now: Instant) -> Option<Vec<u8>> {
        let conn = self.conns.get(key)?;
        let (peer, generation) = (conn.peer, conn.generation);
        let Some((device, file_key)) = media::parse_path(&req.path) else {
            return Some(refusal("404 Not Found", ""));
        };
        let token = req.token.as_deref().unwrap_or("");
        let source = request_source(peer, req.client);
        match self.wiring.authorize_file(self.time(now), source, token, &device) {
            Ok(()) => {}
            Err(FileRefusal::Unauthorized) => {
                return Some(refusal("401 Unauthorized", "WWW-Authenticate: Bearer\r\n"));
            }
            Err(FileRefusal::Forbidden) => return Some(refusal("403 Forbidden", "")),
            Err(FileRefusal::Blocked { retry_after_secs }) => {
                let retry = format!("Retry-After: {retry_after_secs}\r\n");
                return Some(refusal("429 Too Many Requests", &retry));
            }
        }
        if !self.wiring.core().file_kept(&device, &file_key) {
            return Some(refusal("404 Not Found", ""));
        }
        let conns = &self.conns;
        self.file_answers.under_way.retain(|(_, c)| {
            conns.get(c.key).is_some_and(|conn| {
                conn.generation == c.generation && matches!(conn.phase(), Phase::Answer(_) | Phase::Respond { .. })
            })
        });
        if self.file_answers.under_way.len() >= MAX_FILE_ANSWERS {
            return Some(refusal("503 Service Unavailable", "Retry-After: 1\r\n"));
        }
        self.file_answers.next += 1;
        let ticket = self.file_answers.next;
        self.file_answers.under_way.push((ticket, ConnRef { key, generation }));
        self.files.fetch(ticket, file_key);
        self.conns.get_mut(key)?.await_answer();
        let deadline = now + FILE_ANSWER_TIMEOUT;
        self.wheel
            .insert(deadline, conn_timer(key, generation, ConnTimer::FileAnswer));
        None
    }

    /// The file worker read a file for the route: the waiting connection gets it.
    pub(super) fn file_fetched(&mut self, ticket: Ticket, result: Result<(String, Vec<u8>), FetchError>, now: Instant) {
        let Some(&(_, conn)) = self.file_answers.under_way.iter().find(|(t, _)| *t == ticket) else {
            return;
        };
        let out = match result {
            Ok((name, data)) => file_response(&name, &data),
            Err(FetchError::NotFound) => refusal("404 Not Found", ""),
            Err(FetchError::Unreadable(why)) => {
                log::warn!("conn {}: a kept file could not be read: {why}", conn.key);
                refusal("500 Internal Server Error", "")
            }
        };
        let Some(c) = self.conns.live(conn.key, conn.generation) else {
            return;
        };
        if !matches!(c.phase(), Phase::Answer(_)) {
            return;
        }
        log::debug!(
            "conn {}: GET /files/… -> {}",
            conn.key,
            String::from_utf8_lossy(&out[9..12])
        );
        c.respond(out, None);
        self.on_respond(conn.key, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_raster_images_are_inline_and_nothing_runs() {
        let text = |out: Vec<u8>| String::from_utf8_lossy(&out).into_owned();
        let png = text(file_response("k-tel-1-cat.png", b"PNG"));
        assert!(png.starts_with("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 3\r\n"));
        assert!(png.contains("\r\nContent-Disposition: inline\r\n") && png.ends_with("\r\n\r\nPNG"));
        for name in ["k-a.svg", "k-a.html", "k-a.bin", "k-voice.ogg"] {
            let out = text(file_response(name, b""));
            assert!(out.contains("\r\nContent-Disposition: attachment\r\n"), "{name}");
            assert!(out.contains("\r\nX-Content-Type-Options: nosniff\r\n"), "{name}");
            assert!(out.contains("\r\nContent-Security-Policy: sandbox; default-src 'none'\r\n"));
            assert!(out.contains("\r\nCache-Control: private\r\n"));
        }
        assert!(text(refusal("401 Unauthorized", "WWW-Authenticate: Bearer\r\n")).ends_with("\r\n\r\nunauthorized\n"));
    }
}
