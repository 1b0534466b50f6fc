//! Paired devices (issue 26): pairing codes a phone trades for a token of its own, and the
//! tokens, bound to their devices and revocable. Pure, on the caller's clock, like the rest
//! of the core; the store and the routes are the server's.
//!
//! This is the first part of issue 26: the rules, tested on their own. Nothing uses them
//! yet: `POST /pair`, the store, `hello` with a device token, the CLI and the page come next.

pub mod codes;
pub mod tokens;

pub use codes::{KeptCode, PairCodes};
pub use tokens::{Check, DeviceTokens, Paired};
