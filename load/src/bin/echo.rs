//! The baseline: a bare single-threaded mio + tungstenite WebSocket echo server, configured
//! like the gateway (2 KiB read buffer, eager writes). The gateway's CPU per protocol turn is
//! measured against this server's CPU per round trip, in the same run.
//!
//! `hermes-mobile-echo [PORT]` (default 8790, 0 = any); listens on 127.0.0.1 only.

use std::io::{self, Read};
use std::net::SocketAddr;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use tungstenite::handshake::derive_accept_key;
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

const LISTENER: Token = Token(usize::MAX);

enum Conn {
    Head(TcpStream, Vec<u8>),
    Ws(Box<WebSocket<TcpStream>>),
}

fn config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(2048).write_buffer_size(0)
}

fn main() -> io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(8790);
    let mut listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
    eprintln!("echo listening on ws://{}/ws", listener.local_addr()?);
    let mut poll = Poll::new()?;
    poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut conns: Slab<Conn> = Slab::new();
    let mut events = Events::with_capacity(256);
    loop {
        poll.poll(&mut events, None)?;
        for ev in events.iter() {
            if ev.token() == LISTENER {
                while let Ok((mut s, _)) = listener.accept() {
                    let _ = s.set_nodelay(true);
                    let e = conns.vacant_entry();
                    poll.registry()
                        .register(&mut s, Token(e.key()), Interest::READABLE | Interest::WRITABLE)?;
                    e.insert(Conn::Head(s, Vec::new()));
                }
                continue;
            }
            let key = ev.token().0;
            if !step(&mut conns, key) {
                if let Some(c) = conns.try_remove(key) {
                    let mut s = match c {
                        Conn::Head(s, _) => s,
                        Conn::Ws(ws) => ws.into_inner(),
                    };
                    let _ = poll.registry().deregister(&mut s);
                }
            }
        }
    }
}

/// Handles readiness for one connection; `false` when it is done.
fn step(conns: &mut Slab<Conn>, key: usize) -> bool {
    let Some(conn) = conns.get_mut(key) else { return true };
    if let Conn::Head(stream, head) = conn {
        let mut buf = [0u8; 2048];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(len)) = req.parse(head) else {
            return head.len() < 8192;
        };
        let Some(key_header) = req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("sec-websocket-key"))
        else {
            return false;
        };
        let accept = derive_accept_key(key_header.value);
        let response = format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n");
        // The 101 is tiny; a loopback socket takes it whole.
        if io::Write::write_all(stream, response.as_bytes()).is_err() {
            return false;
        }
        let leftover = head[len..].to_vec();
        let Conn::Head(stream, _) = conns.remove(key) else {
            unreachable!("matched above")
        };
        let ws = WebSocket::from_partially_read(stream, leftover, Role::Server, Some(config()));
        // A slab hands back the slot just freed, so the mio token still matches.
        let again = conns.insert(Conn::Ws(Box::new(ws)));
        assert_eq!(again, key, "slab reuses the freed slot");
        return step(conns, key);
    }
    let Conn::Ws(ws) = conn else { return true };
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => match ws.write(Message::Text(t)) {
                Ok(()) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return false,
            },
            Ok(_) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => return false,
        }
    }
    match ws.flush() {
        Ok(()) => true,
        Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => true,
        Err(_) => false,
    }
}
