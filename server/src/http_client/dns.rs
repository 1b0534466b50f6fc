//! Name resolution off the event loop (issue 11).
//!
//! `getaddrinfo` blocks for as long as the resolver takes (seconds on a bad network), so
//! it runs on a helper thread that wakes the loop through the shared `mio::Waker` when an
//! answer is ready. Answers are kept for a minute (the system resolver gives no TTL);
//! failures are not kept, so a name that starts resolving works on the next message.
//! IP literals never reach the thread.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::Waker;

/// How long an answer is used.
pub const CACHE_FOR: Duration = Duration::from_secs(60);
/// Names kept, and names asked for at once: push endpoints are chosen by phones (within
/// the allow-list, whose `*.domain` entries allow many names), so neither may grow
/// without bound nor starve the agent's own lookups behind a queue of slow ones.
const MAX_CACHED: usize = 256;
const MAX_PENDING: usize = 32;

type Answer = (String, u16, Result<Vec<SocketAddr>, String>);

pub struct Resolver {
    jobs: Option<Sender<(String, u16)>>,
    answers: Receiver<Answer>,
    thread: Option<JoinHandle<()>>,
    cache: HashMap<(String, u16), (Vec<SocketAddr>, Instant)>,
    /// Names asked for and not answered yet (one lookup per name at a time).
    pending: Vec<(String, u16)>,
}

/// What [`Resolver::lookup`] knows now.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Ready(Vec<SocketAddr>),
    /// Asked; the answer comes through [`Resolver::poll_answer`] after a wake.
    Pending,
}

impl Resolver {
    pub fn start(waker: Arc<Waker>) -> io::Result<Resolver> {
        let (jobs, job_rx) = channel::<(String, u16)>();
        let (answer_tx, answers) = channel::<Answer>();
        let delay = test_delay();
        let thread = std::thread::Builder::new().name("dns".into()).spawn(move || {
            for (host, port) in job_rx {
                if let Some(delay) = delay {
                    std::thread::sleep(delay);
                }
                let result = (host.as_str(), port)
                    .to_socket_addrs()
                    .map(Iterator::collect::<Vec<_>>)
                    .map_err(|e| e.to_string())
                    .and_then(|addrs| {
                        if addrs.is_empty() {
                            Err("no addresses".to_owned())
                        } else {
                            Ok(addrs)
                        }
                    });
                if answer_tx.send((host, port, result)).is_err() {
                    return;
                }
                let _ = waker.wake();
            }
        })?;
        Ok(Resolver {
            jobs: Some(jobs),
            answers,
            thread: Some(thread),
            cache: HashMap::new(),
            pending: Vec::new(),
        })
    }

    /// The addresses of `host`, at once when it is an IP address or cached.
    pub fn lookup(&mut self, host: &str, port: u16, now: Instant) -> Lookup {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Lookup::Ready(vec![SocketAddr::new(ip, port)]);
        }
        let key = (host.to_owned(), port);
        if let Some((addrs, at)) = self.cache.get(&key) {
            if now.saturating_duration_since(*at) < CACHE_FOR {
                return Lookup::Ready(addrs.clone());
            }
        }
        if !self.pending.contains(&key) {
            if self.pending.len() >= MAX_PENDING {
                log::warn!(
                    "{MAX_PENDING} names are being resolved; {:?} is not looked up now",
                    key.0
                );
                return Lookup::Ready(Vec::new());
            }
            if let Some(jobs) = &self.jobs {
                if jobs.send(key.clone()).is_err() {
                    log::error!("the DNS helper thread has stopped");
                }
            }
            self.pending.push(key);
        }
        Lookup::Pending
    }

    /// An answer that arrived: `(host, port, addresses or why not)`.
    pub fn poll_answer(&mut self, now: Instant) -> Option<Answer> {
        let (host, port, result) = self.answers.try_recv().ok()?;
        self.pending.retain(|(h, p)| !(h == &host && *p == port));
        if let Ok(addrs) = &result {
            if self.cache.len() >= MAX_CACHED {
                self.cache
                    .retain(|_, (_, at)| now.saturating_duration_since(*at) < CACHE_FOR);
                if self.cache.len() >= MAX_CACHED {
                    self.cache.clear();
                }
            }
            self.cache.insert((host.clone(), port), (addrs.clone(), now));
        }
        Some((host, port, result))
    }
}

/// A resolver that takes its time, for the test that shows the loop does not wait for it
/// (`MOBILE_TEST_DNS_DELAY_MS`). Debug builds only: a release binary has no such knob.
#[cfg(debug_assertions)]
fn test_delay() -> Option<Duration> {
    let ms = std::env::var("MOBILE_TEST_DNS_DELAY_MS").ok()?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ms.min(60_000)))
}

#[cfg(not(debug_assertions))]
fn test_delay() -> Option<Duration> {
    None
}

impl Drop for Resolver {
    /// The thread may be inside a slow lookup: it is not waited for.
    fn drop(&mut self) {
        self.jobs.take();
        drop(self.thread.take());
    }
}
