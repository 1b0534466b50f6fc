//! Talking to an upstream HTTP agent (issue 11), sans-IO: the response parser and the
//! Server-Sent Events decoder the gateway's HTTP backends (`openai:`, `hermes:`) are
//! built on. Bytes in, events out; no sockets, no clock.

pub mod response;
pub mod sse;

pub use response::{ResponseError, ResponseEvent, ResponseHead, ResponseParser};
pub use sse::{SseDecoder, SseEvent, SseItem, SseTooLong};
