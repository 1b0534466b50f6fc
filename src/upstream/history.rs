//! A device's conversation with an HTTP model, bounded (issue 11).
//!
//! OpenAI-compatible servers and Hermes' runs API keep no history for us: every request
//! carries the conversation. It is bounded by characters (G1 counts) and by turns; when
//! either is passed the oldest messages go first, a whole user/assistant exchange at a
//! time, and the system prompt is never counted or dropped. It serializes to JSON so the
//! server can keep it under the state directory across restarts.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// `user` or `assistant`.
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    turns: Vec<Turn>,
    #[serde(skip)]
    max_chars: usize,
    #[serde(skip)]
    max_turns: usize,
}

impl History {
    pub fn new(max_chars: usize, max_turns: usize) -> History {
        History {
            turns: Vec::new(),
            max_chars,
            max_turns: max_turns.max(2),
        }
    }

    /// A history read back from disk, with this run's bounds applied.
    pub fn from_json(json: &str, max_chars: usize, max_turns: usize) -> Result<History, serde_json::Error> {
        Ok(serde_json::from_str::<History>(json)?.with_bounds(max_chars, max_turns))
    }

    /// This history under these bounds (a deserialized one has none), trimmed to them.
    pub fn with_bounds(mut self, max_chars: usize, max_turns: usize) -> History {
        self.max_chars = max_chars;
        self.max_turns = max_turns.max(2);
        self.trim();
        self
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a history of strings always serializes")
    }

    pub fn push(&mut self, role: &str, content: &str) {
        self.turns.push(Turn {
            role: role.to_owned(),
            content: content.to_owned(),
        });
        self.trim();
    }

    /// `/new`: forget everything.
    pub fn clear(&mut self) {
        self.turns.clear();
    }

    pub fn turns(&self) -> &[Turn] {
        &self.turns
    }

    pub fn chars(&self) -> usize {
        self.turns.iter().map(|t| t.content.chars().count()).sum()
    }

    /// The system prompt as a message, if there is one.
    pub fn system_message(system: Option<&str>) -> Option<serde_json::Value> {
        system
            .filter(|s| !s.is_empty())
            .map(|s| serde_json::json!({"role": "system", "content": s}))
    }

    /// The messages of a chat-completions request: the system prompt (if any) first.
    pub fn messages(&self, system: Option<&str>) -> Vec<serde_json::Value> {
        History::system_message(system)
            .into_iter()
            .chain(
                self.turns
                    .iter()
                    .map(|t| serde_json::json!({"role": t.role, "content": t.content})),
            )
            .collect()
    }

    fn trim(&mut self) {
        // The newest message always stays, even alone over the bound: it is the question
        // being asked.
        let mut chars = self.chars();
        let mut drop = 0;
        let keep_last = self.turns.len().saturating_sub(1);
        while drop < keep_last && (chars > self.max_chars || self.turns.len() - drop > self.max_turns) {
            chars -= self.turns[drop].content.chars().count();
            drop += 1;
            // Never leave an assistant message first: its question went with it.
            while drop < keep_last && self.turns[drop].role != "user" {
                chars -= self.turns[drop].content.chars().count();
                drop += 1;
            }
        }
        self.turns.drain(..drop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_exchange_goes_first_and_the_system_prompt_stays() {
        let mut h = History::new(20, 100);
        h.push("user", "0123456789");
        h.push("assistant", "abcde");
        h.push("user", "0123456789");
        assert_eq!(h.turns().len(), 1, "{h:?}");
        assert_eq!(h.turns()[0].role, "user");
        let m = h.messages(Some("be brief"));
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn the_newest_message_stays_even_alone_over_the_bound() {
        let mut h = History::new(5, 10);
        h.push("user", "hi");
        h.push("assistant", "hello");
        h.push("user", "a question far longer than five characters");
        assert_eq!(h.turns().len(), 1);
        assert!(h.turns()[0].content.starts_with("a question"));
    }

    #[test]
    fn the_turn_bound_holds_and_survives_a_round_trip() {
        let mut h = History::new(1_000_000, 4);
        for i in 0..10 {
            h.push("user", &format!("q{i}"));
            h.push("assistant", &format!("a{i}"));
        }
        assert_eq!(h.turns().len(), 4);
        assert_eq!(h.turns()[0].content, "q8");
        let back = History::from_json(&h.to_json(), 1_000_000, 2).unwrap();
        assert_eq!(back.turns().len(), 2, "a smaller bound on reload applies");
        assert_eq!(back.turns()[0].content, "q9");
    }
}
