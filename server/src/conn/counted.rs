//! The socket under a WebSocket, counting what tungstenite reads from it, so that the bytes
//! of a message not yet whole are known (issue 23 #2, decisions L51).
//!
//! tungstenite gathers a message's frames in buffers of its own and says nothing until the
//! message is whole: 8 peers each sending 15 MiB of a 16 MiB message held 120 MiB that no
//! budget saw. Every byte it took from the socket since the last message (or control frame)
//! it handed out belongs to the message in progress, give or take one read buffer (2 KiB),
//! so that count is what the memory budget charges the connection.

use std::io::{self, Read, Write};

use mio::net::TcpStream;

pub struct Counted {
    stream: TcpStream,
    /// Bytes read since the last whole message was handed out.
    since_message: usize,
}

impl Counted {
    pub fn new(stream: TcpStream) -> Counted {
        Counted {
            stream,
            since_message: 0,
        }
    }

    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Bytes of the message in progress (what tungstenite holds of it, within a read buffer).
    pub fn partial(&self) -> usize {
        self.since_message
    }

    /// tungstenite handed out a whole message or a control frame.
    pub fn message_done(&mut self) {
        self.since_message = 0;
    }
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stream.read(buf)?;
        self.since_message = self.since_message.saturating_add(n);
        Ok(n)
    }
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}
