//! The two memory attacks of issue 23 (finding 2), for a peer who holds the app token and
//! wants the gateway to hold more than `MOBILE_MEMORY_BUDGET`:
//!
//! - `minted-uploads`: device ids are free to mint, and each may hold 8 MiB of unfinished
//!   uploads (U2), so many fresh ids each fill their 8 uploads to just under that and keep
//!   them alive past the 120 s stall (U5) with a tiny new part now and then.
//! - `half-messages`: connections that send the start of a 15 MiB WebSocket message (one
//!   frame, or fragments) and never finish it, so the gateway holds the part it has read.
//!
//! Each counts what it did, the `too_big` refusals it got and the connections the gateway
//! closed; a closed connection is replaced by a new one at a bounded rate, so the pressure
//! stays on. Bounded like the rest of `abuse`: fixed threads and sockets, loopback only
//! (`Client` refuses anything else), and both stop with the run.

use std::io::{self, Cursor, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use tungstenite::protocol::frame::coding::{Control, Data, OpCode};
use tungstenite::protocol::frame::FrameHeader;

use super::{pause, Shared};
use crate::client::Client;

/// Fresh device ids held at once by `minted-uploads` (24 held 192 MiB in the issue), over
/// `UPLOAD_THREADS` threads.
pub const UPLOAD_DEVICES: usize = 32;
pub const UPLOAD_THREADS: usize = 4;
/// Unfinished uploads per device: the most a device may have open (U2).
const SLOTS: usize = 8;
/// What each upload announces: the most parts a file may have, so it never completes.
const PARTS: usize = 2048;
/// Each upload's first parts: 8 × 4 × 252 KiB = 7.9 MiB per device, just under its 8 MiB.
const FILL_PARTS: usize = 4;
const PART_BYTES: usize = 252 * 1024;
/// A new 3-byte part this often keeps an upload from stalling out (U5: 120 s).
const UPLOAD_KEEP_ALIVE: Duration = Duration::from_secs(30);
/// A refused upload is tried again (with a new id) after this long.
const RETRY_REFUSED: Duration = Duration::from_secs(10);
/// One round over a thread's devices: at most one part per upload, and at most
/// `SLOTS` replacement devices, per round.
const ROUND: Duration = Duration::from_millis(500);

/// Connections held at once by `half-messages` (8 held 120 MiB in the issue).
pub const HALF_SOCKETS: usize = 16;
/// What the one frame announces; fragments add up to at most the same. Under the 16 MiB
/// message limit, so the gateway accepts the header and reads on.
const ANNOUNCED: usize = 15 * 1024 * 1024;
/// How much of it is sent; the rest never comes.
const HALF_FILL: usize = 12 * 1024 * 1024;
/// Payload written in blocks (and fragments) of this size.
const BLOCK: usize = 256 * 1024;
/// Something this often, so the connection does not look dead (K2 closes one silent for
/// 90 s): between fragments a pong, which the gateway hears; inside the one frame only four
/// more bytes, which it does not (a frame is heard when whole), so those connections are
/// closed at K2's deadline and replaced.
const TRICKLE: Duration = Duration::from_secs(20);
/// A connection the gateway closed is replaced at most this often.
const REOPEN_EVERY: Duration = Duration::from_millis(250);
/// Client frames are masked (RFC 6455 5.3); the key may as well be fixed.
const MASK: [u8; 4] = [0x37, 0x5a, 0x11, 0xc4];

/// What each attack did, for the report.
#[derive(Default)]
pub struct Tallies {
    pub minted_uploads: Tally,
    pub half_messages: Tally,
}

/// What one attack did.
#[derive(Default)]
pub struct Tally {
    ops: AtomicU64,
    refused: AtomicU64,
    dropped: AtomicU64,
    bytes: AtomicU64,
    /// The first refusal's message, to show which rule refused.
    sample: Mutex<Option<String>>,
}

impl Tally {
    fn refusal(&self, f: &Value) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let mut sample = self.sample.lock().unwrap_or_else(|e| e.into_inner());
        sample.get_or_insert_with(|| f["message"].as_str().unwrap_or("").to_owned());
    }

    /// One line: `ops` names what an operation is.
    pub fn report(&self, name: &str, ops: &str) -> String {
        let sample = self.sample.lock().unwrap_or_else(|e| e.into_inner()).clone();
        format!(
            "abuse: {name}: {} {ops} ({:.1} MiB sent), {} refused too_big{}, {} connections closed by the server",
            self.ops.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed) as f64 / (1024.0 * 1024.0),
            self.refused.load(Ordering::Relaxed),
            sample.map(|m| format!(" (first: {m:?})")).unwrap_or_default(),
            self.dropped.load(Ordering::Relaxed),
        )
    }
}

/// One unfinished upload of a minted device.
enum Slot {
    /// Sending its first `FILL_PARTS` parts, one a round (a refusal is seen before the next).
    Filling { id: String, next: usize },
    /// Full: a tiny new part every `UPLOAD_KEEP_ALIVE`.
    Holding { id: String, next: usize, sent: Instant },
    /// Refused `too_big` (its upload is gone, U3); a new one replaces it after `RETRY_REFUSED`.
    Refused { at: Instant },
}

impl Slot {
    fn id(&self) -> Option<&str> {
        match self {
            Slot::Filling { id, .. } | Slot::Holding { id, .. } => Some(id),
            Slot::Refused { .. } => None,
        }
    }
}

struct Device {
    c: Client,
    slots: Vec<Slot>,
}

/// Shared by every part frame: 252 KiB of base64, and 3 bytes for the keep-alives.
struct Payloads {
    big: String,
    tiny: String,
}

impl Device {
    /// One round: at most one frame per upload, then whatever the gateway answered.
    fn round(&mut self, s: &Shared, p: &Payloads, new_id: &mut impl FnMut() -> String) -> io::Result<()> {
        let tally = &s.memory.minted_uploads;
        let now = Instant::now();
        for slot in &mut self.slots {
            if let Slot::Refused { at } = slot {
                if now.duration_since(*at) < RETRY_REFUSED {
                    continue;
                }
                *slot = Slot::Filling { id: new_id(), next: 0 };
            }
            let (id, part, data) = match slot {
                Slot::Filling { id, next } => (id.clone(), *next, &p.big),
                Slot::Holding { id, next, sent } if now.duration_since(*sent) >= UPLOAD_KEEP_ALIVE => {
                    (id.clone(), *next, &p.tiny)
                }
                _ => continue,
            };
            self.c.send(
                &json!({"t":"media","id":id,"kind":"document","mime":"application/octet-stream",
                "filename":"x.bin","part":part,"parts":PARTS,"data":data}),
            )?;
            tally.ops.fetch_add(1, Ordering::Relaxed);
            s.ops.fetch_add(1, Ordering::Relaxed);
            tally.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            // Past PARTS the upload would be refused as a bad frame: stop keeping it alive.
            let next = (part + 1).min(PARTS - 1);
            *slot = if part + 1 < FILL_PARTS {
                Slot::Filling { id, next }
            } else {
                Slot::Holding { id, next, sent: now }
            };
        }
        while let Some(f) = self.c.recv_within(Duration::from_millis(1))? {
            if f["t"] == "error" && f["code"] == "too_big" {
                tally.refusal(&f);
                if let Some(slot) = self.slots.iter_mut().find(|x| x.id().is_some_and(|id| f["id"] == id)) {
                    *slot = Slot::Refused { at: Instant::now() };
                }
            }
            if f["t"] == "error" && f["fatal"] == true {
                return Err(io::Error::other(f.to_string()));
            }
        }
        Ok(())
    }
}

/// `UPLOAD_DEVICES / UPLOAD_THREADS` fresh device ids, each holding 8 unfinished uploads.
pub fn minted_uploads(s: &Shared, t: usize) {
    let tally = &s.memory.minted_uploads;
    let b64 = base64::engine::general_purpose::STANDARD;
    let p = Payloads {
        big: b64.encode(vec![7u8; PART_BYTES]),
        tiny: b64.encode([7u8; 3]),
    };
    let run = std::process::id();
    let (mut devices_made, mut uploads_made) = (0u64, 0u64);
    let mut new_id = || {
        uploads_made += 1;
        format!("mu-{run}-{t}-{uploads_made}")
    };
    let mut devices: Vec<Device> = Vec::new();
    while s.running() {
        // Fill up to this thread's share; replacements at most SLOTS a round.
        for _ in 0..SLOTS {
            if devices.len() >= UPLOAD_DEVICES / UPLOAD_THREADS {
                break;
            }
            devices_made += 1;
            let Some(c) = s.hello(&format!("mint-{run}-{t}-{devices_made}")) else {
                break;
            };
            let slots = (0..SLOTS).map(|_| Slot::Filling { id: new_id(), next: 0 }).collect();
            devices.push(Device { c, slots });
        }
        devices.retain_mut(|d| {
            let alive = d.round(s, &p, &mut new_id).is_ok();
            if !alive {
                tally.dropped.fetch_add(1, Ordering::Relaxed);
            }
            alive
        });
        pause(ROUND.as_millis() as u64);
    }
}

/// The header of a client frame of `len` payload bytes.
fn frame_header(opcode: OpCode, is_final: bool, len: usize) -> Vec<u8> {
    let h = FrameHeader {
        is_final,
        opcode,
        mask: Some(MASK),
        ..FrameHeader::default()
    };
    let mut out = Vec::with_capacity(14);
    h.format(len as u64, &mut out).expect("writing to a Vec cannot fail");
    out
}

/// How a half-sent message is cut: alternately, so both of the gateway's paths are held.
#[derive(Clone, Copy)]
enum Shape {
    /// One frame announcing `ANNOUNCED` bytes: the gateway reserves and fills its buffer.
    OneFrame,
    /// Frames of `BLOCK` bytes, none final: the gateway gathers them into one message.
    Fragments,
}

/// One connection holding the start of a message it never finishes.
struct HalfMessage {
    stream: TcpStream,
    shape: Shape,
    /// Bytes to write, and how many of them are written.
    out: Vec<u8>,
    written: usize,
    /// Payload bytes queued in all, and when the last were.
    sent: usize,
    last: Instant,
    /// What the gateway sent, until whole frames can be read from it.
    input: Vec<u8>,
}

/// Why a half-sent message's connection is gone.
enum Gone {
    ClosedByServer,
    /// It sent more than frames, or frames far larger than a few small ones: given up.
    Unreadable,
}

impl HalfMessage {
    /// The next bytes to write, or `false` when nothing is due.
    fn refill(&mut self, masked: &[u8]) -> bool {
        let filling = self.sent < HALF_FILL;
        if !filling && (self.last.elapsed() < TRICKLE || self.sent + 4 > ANNOUNCED) {
            return false;
        }
        self.out.clear();
        self.written = 0;
        self.last = Instant::now();
        let text = OpCode::Data(Data::Text);
        let len = match self.shape {
            Shape::OneFrame if self.sent == 0 => {
                self.out.extend(frame_header(text, true, ANNOUNCED));
                BLOCK
            }
            Shape::OneFrame if filling => BLOCK,
            Shape::OneFrame => 4,
            Shape::Fragments if filling => {
                let op = if self.sent == 0 {
                    text
                } else {
                    OpCode::Data(Data::Continue)
                };
                self.out.extend(frame_header(op, false, BLOCK));
                BLOCK
            }
            Shape::Fragments => {
                // Control frames may come between a message's fragments (RFC 6455 5.4).
                self.out.extend(frame_header(OpCode::Control(Control::Pong), true, 0));
                return true;
            }
        };
        // Every payload offset here is a multiple of 4, so the masked bytes are the same.
        self.out.extend_from_slice(&masked[..len]);
        self.sent += len;
        true
    }

    /// Writes what the socket takes and reads what came back, without blocking.
    fn pump(&mut self, masked: &[u8], tally: &Tally) -> Result<(), Gone> {
        loop {
            if self.written == self.out.len() && !self.refill(masked) {
                break;
            }
            match self.stream.write(&self.out[self.written..]) {
                Ok(0) => return Err(Gone::ClosedByServer),
                Ok(n) => {
                    self.written += n;
                    tally.bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return Err(Gone::ClosedByServer),
            }
        }
        let mut buf = [0u8; 4096];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(Gone::ClosedByServer),
                Ok(n) => self.input.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return Err(Gone::ClosedByServer),
            }
        }
        self.read_frames(tally)
    }

    /// The gateway's frames (unmasked): a close or a fatal error means it dropped us.
    fn read_frames(&mut self, tally: &Tally) -> Result<(), Gone> {
        loop {
            let mut cursor = Cursor::new(&self.input);
            let Ok(Some((header, len))) = FrameHeader::parse(&mut cursor) else {
                break;
            };
            let start = cursor.position() as usize;
            let Some(end) = start.checked_add(len as usize).filter(|&end| end <= self.input.len()) else {
                break;
            };
            let payload = &self.input[start..end];
            match header.opcode {
                OpCode::Control(Control::Close) => return Err(Gone::ClosedByServer),
                OpCode::Data(Data::Text) => {
                    let f: Value = serde_json::from_slice(payload).unwrap_or_default();
                    if f["code"] == "too_big" {
                        tally.refusal(&f);
                    }
                }
                _ => {}
            }
            self.input.drain(..end);
        }
        // The gateway sends these connections a few small frames; more is not a frame.
        if self.input.len() > 1024 * 1024 {
            return Err(Gone::Unreadable);
        }
        Ok(())
    }
}

/// `HALF_SOCKETS` connections, each holding the first 12 MiB of a 15 MiB message.
pub fn half_messages(s: &Shared) {
    let tally = &s.memory.half_messages;
    let masked: Vec<u8> = (0..BLOCK).map(|i| b'a' ^ MASK[i % 4]).collect();
    let run = std::process::id();
    let mut held: Vec<HalfMessage> = Vec::new();
    let mut opened = 0usize;
    let mut last_open = Instant::now();
    while s.running() {
        let due = opened < HALF_SOCKETS || last_open.elapsed() >= REOPEN_EVERY;
        if held.len() < HALF_SOCKETS && due {
            last_open = Instant::now();
            opened += 1;
            let shape = if opened % 2 == 0 {
                Shape::Fragments
            } else {
                Shape::OneFrame
            };
            match s.hello(&format!("half-{run}-{opened}")).map(Client::into_stream) {
                Some(stream) if stream.set_nonblocking(true).is_ok() => {
                    tally.ops.fetch_add(1, Ordering::Relaxed);
                    s.ops.fetch_add(1, Ordering::Relaxed);
                    held.push(HalfMessage {
                        stream,
                        shape,
                        out: Vec::new(),
                        written: 0,
                        sent: 0,
                        last: Instant::now(),
                        input: Vec::new(),
                    });
                }
                _ => pause(200),
            }
        }
        held.retain_mut(|h| match h.pump(&masked, tally) {
            Ok(()) => true,
            Err(Gone::ClosedByServer) => {
                tally.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
            Err(Gone::Unreadable) => false,
        });
        let filling = held.len() < HALF_SOCKETS || held.iter().any(|h| h.sent < HALF_FILL);
        pause(if filling { 5 } else { 200 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_announce_what_the_attack_means() {
        let mut one = Cursor::new(frame_header(OpCode::Data(Data::Text), true, ANNOUNCED));
        let (h, len) = FrameHeader::parse(&mut one).unwrap().unwrap();
        assert!(h.is_final && h.mask == Some(MASK) && h.opcode == OpCode::Data(Data::Text));
        assert_eq!(len as usize, ANNOUNCED);

        let mut frag = Cursor::new(frame_header(OpCode::Data(Data::Continue), false, BLOCK));
        let (h, len) = FrameHeader::parse(&mut frag).unwrap().unwrap();
        assert!(!h.is_final && h.opcode == OpCode::Data(Data::Continue));
        assert_eq!(len as usize, BLOCK);
    }

    /// Everything a half-sent message of `shape` writes up to and including its first
    /// keep-alive.
    fn written(shape: Shape, masked: &[u8]) -> Vec<u8> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut h = HalfMessage {
            stream: TcpStream::connect(listener.local_addr().unwrap()).unwrap(),
            shape,
            out: Vec::new(),
            written: 0,
            sent: 0,
            last: Instant::now(),
            input: Vec::new(),
        };
        let mut bytes = Vec::new();
        while h.sent < HALF_FILL {
            assert!(h.refill(masked));
            bytes.extend_from_slice(&h.out);
        }
        assert!(!h.refill(masked), "nothing more until the keep-alive is due");
        h.last -= TRICKLE;
        assert!(h.refill(masked));
        bytes.extend_from_slice(&h.out);
        bytes
    }

    /// The gateway's side: tungstenite as a server, with the 16 MiB message limit.
    fn server_reads(bytes: Vec<u8>) -> tungstenite::Result<tungstenite::Message> {
        use tungstenite::protocol::{Role, WebSocket, WebSocketConfig};
        let limit = 16 * 1024 * 1024;
        let config = WebSocketConfig::default()
            .max_message_size(Some(limit))
            .max_frame_size(Some(limit));
        let stream = std::io::Cursor::new(bytes);
        WebSocket::from_raw_socket(stream, Role::Server, Some(config)).read()
    }

    #[test]
    fn half_sent_messages_are_valid_websocket_and_never_end() {
        let masked: Vec<u8> = (0..BLOCK).map(|i| b'a' ^ MASK[i % 4]).collect();
        // Fragments: 12 MiB of a text message, then a pong the server hears between them.
        let mut fragments = written(Shape::Fragments, &masked);
        match server_reads(fragments.clone()) {
            Ok(tungstenite::Message::Pong(p)) => assert!(p.is_empty()),
            other => panic!("expected the pong, got {other:?}"),
        }
        // Finished by hand, the same bytes make a 12 MiB message of 'a's: the masking is right.
        fragments.extend(frame_header(OpCode::Data(Data::Continue), true, 0));
        let mut ws = {
            use tungstenite::protocol::{Role, WebSocket, WebSocketConfig};
            let config = WebSocketConfig::default().max_message_size(None).max_frame_size(None);
            WebSocket::from_raw_socket(Cursor::new(fragments), Role::Server, Some(config))
        };
        assert!(matches!(ws.read(), Ok(tungstenite::Message::Pong(_))));
        match ws.read() {
            Ok(tungstenite::Message::Text(t)) => {
                assert_eq!(t.len(), HALF_FILL);
                assert!(t.bytes().all(|b| b == b'a'));
            }
            other => panic!("expected the text, got {other:?}"),
        }

        // One frame: the header passes the limit, and the message simply never ends.
        let one = written(Shape::OneFrame, &masked);
        assert_eq!(
            one.len(),
            frame_header(OpCode::Data(Data::Text), true, ANNOUNCED).len() + HALF_FILL + 4
        );
        match server_reads(one) {
            Err(tungstenite::Error::Protocol(tungstenite::error::ProtocolError::ResetWithoutClosingHandshake)) => {}
            other => panic!("expected an unfinished frame, got {other:?}"),
        }
    }

    #[test]
    fn a_minted_device_stays_under_its_upload_limit() {
        // U2: 8 MiB of unfinished uploads per device; the keep-alives add 3 bytes each.
        let per_device = SLOTS * FILL_PARTS * PART_BYTES;
        assert!(per_device < 8 * 1024 * 1024);
        assert!(per_device > 7 * 1024 * 1024);
        let keep_alives = 3600 / UPLOAD_KEEP_ALIVE.as_secs() as usize;
        assert!(per_device + SLOTS * 3 * keep_alives < 8 * 1024 * 1024);
        assert!(FILL_PARTS + keep_alives < PARTS);
    }
}
