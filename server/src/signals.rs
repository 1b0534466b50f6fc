//! SIGINT/SIGTERM stop the event loop gracefully. signal-hook-mio turns them into a
//! readiness source registered with the loop's `Poll`: the handler it installs only writes
//! to a pipe, and the loop reads which signals came.

use std::io;

use mio::{Interest, Registry, Token};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

pub struct StopSignals(Signals);

impl StopSignals {
    /// Installs the handlers and registers them under `token`.
    pub fn register(registry: &Registry, token: Token) -> io::Result<StopSignals> {
        let mut signals = Signals::new([SIGINT, SIGTERM])?;
        registry.register(&mut signals, token, Interest::READABLE)?;
        Ok(StopSignals(signals))
    }

    /// Whether a stop signal arrived since the last call (drains what is pending).
    pub fn received(&mut self) -> bool {
        self.0.pending().count() > 0
    }
}
