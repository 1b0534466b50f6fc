//! The frames of Protocol v1: parsing and validation of what the app sends, serialization of
//! what the gateway sends (and parsing of it, for Rust clients and tests).

pub mod client;
pub mod devices;
pub mod error;
pub mod journal;
pub mod lenient;
pub mod push;
pub mod server;

pub use client::{parse_client_frame, ClientFrame, DownloadKind, UploadKind};
pub use error::{ErrorCode, Rejection};
