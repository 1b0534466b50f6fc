//! What the HTTP agent says to the phone in its own words, in one place: the notes outside a
//! turn, the one sentence a failed turn ends with, and the marks on a reply that was cut.
//! Each names what the owner can check (docs/http-agents.md, L44).

use hermes_mobile::upstream::Endpoint;

use crate::agent::io::CallError;

pub const INBOX_FULL: &str = "Still busy with your earlier messages; this one was not sent. Try again in a moment.";
pub const NOTHING_TO_STOP: &str = "Nothing to stop.";
pub const NEW_WHILE_BUSY: &str = "An answer is still coming: /new after it ends (or /stop it first).";
pub const NEW_CONVERSATION: &str = "Started a new conversation.";
pub const CARD_EXPIRED: &str = "The approval card expired, so the command was denied.";
pub const APPROVED_ALWAYS: &str =
    "Approved always: Hermes added this kind of command to its allow-list (config.yaml) and will not ask again.";
pub const NOT_HTTP: &str = "The agent's answer was not HTTP.";
pub const EVENT_TOO_LARGE: &str = "the agent sent an event too large to read";
pub const EVENTS_ENDED_EARLY: &str = "interrupted: the run's event stream ended early";
pub const STREAM_INCOMPLETE: &str = "interrupted: the stream ended before the answer was complete";
pub const STOPPED: &str = "Stopped.";
pub const STOPPED_MARK: &str = "(stopped)";
pub const LENGTH_LIMIT: &str = "(cut: the model reached its length limit)";
pub const SENT_AN_IMAGE: &str = "(sent an image)";
pub const EMPTY_ANSWER: &str = "(The agent gave an empty answer.)";

pub fn dropped_waiting(n: usize) -> String {
    format!("Stopped: {n} waiting message(s) not sent.")
}

pub fn request_not_made(why: &str) -> String {
    format!("The request could not be made: {why}.")
}

pub fn run_not_started(why: &str) -> String {
    format!("Hermes did not start the run: {why}.")
}

pub fn answer_lost(sentence: &str) -> String {
    format!("Your answer did not reach Hermes: {sentence}")
}

pub fn stop_lost(why: &str) -> String {
    format!("The stop did not reach Hermes ({why}); send /stop again.")
}

pub fn file_not_sent(why: &str) -> String {
    format!("(A file could not be sent: {why}.)")
}

pub fn model_error(message: &str) -> String {
    format!("the model server reported: {message}")
}

pub fn hermes_error(error: &str) -> String {
    format!("Hermes reported: {error}")
}

pub fn reply_too_long(limit_kib: usize) -> String {
    format!("cut: the answer passed {limit_kib} KiB")
}

pub fn interrupted(error: &CallError) -> String {
    format!("interrupted: {error}")
}

pub fn events_interrupted(error: &CallError) -> String {
    format!("interrupted: the run's event stream: {error}")
}

pub fn turn_too_long(minutes: u64) -> String {
    format!("stopped after {minutes} minutes")
}

pub fn more_files(extra: usize, sent: usize) -> String {
    format!("({extra} more files were named; only the first {sent} are sent.)")
}

pub fn outside_media_dirs(path: &str) -> String {
    format!("(The file {path} was not sent: it is outside MOBILE_AGENT_MEDIA_DIRS.)")
}

pub fn sent_files(names: &[&str]) -> String {
    format!("(sent {})", names.join(", "))
}

/// The one sentence a call that failed ends a turn with.
pub fn call_failed(error: &CallError, endpoint: &Endpoint) -> String {
    let at = format!("{}:{}", endpoint.host, endpoint.port);
    match error {
        CallError::Resolve(_) => format!(
            "The agent's address {} does not resolve; check MOBILE_AGENT.",
            endpoint.host
        ),
        CallError::Connect(why) => format!("The agent at {at} is not reachable ({why}). Is it running?"),
        CallError::Tls(why) => {
            format!("The secure connection to {at} failed ({why}). For a self-signed server, set MOBILE_AGENT_CA_FILE.")
        }
        CallError::Timeout("connect") => format!("The agent at {at} did not answer the connection in time."),
        CallError::Timeout(_) => "The agent took too long to answer; try again.".into(),
        CallError::Broken(why) => format!("The connection to the agent broke ({why}); try again."),
        CallError::Busy => "Too many requests are open to the agent; try again in a moment.".into(),
    }
}
