//! The hermes-mobile gateway as a library: the event loop (`server`), its connections,
//! timers and HTTP, and the agent port with its pure backends (`agent`), so that tests,
//! benches and fuzz targets reach them without a socket. `src/main.rs` is the thin binary.

pub mod agent;
pub mod card_answer;
pub mod cli;
pub mod config;
pub mod conn;
pub mod devices_cli;
pub mod env_file;
pub mod fileio;
pub mod hermes;
pub mod history_cli;
pub mod http;
pub mod http_client;
pub mod journal;
pub mod memory;
pub mod pair;
pub mod pair_route;
pub mod push;
pub mod send;
pub mod server;
pub mod signals;
pub mod state;
pub mod timer;
pub mod web;
pub mod wheel;
pub mod wiring;
