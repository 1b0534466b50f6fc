//! Error codes (protocol-v1.md "Error codes") and the rejection of one client frame.

use std::borrow::Cow;

/// The `code` of an `error` frame. `auth_required` is declared by the spec but never sent
/// (decisions G4), so it has no variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    BadFrame,
    AuthFailed,
    Forbidden,
    UnsupportedFrame,
    TooBig,
    DeviceOffline,
    InternalError,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadFrame => "bad_frame",
            ErrorCode::AuthFailed => "auth_failed",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::UnsupportedFrame => "unsupported_frame",
            ErrorCode::TooBig => "too_big",
            ErrorCode::DeviceOffline => "device_offline",
            ErrorCode::InternalError => "internal_error",
        }
    }
}

/// Why a frame was refused. `message` is short English and never carries a token or message
/// content (decisions G9); `id` is the offending frame's id when it is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub code: ErrorCode,
    pub message: Cow<'static, str>,
    pub id: Option<String>,
}

impl Rejection {
    pub fn new(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Rejection {
        Rejection {
            code,
            message: message.into(),
            id: None,
        }
    }

    pub fn bad_frame(message: &'static str) -> Rejection {
        Rejection::new(ErrorCode::BadFrame, message)
    }

    pub fn too_big(message: &'static str) -> Rejection {
        Rejection::new(ErrorCode::TooBig, message)
    }

    pub fn with_id(mut self, id: Option<&str>) -> Rejection {
        if self.id.is_none() {
            self.id = id.map(str::to_owned);
        }
        self
    }
}
