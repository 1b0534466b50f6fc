//! Talking to an upstream HTTP agent (issue 11), sans-IO: the response parser and the
//! Server-Sent Events decoder the gateway's HTTP backends (`openai:`, `hermes:`) are
//! built on, the coalescing of streamed deltas into edits, and a device's bounded
//! conversation. Bytes in, events out; no sockets, no clock (time is passed in).

pub mod coalesce;
pub mod hermes_runs;
pub mod history;
pub mod openai;
pub mod response;
pub mod sse;

pub use coalesce::{Coalescer, DEFAULT_EDIT_INTERVAL};
pub use hermes_runs::{parse_run_event, parse_run_started, RunEvent, RunId};
pub use history::{History, Turn};
pub use openai::{
    media_path_allowed, parse_stream_data, request_bytes, status_outcome, take_media_tags, ChatRequest, Endpoint,
    Retry, StreamItem,
};
pub use response::{ResponseError, ResponseEvent, ResponseHead, ResponseParser};
pub use sse::{SseDecoder, SseEvent, SseItem, SseTooLong};
