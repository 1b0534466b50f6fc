//! The wiring's side of paired devices (issue 26): `POST /pair`, the CLI's codes and
//! revocations, and the wall clock the device list shows. The core decides; these only
//! hand inputs over, and its answers come back as [`super::WiringIo::Paired`]
//! and [`super::WiringIo::Revoked`].

use hermes_mobile::devices::{CodeError, KeptCode};
use hermes_mobile::gateway::PairRequest;
use hermes_mobile::throttle::SourceKey;
use hermes_mobile::Time;

use super::Wiring;

impl Wiring {
    /// `POST /pair` (issue 26): answered as [`super::WiringIo::Paired`].
    pub fn handle_pair(&mut self, t: Time, request: u64, source: SourceKey, req: PairRequest, token: String) {
        self.core.handle_pair(t, request, source, req, token);
    }

    /// A pairing code from the CLI (issue 26).
    pub fn add_pair_code(&mut self, t: Time, code: KeptCode) -> Result<(), CodeError> {
        self.core.add_pair_code(t, code)
    }

    /// The CLI's revocation (issue 26): answered as [`super::WiringIo::Revoked`].
    pub fn handle_revoke(&mut self, t: Time, request: u64, device: &str, forget: bool) {
        self.core.handle_revoke(t, request, device, forget);
    }

    pub fn handle_wall_clock(&mut self, t: Time, unix_ms: u64) {
        self.core.handle_wall_clock(t, unix_ms);
    }
}
