//! # hermes-mobile: the Protocol v1 core
//!
//! A sans-IO implementation of Protocol v1, the WebSocket protocol between a phone app and a
//! personal AI agent. [`Gateway`] is a deterministic state machine: it has no sockets, no
//! threads and no clock. The driver (the `hermes-mobile` server, a test, a fuzzer) feeds it
//! whole WebSocket messages and the current [`Time`], and carries out what it asks.
//!
//! ## The run-loop rule
//!
//! After any `handle_*` call, drain [`Gateway::poll_output`] and [`Gateway::poll_event`]
//! until both return `None`; then sleep until [`Gateway::poll_timeout`] (or the next input)
//! and call [`Gateway::handle_timeout`]. Spurious timeouts are harmless.
//!
//! ```
//! use hermes_mobile::{Config, ConnId, Gateway, Output, Peer, Time};
//!
//! let mut gw = Gateway::new(Config::new("secret"));
//! let conn = ConnId(1);
//! gw.handle_open(Time::ZERO, conn, Peer::default());
//! gw.handle_message(Time::from_millis(5), conn, br#"{"t":"hello","token":"secret","device":{"id":"tel-1"}}"#);
//!
//! let mut sent = Vec::new();
//! while let Some(out) = gw.poll_output() {
//!     if let Output::Send { frame, .. } = out {
//!         sent.push(frame);
//!     }
//! }
//! assert!(sent[0].starts_with(r#"{"t":"ready","v":1,"session":"mobile:tel-1""#));
//!
//! // No hello timeout any more: it was answered.
//! gw.handle_timeout(Time::from_secs(15));
//! assert!(gw.poll_output().is_none());
//! ```
//!
//! ## Error policy
//!
//! Errors are values: a bad frame becomes an `error` frame for the peer (decisions G9, G10),
//! a bad agent command a [`CommandError`]. Nothing a peer sends can panic; every `expect`
//! in this crate states the invariant that makes it unreachable.

pub mod agent;
pub mod agent_link;
mod auth;
pub mod base64;
pub mod chunking;
pub mod client;
pub mod config;
mod dedup;
pub mod devices;
pub mod gateway;
pub mod hidden;
mod hold;
pub mod ids;
pub mod journal;
pub mod limits;
pub mod media;
pub mod mime;
pub mod prompts;
pub mod push;
mod reassembly;
mod text;
pub mod throttle;
pub mod time;
pub mod uploads;
pub mod upstream;
pub mod wire;

pub use agent::{Accepted, AgentCommand, AgentEvent, CommandError, OutgoingFile, PromptKind, PromptRequest, UserInfo};
pub use config::Config;
pub use gateway::{CardAnswered, Gateway, Output, Peer, Stats};
pub use ids::{ConnId, DeviceId, MessageId, PromptId};
pub use time::Time;
