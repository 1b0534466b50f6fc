//! What one batch of events left to do to connections at its end. These were four lists on
//! `Server`, written from a dozen places; they are connections' state with the lifetime of
//! one turn, so they live with the connections, and each has one way in and one way out.

/// The turn's to-do list of connections, by slab key.
#[derive(Debug, Default)]
pub struct Turn {
    /// Frames queued, a close decided, or control frames to answer: pumped after the drive.
    touched: Vec<usize>,
    /// The read budget ran out with more buffered: read again next turn (no readiness
    /// event will come for what is already buffered).
    read_again: Vec<usize>,
    /// The peer closed in the same read as its last messages: ended after those messages'
    /// turns have run (issue 8 #4), so that they are answered while the device is online.
    ended: Vec<(usize, String)>,
    /// Ended this batch: freed once it is over (mio may still report the token in it).
    pub(super) dead: Vec<usize>,
}

impl Turn {
    pub fn touch(&mut self, key: usize) {
        self.touched.push(key);
    }

    /// The touched connections, each once, into `into` (emptied first; a scratch vector
    /// the caller keeps, so a turn allocates nothing).
    pub fn take_touched(&mut self, into: &mut Vec<usize>) {
        into.clear();
        into.append(&mut self.touched);
        into.sort_unstable();
        into.dedup();
    }

    pub fn read_again(&mut self, key: usize) {
        self.read_again.push(key);
    }

    pub fn wants_read_again(&self) -> bool {
        !self.read_again.is_empty()
    }

    pub fn take_read_again(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.read_again)
    }

    /// The connection's read side ended (`reason`): it ends after this turn's drive.
    pub fn end_after_drive(&mut self, key: usize, reason: String) {
        self.ended.push((key, reason));
    }

    /// Whether its read side already ended this turn: nothing more is read from it.
    pub fn ends_after_drive(&self, key: usize) -> bool {
        self.ended.iter().any(|(k, _)| *k == key)
    }

    pub fn take_ended(&mut self) -> Vec<(usize, String)> {
        std::mem::take(&mut self.ended)
    }
}
