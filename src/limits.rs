//! The numbers of Protocol v1 (protocol-v1.md, "Constraints and limits") and of decisions.md.
//!
//! They live in one place so that a reader can check every limit against the spec at a glance,
//! and so that the server, the benches and the fuzz targets agree with the core.

/// `ready.v`.
pub const PROTOCOL_VERSION: u32 = 1;
/// One whole WebSocket message (decisions G6, G7).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;
/// `text` and `caption`, counted in Unicode scalar values (decisions G1).
pub const MAX_TEXT_CHARS: usize = 12_000;
/// A decoded `audio` recording.
pub const MAX_AUDIO_BYTES: usize = 8 * 1024 * 1024;
/// One decoded media file, in both directions.
pub const MAX_MEDIA_BYTES: usize = 8 * 1024 * 1024;
/// Raw bytes per outgoing media chunk (decisions U1).
pub const MEDIA_CHUNK_BYTES: usize = 3 * 1024 * 1024;
/// Only sets the `parts` ceiling (decisions U1).
pub const MIN_MEDIA_CHUNK_BYTES: usize = 4 * 1024;
/// `ceil(MAX_MEDIA_BYTES / MIN_MEDIA_CHUNK_BYTES)`.
pub const MAX_MEDIA_PARTS: u32 = 2048;
/// Characters per `message` frame unless configured otherwise (decisions C1, M1).
pub const DEFAULT_CHUNK_LIMIT: usize = 3500;
/// Card lifetime unless configured otherwise, in seconds.
pub const DEFAULT_PROMPT_TTL_SECS: u64 = 300;
/// Open multipart uploads per device (decisions U2).
pub const MAX_OPEN_UPLOADS: usize = 8;
/// Decoded bytes of all open uploads of one device (decisions U2).
pub const MAX_UPLOAD_BUFFER_BYTES: usize = 8 * 1024 * 1024;
/// `id` and `prompt_id` truncation (decisions G8).
pub const MAX_ID_CHARS: usize = 128;
/// `device.*` and `user.*` truncation (decisions G8).
pub const MAX_DEVICE_FIELD_CHARS: usize = 120;
/// `filename` truncation (decisions G8).
pub const MAX_FILENAME_CHARS: usize = 200;
/// Dedup window entries per device (decisions I1).
pub const DEDUP_CAPACITY: usize = 4000;
/// Dedup entries in all, across device ids (decisions L32): the globally oldest go first.
pub const DEDUP_TOTAL_CAPACITY: usize = 16_384;
/// Devices the gateway keeps a record of (decisions L32): past it, the offline device idle
/// the longest is forgotten. Device ids cost nothing to mint for anyone with the app token.
pub const MAX_KNOWN_DEVICES: usize = 256;
/// The largest WebSocket message accepted before `hello` (decisions L35): a hello is a few
/// hundred bytes, so an unauthenticated peer never gets to make the server buffer 16 MiB.
pub const MAX_PRE_HELLO_FRAME_BYTES: usize = 64 * 1024;
/// Room reserved for parts still to come, across all connections (decisions L31): a first
/// part may announce up to 8 MiB more, which must not be 8 MiB per connection for 4 KiB sent.
pub const MAX_SPECULATIVE_UPLOAD_BYTES: usize = 32 * 1024 * 1024;
/// Memory every unfinished upload together may hold, the room of L31 included (decisions
/// L51). Device ids are free to mint, so the per-device 8 MiB (U2) alone bounds nothing.
/// The server sets it from `MOBILE_MEMORY_BUDGET`.
pub const MAX_UPLOAD_TOTAL_BYTES: usize = MAX_SPECULATIVE_UPLOAD_BYTES + 32 * 1024 * 1024;
/// The least the bytes of unfinished uploads may hold, whatever the budget (L51): one
/// device's whole 8 MiB (U2) and its bookkeeping (L31: at most 64 B + 3 B a part).
pub const MIN_UPLOAD_BYTES_SHARE: usize = MAX_UPLOAD_BUFFER_BYTES + 2 * 1024 * 1024;
/// Open cards per device and in all (decisions L33): each is re-sent on every `hello`.
pub const MAX_OPEN_PROMPTS_PER_DEVICE: usize = 32;
pub const MAX_OPEN_PROMPTS: usize = 256;
/// Messages accepted and waiting for their commit before they go to the agent, in all (L58,
/// L64): a disk that stalls (an SD card's fsync can take seconds) must not let them pile up
/// in memory. Past it a new message is refused, not lost: the phone never got `received`.
pub const MAX_GATE_BYTES: usize = 32 * 1024 * 1024;
/// Agent output held for all offline devices together (decisions L32): the oldest goes first.
pub const MAX_HELD_TOTAL_BYTES: usize = 32 * 1024 * 1024;
/// The longest a card may live, whatever the agent asks (decisions L27): a day. Longer
/// cards would pin their state (and the owner's attention) for no use a phone has.
pub const MAX_PROMPT_TTL_SECS: u64 = 24 * 60 * 60;
/// Bytes of agent output held per offline device (decisions M4).
pub const MAX_HELD_BYTES: usize = 8 * 1024 * 1024;

/// WebSocket close code for every fatal error (decisions G10).
pub const CLOSE_POLICY: u16 = 1008;
/// WebSocket close code of a connection replaced by a newer one of the same device (decisions H5).
pub const CLOSE_NORMAL: u16 = 1000;
/// WebSocket close code for "going away" (shutdown, keep-alive, decisions K2).
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// RFC 6455 1013 "try again later": the journal is slow to answer (issue 24).
pub const CLOSE_TRY_AGAIN: u16 = 1013;
/// RFC 6455 1011: the gateway met a condition it could not handle (a journal read failed).
pub const CLOSE_INTERNAL_ERROR: u16 = 1011;
