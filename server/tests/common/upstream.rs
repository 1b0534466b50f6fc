//! Scripted upstream HTTP servers for the HTTP agents' tests (issue 11): a loopback
//! listener whose every connection runs a script, and records the requests it read.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as read: the head and the body, as text.
#[derive(Debug, Clone)]
pub struct Request {
    pub head: String,
    pub body: String,
}

impl Request {
    pub fn path(&self) -> &str {
        self.head.split(' ').nth(1).unwrap_or("")
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

pub type Script = dyn Fn(usize, &Request, &mut dyn ReadWrite) + Send + Sync;

pub trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

pub struct Upstream {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<Request>>>,
}

impl Upstream {
    /// Serves plain HTTP; `script(n, request, socket)` answers the n-th request (from 0).
    pub fn start(script: impl Fn(usize, &Request, &mut dyn ReadWrite) + Send + Sync + 'static) -> Upstream {
        Upstream::start_with(None, Arc::new(script))
    }

    /// As `start`, over TLS with this server configuration.
    pub fn start_tls(
        config: Arc<rustls::ServerConfig>,
        script: impl Fn(usize, &Request, &mut dyn ReadWrite) + Send + Sync + 'static,
    ) -> Upstream {
        Upstream::start_with(Some(config), Arc::new(script))
    }

    fn start_with(tls: Option<Arc<rustls::ServerConfig>>, script: Arc<Script>) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (script, seen, tls) = (Arc::clone(&script), Arc::clone(&seen), tls.clone());
                std::thread::spawn(move || {
                    let _ = stream.set_nodelay(true);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                    match tls {
                        None => serve(stream, &*script, &seen),
                        Some(config) => {
                            let Ok(conn) = rustls::ServerConnection::new(config) else {
                                return;
                            };
                            serve(rustls::StreamOwned::new(conn, stream), &*script, &seen);
                        }
                    }
                });
            }
        });
        Upstream { port, requests }
    }

    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    pub fn request(&self, n: usize) -> Request {
        self.requests.lock().unwrap()[n].clone()
    }

    pub fn url(&self) -> String {
        format!("openai:http://127.0.0.1:{}/v1", self.port)
    }
}

fn serve<S: Read + Write>(mut stream: S, script: &Script, seen: &Mutex<Vec<Request>>) {
    let Some(request) = read_request(&mut stream) else {
        return;
    };
    let n = {
        let mut seen = seen.lock().unwrap();
        seen.push(request.clone());
        seen.len() - 1
    };
    script(n, &request, &mut stream);
    let _ = stream.flush();
}

fn read_request<S: Read>(stream: &mut S) -> Option<Request> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut byte).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = stream.read(&mut byte).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + len]).into_owned();
    Some(Request { head, body })
}

/// The head of a close-delimited event stream.
pub const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

/// One chat-completions chunk as an SSE event.
pub fn delta(text: &str) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"choices":[{"index":0,"delta":{"content":text}}]})
    )
}

pub const DONE: &str =
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

/// A whole streamed answer of `parts`.
pub fn answer(parts: &[&str]) -> String {
    let mut s = String::from(SSE_HEAD);
    for p in parts {
        s.push_str(&delta(p));
    }
    s.push_str(DONE);
    s
}

pub fn write(s: &mut dyn ReadWrite, text: &str) {
    let _ = s.write_all(text.as_bytes());
    let _ = s.flush();
}

/// A JSON answer with this status.
pub fn json_status(status: &str, extra_headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra_headers}Connection: close\r\n\r\n{body}",
        body.len()
    )
}
