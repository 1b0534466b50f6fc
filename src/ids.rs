//! Opaque identifiers at the core's boundaries, and the deterministic generator behind the
//! ids the gateway invents (generated device ids, server message ids, media ids).

use std::fmt;

/// A connection, named by the driver. The server packs its slab key and a generation into it,
/// so an id is never reused while anything may still refer to the old connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub String);

        /// Quoted and escaped: these strings are chosen by a peer, and logs print them with
        /// `{:?}` so that a `\n` in one cannot forge a log line (issue 8 #12).
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(s)
            }
        }
    };
}

string_id!(
    /// A device id as the gateway sees it (`device.id`, truncated, or generated). The session is
    /// `mobile:<id>`; agent output is routed by it, not by connection (decisions H5, M4).
    DeviceId
);
string_id!(
    /// A card's id, chosen by the agent that opens it.
    PromptId
);
string_id!(
    /// The id of an agent message: one id for all chunks and edits of it (decisions M1, M2).
    MessageId
);

impl DeviceId {
    /// The session address of this device: `mobile:<id>`.
    pub fn session(&self) -> String {
        format!("mobile:{}", self.0)
    }
}

/// splitmix64: a tiny, fast, well-mixed generator. The driver seeds it from the operating
/// system; tests seed it with a constant so runs are reproducible. Ids it makes are
/// addresses, not secrets: tokens guard access (decisions H2, H4).
#[derive(Debug, Clone)]
pub struct IdGen {
    state: u64,
}

impl IdGen {
    pub fn new(seed: u64) -> IdGen {
        IdGen { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `dev-` and 16 lower-case hex digits (decisions H4).
    pub fn device_id(&mut self) -> DeviceId {
        DeviceId(format!("dev-{:016x}", self.next_u64()))
    }

    /// An id for a frame the gateway originates (`message` of a `deliver`, downstream `media`).
    pub fn frame_id(&mut self, prefix: &str) -> String {
        format!("{prefix}-{:016x}", self.next_u64())
    }
}
