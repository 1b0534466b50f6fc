//! Paired devices (issue 26): pairing codes a phone trades for a token of its own, and the
//! tokens, bound to their devices and revocable. Pure, on the caller's clock, like the rest
//! of the core; the store and the routes are the server's.
//! The gateway holds them ([`crate::gateway`]'s `paired` module) and decides; the
//! server keeps them in the journal's database and serves `POST /pair` and the CLI.

pub mod attempts;
pub mod codes;
pub mod tokens;

pub use attempts::PairAttempts;
pub use codes::{CodeError, KeptCode, PairCodes};
pub use tokens::{Check, DeviceTokens, PairError, Paired};
