//! A turn's requests and what their answers do to it: the main request sent (and sent
//! again after a safe failure), the call news from the client, retries with their waits,
//! and the one sentence a turn ends with when it cannot be answered.

use std::time::Duration;

use hermes_mobile::upstream::{status_outcome, ResponseHead, Retry, SseItem};
use hermes_mobile::{DeviceId, Time};
use serde_json::Value;

use super::sentences as say;
use super::turn::TurnPhase;
use super::{
    Answer, Backend, CallRole, HttpAgent, Reach, ERROR_BODY_LIMIT, MAX_ATTEMPTS, MAX_EVENT_BYTES, MAX_REPLY_BYTES,
    MAX_RETRY_WAIT,
};
use crate::agent::io::{CallError, CallEvent, CallId};

impl HttpAgent {
    /// (Re)sends the turn's main request.
    pub(super) fn send_main(&mut self, device: &DeviceId) {
        let request = match self.settings.backend {
            Backend::OpenAi => self.chat_request(device),
            Backend::Hermes => self.run_request(device),
        };
        match request {
            Some(Ok(bytes)) => {
                let id = self.new_call(CallRole::Main(device.clone()), bytes);
                if let Some(turn) = self.turn_mut(device) {
                    turn.calling(id);
                }
            }
            Some(Err(why)) => self.fail_turn(device, say::request_not_made(&why)),
            None => {}
        }
    }

    /// A call's news from the HTTP client.
    pub fn handle_call(&mut self, now: Time, id: CallId, event: CallEvent) {
        self.on_call_event(now, id, event);
        self.start_waiting(now);
    }

    fn on_call_event(&mut self, now: Time, id: CallId, event: CallEvent) {
        let Some((role, answer)) = self.calls.get_mut(&id) else {
            return;
        };
        let role = role.clone();
        match event {
            CallEvent::Head(head) => {
                self.reach = Reach::Reachable;
                answer.status = Some(head.status);
                answer.retry_after = head.header("retry-after").map(str::to_owned);
                answer.stream = head.status == 200 && is_stream(&head);
                log::debug!("agent call {}: {} {}", id.0, head.status, head.reason.escape_debug());
            }
            CallEvent::Body(bytes) => {
                if answer.stream {
                    let (CallRole::Main(device) | CallRole::Events(device)) = &role else {
                        return;
                    };
                    let device = device.clone();
                    return self.on_stream_bytes(now, &device, &bytes);
                }
                // A whole (non-streamed) completion may be long; an error body is not.
                let limit = if answer.status == Some(200) {
                    MAX_EVENT_BYTES
                } else {
                    ERROR_BODY_LIMIT
                };
                let room = limit.saturating_sub(answer.body.len());
                answer.body.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            CallEvent::End => {
                let (_, answer) = self.calls.remove(&id).expect("looked up above");
                self.on_call_end(now, role, answer);
            }
            CallEvent::Failed(error) => {
                self.calls.remove(&id);
                if !matches!(error, CallError::Timeout("idle" | "first byte") | CallError::Broken(_)) {
                    self.reach = Reach::Unreachable(error.to_string());
                }
                log::warn!(
                    "agent: {} failed: {}",
                    role_name(&role),
                    error.to_string().escape_debug()
                );
                self.on_call_failed(now, role, error);
            }
        }
    }

    fn on_stream_bytes(&mut self, now: Time, device: &DeviceId, bytes: &[u8]) {
        let Some(turn) = self.turn_mut(device) else { return };
        let mut items = Vec::new();
        if turn.sse.feed(bytes, &mut items).is_err() {
            log::warn!("agent: an event over {MAX_EVENT_BYTES} bytes; the stream is cut");
            return self.cut(device, say::EVENT_TOO_LARGE);
        }
        for item in items {
            let SseItem::Event(event) = item else { continue };
            if self.turn_mut(device).is_none_or(|t| t.finishing()) {
                return; // the turn ended inside this read (an error event)
            }
            match self.settings.backend {
                Backend::OpenAi => self.on_chat_event(now, device, &event),
                Backend::Hermes => self.on_run_event(now, device, &event),
            }
        }
    }

    /// Ends the turn now with `note`: the call is dropped, and a Hermes run is told to stop
    /// (it would otherwise go on with nobody reading it).
    pub(super) fn cut(&mut self, device: &DeviceId, note: &str) {
        let run_going = self.turn_mut(device).is_some_and(|t| t.run().is_some() && !t.complete);
        if run_going {
            self.send_stop(device, false);
        }
        self.end_stream(device, Some(note));
    }

    pub(super) fn delta(&mut self, now: Time, device: &DeviceId, delta: &str) {
        let Some(turn) = self.turn_mut(device) else { return };
        if turn.coalescer.text().len() + delta.len() > MAX_REPLY_BYTES {
            let note = say::reply_too_long(MAX_REPLY_BYTES / 1024);
            return self.cut(device, &note);
        }
        if let Some(text) = turn.coalescer.push(now, delta) {
            let text = text.to_owned();
            turn.shown = true;
            let message = turn.message.clone();
            self.reply(device, message, text, false);
        }
    }

    fn on_call_end(&mut self, now: Time, role: CallRole, answer: Answer) {
        let status = answer.status.unwrap_or(0);
        match role {
            CallRole::Main(device) => {
                let started = match self.settings.backend {
                    Backend::OpenAi => self.chat_ended(&device, status, &answer),
                    Backend::Hermes => self.run_start_ended(&device, status, &answer),
                };
                if !started {
                    self.refused(now, &device, status, &answer);
                }
            }
            CallRole::Events(device) => {
                let whole = self.turn_mut(&device).is_some_and(|t| t.complete);
                if status == 200 && whole {
                    return self.end_stream(&device, None);
                }
                // A dropped event stream cannot be picked up again: the run is stopped
                // rather than left running (tools, approvals) with nobody reading it.
                let note = if status == 200 {
                    say::EVENTS_ENDED_EARLY.to_owned()
                } else {
                    status_outcome(status, None).0
                };
                self.cut(&device, &note);
            }
            CallRole::Approval { device, choice } => self.approval_answered(&device, &choice, status),
            CallRole::Stop { device, run, user } => self.stop_answered(&device, &run, user, status),
        }
    }

    /// A non-2xx answer to the main request: retried when safe, else one sentence.
    fn refused(&mut self, now: Time, device: &DeviceId, status: u16, answer: &Answer) {
        let (mut sentence, retry) = status_outcome(status, answer.retry_after.as_deref());
        if status == 0 {
            sentence = say::NOT_HTTP.into();
        }
        let (attempt, stopping) = self
            .turn_mut(device)
            .map_or((MAX_ATTEMPTS, false), |t| (t.attempt, t.stopping()));
        if stopping {
            return self.end_stream(device, None);
        }
        let wait = match retry {
            Retry::After(s) => Some(Duration::from_secs(s).min(MAX_RETRY_WAIT)),
            Retry::Backoff => Some(backoff(attempt)),
            Retry::No => None,
        };
        if let Some(wait) = wait.filter(|_| attempt < MAX_ATTEMPTS) {
            return self.retry_later(now, device, wait, &format!("status {status}"));
        }
        if let Some(detail) = error_detail(&answer.body) {
            sentence = format!("{sentence} ({detail})");
        }
        self.fail_turn(device, sentence);
    }

    fn retry_later(&mut self, now: Time, device: &DeviceId, wait: Duration, why: &str) {
        log::info!(
            "agent: {device:?}: retrying in {} ms ({})",
            wait.as_millis(),
            why.escape_debug()
        );
        if let Some(t) = self.turn_mut(device) {
            t.phase = TurnPhase::Waiting(now + wait);
        }
    }

    fn on_call_failed(&mut self, now: Time, role: CallRole, error: CallError) {
        match role {
            CallRole::Main(device) => {
                let Some(turn) = self.turn_mut(&device) else { return };
                let (shown, attempt, complete, stopping) = (turn.shown, turn.attempt, turn.complete, turn.stopping());
                if complete || stopping {
                    // All of it came (the connection broke after the end), or /stop.
                    return self.end_stream(&device, None);
                }
                if shown {
                    return self.end_stream(&device, Some(&say::interrupted(&error)));
                }
                if error.before_request() && attempt < MAX_ATTEMPTS {
                    return self.retry_later(now, &device, backoff(attempt), &error.to_string());
                }
                let sentence = say::call_failed(&error, &self.settings.endpoint);
                self.fail_turn(&device, sentence);
            }
            CallRole::Events(device) => {
                let Some(turn) = self.turn_mut(&device) else { return };
                if turn.complete {
                    return self.end_stream(&device, None);
                }
                self.cut(&device, &say::events_interrupted(&error));
            }
            CallRole::Approval { device, .. } => {
                let sentence = say::call_failed(&error, &self.settings.endpoint);
                self.say(&device, say::answer_lost(&sentence));
            }
            CallRole::Stop { device, run, user } => {
                if user {
                    let sentence = say::call_failed(&error, &self.settings.endpoint);
                    self.stop_failed(&device, &run, sentence);
                }
            }
        }
    }

    /// Stops the device's turn: a run is told to stop (its stream then ends), one not
    /// started yet is stopped once its id is known, and a chat stream is simply dropped
    /// (the server stops when its client goes).
    pub(super) fn stop_turn(&mut self, device: &DeviceId) {
        let calls = &self.calls;
        let Some(turn) = self.devices.get_mut(device).and_then(|d| d.turn.as_mut()) else {
            return;
        };
        let has_call = turn.call().is_some_and(|c| calls.contains_key(&c));
        turn.stop();
        let has_run = turn.run().is_some();
        match self.settings.backend {
            Backend::Hermes if has_run => self.send_stop(device, true),
            Backend::Hermes if has_call => {}
            _ => self.end_stream(device, None),
        }
    }

    /// Whether a second `/stop` during a stop is sent again: only a run has a stop request.
    pub(super) fn backend_stops_runs(&self) -> bool {
        self.settings.backend == Backend::Hermes
    }
}

fn role_name(role: &CallRole) -> &'static str {
    match role {
        CallRole::Main(_) => "the request",
        CallRole::Events(_) => "the run's event stream",
        CallRole::Approval { .. } => "the approval answer",
        CallRole::Stop { .. } => "the stop request",
    }
}

fn is_stream(head: &ResponseHead) -> bool {
    head.header("content-type")
        .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"))
}

/// 1 s, 2 s, 4 s… after attempt `n` (1-based).
fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1 << attempt.saturating_sub(1).min(5))
}

/// The `error.message` of an OpenAI-style error body, short and printable.
fn error_detail(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let message = v
        .pointer("/error/message")
        .or_else(|| v.get("error"))
        .or_else(|| v.get("detail"))
        .and_then(Value::as_str)?;
    let clean: String = message.chars().filter(|c| !c.is_control()).take(200).collect();
    (!clean.trim().is_empty()).then_some(clean)
}
