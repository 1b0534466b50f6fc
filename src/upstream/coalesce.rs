//! Streamed deltas to edits, at most one per interval (issue 11).
//!
//! A model streams a reply as many small deltas (often one per token). Sending each as an
//! edit (M2) would wake a phone's radio dozens of times a second; the coalescer keeps the
//! text whole and says when an edit is due: the first delta at once (the user sees the
//! answer start), then at most one edit per `interval`, and always the final version.
//! Time is passed in; the caller arms a timer for [`Coalescer::due_at`].

use crate::Time;
use std::time::Duration;

/// The default interval between two edits of one streamed reply.
pub const DEFAULT_EDIT_INTERVAL: Duration = Duration::from_millis(300);

#[derive(Debug)]
pub struct Coalescer {
    text: String,
    interval: Duration,
    /// When the last version was handed out (`None`: nothing yet).
    last_sent: Option<Time>,
    /// Text was added since the last version handed out.
    dirty: bool,
}

impl Coalescer {
    pub fn new(interval: Duration) -> Coalescer {
        Coalescer {
            text: String::new(),
            interval,
            last_sent: None,
            dirty: false,
        }
    }

    /// The whole text so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Adds a delta; returns the text to send now as the next version, if one is due.
    pub fn push(&mut self, now: Time, delta: &str) -> Option<&str> {
        if delta.is_empty() {
            return None;
        }
        self.text.push_str(delta);
        self.dirty = true;
        self.poll(now)
    }

    /// The version due at `now` (call it when the timer of [`Coalescer::due_at`] fires).
    pub fn poll(&mut self, now: Time) -> Option<&str> {
        let due = self.due_at()?;
        if now < due {
            return None;
        }
        self.dirty = false;
        self.last_sent = Some(now);
        Some(&self.text)
    }

    /// When the next version is due, if text is waiting.
    pub fn due_at(&self) -> Option<Time> {
        if !self.dirty {
            return None;
        }
        Some(match self.last_sent {
            None => Time::ZERO,
            Some(at) => at + self.interval,
        })
    }

    /// The stream ended: the final text, always (the last version must be `done`, even
    /// when it equals the one already sent).
    pub fn finish(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_delta_goes_at_once_then_one_edit_per_interval() {
        let mut c = Coalescer::new(Duration::from_millis(300));
        assert_eq!(c.push(Time::from_millis(1000), "He"), Some("He"));
        assert_eq!(c.push(Time::from_millis(1100), "llo"), None);
        assert_eq!(c.due_at(), Some(Time::from_millis(1300)));
        assert_eq!(c.poll(Time::from_millis(1299)), None);
        assert_eq!(c.poll(Time::from_millis(1300)), Some("Hello"));
        assert_eq!(c.due_at(), None, "nothing new: no edit due");
        assert_eq!(c.push(Time::from_millis(2000), "!"), Some("Hello!"));
        assert_eq!(c.finish(), "Hello!");
    }

    #[test]
    fn empty_deltas_change_nothing() {
        let mut c = Coalescer::new(DEFAULT_EDIT_INTERVAL);
        assert_eq!(c.push(Time::ZERO, ""), None);
        assert_eq!(c.due_at(), None);
    }
}
