//! The gateway's settings, as plain data. Reading them from the environment and flags
//! (decisions C1–C3) is the server's job; the core only needs the values.

use std::fmt;
use std::time::Duration;

use crate::limits::{
    DEFAULT_CHUNK_LIMIT, DEFAULT_PROMPT_TTL_SECS, MAX_HELD_TOTAL_BYTES, MAX_SPECULATIVE_UPLOAD_BYTES,
    MAX_UPLOAD_TOTAL_BYTES,
};

#[derive(Clone)]
pub struct Config {
    /// `MOBILE_TOKEN`: the app token. Always required (C3).
    pub token: String,
    /// `MOBILE_SHARED_TOKEN`: whether phones may use `token` (issue 26: `off` lets only
    /// paired devices and `MOBILE_EXTRA_TOKENS` in).
    pub shared_token: bool,
    /// `MOBILE_EXTRA_TOKENS`: `(device id, token)` bindings (H2).
    pub extra_tokens: Vec<(String, String)>,
    /// `MOBILE_ALLOWED_DEVICES`: empty allows every device id (C2, H3).
    pub allowed_devices: Vec<String>,
    /// `MOBILE_DELIVER_TOKENS`: service tokens (S1, S2).
    pub deliver_tokens: Vec<String>,
    /// `MOBILE_TRUST_LOOPBACK`: whether a loopback peer without proxy headers may
    /// `deliver` without a deliver token (S1, L53).
    pub trust_loopback: bool,
    /// `MOBILE_HOME_DEVICE`: the `deliver` target when none is given (S3).
    pub home_device: Option<String>,
    /// `MOBILE_AVATAR_URL`: `ready.avatar_url`, empty if unset (H6).
    pub avatar_url: String,
    /// `MOBILE_PROMPT_TTL`.
    pub prompt_ttl: Duration,
    /// `MOBILE_CHUNK_LIMIT`: characters per `message` frame (M1).
    pub chunk_limit: usize,
    /// From accept to `hello` (H7).
    pub hello_timeout: Duration,
    /// From the last agent frame to `avatar{idle}` (M3).
    pub typing_idle: Duration,
    /// An unfinished upload with no new chunk for this long is dropped (U5).
    pub upload_stall: Duration,
    /// Idempotency window (I1); also how long closed cards answer repeats (P4).
    pub dedup_window: Duration,
    /// How long agent output waits for an offline device (M4).
    pub offline_hold: Duration,
    /// Agent output held for all offline devices together (L32).
    pub max_held_total: usize,
    /// Room reserved for announced upload parts, over all connections (L31).
    pub max_upload_speculation: usize,
    /// Memory every unfinished upload together may hold (L51): past it, a part of a
    /// multi-part upload is refused with `too_big` and its upload dropped.
    pub max_upload_total: usize,
    /// Seeds generated ids (H4). The server takes it from the operating system.
    pub seed: u64,
    /// Web Push and ntfy (issue 18); `None` with `MOBILE_PUSH=off`.
    pub push: Option<crate::push::PushConfig>,
    /// The journal (issue 24); `None` when the driver keeps none.
    pub journal: Option<crate::journal::JournalConfig>,
}

impl Config {
    /// The spec's defaults with the given app token.
    pub fn new(token: impl Into<String>) -> Config {
        Config {
            token: token.into(),
            shared_token: true,
            extra_tokens: Vec::new(),
            allowed_devices: Vec::new(),
            deliver_tokens: Vec::new(),
            trust_loopback: true,
            home_device: None,
            avatar_url: String::new(),
            prompt_ttl: Duration::from_secs(DEFAULT_PROMPT_TTL_SECS),
            chunk_limit: DEFAULT_CHUNK_LIMIT,
            hello_timeout: Duration::from_secs(15),
            typing_idle: Duration::from_secs(3),
            upload_stall: Duration::from_secs(120),
            dedup_window: Duration::from_secs(600),
            offline_hold: Duration::from_secs(600),
            max_held_total: MAX_HELD_TOTAL_BYTES,
            max_upload_speculation: MAX_SPECULATIVE_UPLOAD_BYTES,
            max_upload_total: MAX_UPLOAD_TOTAL_BYTES,
            seed: 0x6865_726d_6573,
            push: None,
            journal: None,
        }
    }
}

/// Tokens never reach a log, not even through `{:?}`.
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bound: Vec<&str> = self.extra_tokens.iter().map(|(d, _)| d.as_str()).collect();
        f.debug_struct("Config")
            .field("token", &"<redacted>")
            .field("shared_token", &self.shared_token)
            .field("extra_tokens (devices)", &bound)
            .field("allowed_devices", &self.allowed_devices)
            .field(
                "deliver_tokens",
                &format_args!("<{} redacted>", self.deliver_tokens.len()),
            )
            .field("trust_loopback", &self.trust_loopback)
            .field("home_device", &self.home_device)
            .field("avatar_url", &self.avatar_url)
            .field("prompt_ttl", &self.prompt_ttl)
            .field("chunk_limit", &self.chunk_limit)
            .field("hello_timeout", &self.hello_timeout)
            .field("typing_idle", &self.typing_idle)
            .field("upload_stall", &self.upload_stall)
            .field("dedup_window", &self.dedup_window)
            .field("offline_hold", &self.offline_hold)
            .field("max_held_total", &self.max_held_total)
            .field("max_upload_speculation", &self.max_upload_speculation)
            .field("max_upload_total", &self.max_upload_total)
            .field("push", &self.push)
            .field("journal", &self.journal)
            .finish()
    }
}
