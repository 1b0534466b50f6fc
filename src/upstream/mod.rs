//! Talking to an upstream HTTP agent (issue 11), sans-IO: the response parser and the
//! Server-Sent Events decoder the gateway's HTTP backends (`openai:`, `hermes:`) are
//! built on, the coalescing of streamed deltas into edits, and a device's bounded
//! conversation. Bytes in, events out; no sockets, no clock (time is passed in).

pub mod coalesce;
pub mod history;
pub mod openai;
pub mod response;
pub mod sse;

pub use coalesce::{Coalescer, DEFAULT_EDIT_INTERVAL};
pub use history::{History, Turn};
pub use openai::{parse_stream_data, status_outcome, ChatRequest, Endpoint, Retry, StreamItem};
pub use response::{ResponseError, ResponseEvent, ResponseHead, ResponseParser};
pub use sse::{SseDecoder, SseEvent, SseItem, SseTooLong};
