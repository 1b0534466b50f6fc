//! A blocking Protocol v1 client for the load tool.

use std::io;
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

/// Only loopback targets: 127.0.0.0/8, ::1, localhost.
pub fn is_loopback_url(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("ws://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => authority,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

const READ_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Client {
    ws: WebSocket<TcpStream>,
}

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

impl Client {
    pub fn connect(url: &str) -> io::Result<Client> {
        let authority = url.trim_start_matches("ws://").split('/').next().unwrap_or("");
        let addr = authority.to_socket_addrs()?.next().ok_or_else(|| err("no address"))?;
        if !addr.ip().is_loopback() {
            return Err(err("not loopback"));
        }
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        let (ws, _) = tungstenite::client(url, stream).map_err(err)?;
        Ok(Client { ws })
    }

    pub fn send(&mut self, v: &Value) -> io::Result<()> {
        self.ws.send(Message::Text(v.to_string().into())).map_err(err)
    }

    pub fn recv(&mut self) -> io::Result<Value> {
        loop {
            match self.ws.read().map_err(err)? {
                Message::Text(t) => return serde_json::from_str(t.as_str()).map_err(err),
                Message::Close(_) => return Err(err("closed")),
                _ => {}
            }
        }
    }

    /// A frame if one comes within `wait` (a ping or pong counts as none), so one thread can
    /// watch many connections. A read cut by the timeout resumes where it stopped.
    pub fn recv_within(&mut self, wait: Duration) -> io::Result<Option<Value>> {
        self.ws.get_mut().set_read_timeout(Some(wait))?;
        let read = self.ws.read();
        self.ws.get_mut().set_read_timeout(Some(READ_TIMEOUT))?;
        match read {
            Ok(Message::Text(t)) => serde_json::from_str(t.as_str()).map(Some).map_err(err),
            Ok(Message::Close(_)) => Err(err("closed")),
            Ok(_) => Ok(None),
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
            {
                Ok(None)
            }
            Err(e) => Err(err(e)),
        }
    }

    /// The socket under the WebSocket, for writing frames by hand.
    pub fn into_stream(self) -> TcpStream {
        self.ws.into_inner()
    }

    pub fn hello(&mut self, token: &str, device: &str) -> io::Result<Value> {
        self.send(&json!({"t":"hello","token":token,"device":{"id":device}}))?;
        let ready = self.recv()?;
        if ready["t"] != "ready" {
            return Err(err(format!("no ready: {ready}")));
        }
        Ok(ready)
    }

    /// One protocol turn: a text in, frames until the final message frame.
    pub fn turn(&mut self, id: &str, text: &str) -> io::Result<()> {
        self.send(&json!({"t":"text","id":id,"text":text}))?;
        self.until_final_message()
    }

    /// Reads until the agent's reply is complete; an `error` frame ends the wait.
    fn until_final_message(&mut self) -> io::Result<()> {
        loop {
            let f = self.recv()?;
            if f["t"] == "message" && f["final"] == true {
                return Ok(());
            }
            if f["t"] == "error" {
                return Err(err(f));
            }
        }
    }

    /// A clean close: the close handshake, then the socket goes.
    pub fn close(mut self) {
        let _ = self.ws.close(None);
        while self.ws.read().is_ok() {}
    }

    /// One bare echo round trip.
    pub fn echo(&mut self, text: &str) -> io::Result<()> {
        self.ws.send(Message::Text(text.into())).map_err(err)?;
        loop {
            if let Message::Text(_) = self.ws.read().map_err(err)? {
                return Ok(());
            }
        }
    }

    /// One multipart upload, until the agent's reply message.
    pub fn upload(&mut self, id: &str, data: &[u8], chunk: usize) -> io::Result<()> {
        let parts = data.len().div_ceil(chunk).max(1);
        for (part, piece) in data.chunks(chunk).enumerate() {
            let b64 = base64::engine::general_purpose::STANDARD.encode(piece);
            self.send(&json!({"t":"media","id":id,"kind":"document","filename":"load.bin","part":part,"parts":parts,"data":b64}))?;
        }
        self.until_final_message()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_urls_are_accepted() {
        for ok in [
            "ws://127.0.0.1:8787/ws",
            "ws://localhost:1/ws",
            "ws://[::1]:8787/ws",
            "ws://127.9.9.9/ws",
        ] {
            assert!(is_loopback_url(ok), "{ok}");
        }
        for bad in [
            "ws://10.0.0.1:8787/ws",
            "ws://192.168.1.2/ws",
            "ws://example.com/ws",
            "wss://127.0.0.1/ws",
            "http://127.0.0.1/",
        ] {
            assert!(!is_loopback_url(bad), "{bad}");
        }
    }
}
