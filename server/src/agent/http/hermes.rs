//! The `hermes:` backend: Hermes' runs API. A turn starts a run (with the conversation),
//! then reads the run's event stream; approvals become `exec_approval` cards whose answers
//! (or expiry: deny) are posted back; `/stop` and a lost stream stop the run.

use hermes_mobile::upstream::{hermes_runs, parse_run_event, parse_run_started, RunEvent, RunId, SseEvent};
use hermes_mobile::{AgentCommand, DeviceId, PromptId, PromptRequest, Time};
use serde_json::{json, Value};

use super::sentences as say;
use super::{header_value, Answer, CallRole, HttpAgent};

/// An approval card: what its answer is for. Kept until the card is answered or expires,
/// also when its turn has ended (the phone may still tap it).
#[derive(Debug)]
pub(super) struct Card {
    device: DeviceId,
    run: RunId,
    /// For `{conversation}` in the headers, should the device be let go meanwhile.
    conversation: u64,
}

impl HttpAgent {
    /// The run's start for the device's turn; `None` without a turn.
    pub(super) fn run_request(&self, device: &DeviceId) -> Option<Result<Vec<u8>, String>> {
        let headers = self.headers_for(device);
        let d = self.devices.get(device)?;
        let turn = d.turn.as_ref()?;
        let input = match turn.input.content() {
            Value::String(s) => Value::String(s),
            parts => json!([{"role": "user", "content": parts}]),
        };
        let session = format!("mobile-{}-{}", header_value(device.as_str()), d.conversation);
        let request = hermes_runs::start_run(
            &self.settings.endpoint,
            self.settings.key.as_deref(),
            &headers,
            input,
            d.history.messages(None),
            self.settings.system.as_deref(),
            &session,
        );
        Some(request.map_err(|why| why.to_string()))
    }

    /// The run's start was answered; whether it was a 200 or 202 (the run goes on).
    pub(super) fn run_start_ended(&mut self, device: &DeviceId, status: u16, answer: &Answer) -> bool {
        if status != 200 && status != 202 {
            return false;
        }
        match parse_run_started(&answer.body) {
            Ok(run) => self.open_events(device, run),
            Err(why) => self.fail_turn(device, say::run_not_started(why)),
        }
        true
    }

    fn open_events(&mut self, device: &DeviceId, run: RunId) {
        let headers = self.headers_for(device);
        let request = hermes_runs::events(&self.settings.endpoint, self.settings.key.as_deref(), &headers, &run);
        log::info!("agent: {device:?}: run {} started", run.as_str());
        match request {
            Ok(bytes) => {
                let id = self.new_call(CallRole::Events(device.clone()), bytes);
                let Some(turn) = self.turn_mut(device) else { return };
                if turn.streaming(run, id) {
                    self.send_stop(device, true);
                }
            }
            Err(why) => self.fail_turn(device, say::request_not_made(why)),
        }
    }

    /// One event of the run's stream.
    pub(super) fn on_run_event(&mut self, now: Time, device: &DeviceId, event: &SseEvent) {
        match parse_run_event(&event.data) {
            RunEvent::Delta(d) => self.delta(now, device, &d),
            RunEvent::ToolStarted { tool } => {
                log::debug!("agent: {device:?}: tool {:?} started", tool);
                self.out.push_back(AgentCommand::Avatar {
                    device: device.clone(),
                    state: "thinking".into(),
                });
                self.out.push_back(AgentCommand::Typing { device: device.clone() });
            }
            RunEvent::Approval {
                command,
                description,
                choices,
            } => self.open_approval(device, command, description, choices),
            RunEvent::Completed { output } => {
                if let Some(t) = self.turn_mut(device) {
                    t.complete = true;
                    t.output = Some(output);
                }
                self.end_stream(device, None);
            }
            RunEvent::Failed { error } => {
                if let Some(t) = self.turn_mut(device) {
                    t.complete = true; // the run is over: nothing to stop
                }
                self.cut(device, &say::hermes_error(&error));
            }
            RunEvent::Cancelled => {
                if let Some(t) = self.turn_mut(device) {
                    t.complete = true;
                    t.stop();
                }
                self.end_stream(device, None);
            }
            RunEvent::Ignored => {}
            RunEvent::Malformed => log::warn!(
                "agent: a run event is not JSON: {:?}",
                event.data.chars().take(120).collect::<String>()
            ),
        }
    }

    fn open_approval(&mut self, device: &DeviceId, command: String, description: String, choices: Vec<String>) {
        let Some(run) = self.turn_mut(device).and_then(|t| t.run().cloned()) else {
            return;
        };
        let prompt = PromptId(self.id("approval"));
        let conversation = self.devices.get(device).map_or(1, |d| d.conversation);
        self.cards.insert(
            prompt.clone(),
            Card {
                device: device.clone(),
                run,
                conversation,
            },
        );
        let description = if description.is_empty() {
            "dangerous command".to_owned()
        } else {
            description
        };
        self.out.push_back(AgentCommand::OpenPrompt {
            device: device.clone(),
            prompt,
            request: PromptRequest::ExecApproval {
                command,
                description,
                options: choices,
            },
            ttl_secs: Some(self.settings.approval_ttl),
        });
    }

    /// Posts the answer to a card (`deny` on expiry or when it never reached the phone).
    pub(super) fn answer_card(&mut self, prompt: &PromptId, choice: &str, expired: bool) {
        let Some(card) = self.cards.remove(prompt) else { return };
        let still_running = self
            .devices
            .get(&card.device)
            .and_then(|d| d.turn.as_ref())
            .is_some_and(|t| t.run() == Some(&card.run) && !t.finishing());
        if expired && still_running {
            self.say(&card.device, say::CARD_EXPIRED.into());
        }
        let headers = self.headers_with(&card.device, card.conversation);
        // Posted also when the run is over: Hermes answers 409, which closes it quietly.
        match hermes_runs::answer_approval(
            &self.settings.endpoint,
            self.settings.key.as_deref(),
            &headers,
            &card.run,
            choice,
        ) {
            Ok(bytes) => {
                let role = CallRole::Approval {
                    device: card.device,
                    choice: choice.to_owned(),
                };
                self.new_call(role, bytes);
            }
            Err(why) => log::warn!("agent: the approval answer could not be made: {why}"),
        }
    }

    pub(super) fn approval_answered(&mut self, device: &DeviceId, choice: &str, status: u16) {
        match status {
            200..=299 if choice == "always" => self.say(device, say::APPROVED_ALWAYS.into()),
            200..=299 => {}
            // Already answered, timed out in Hermes, or the run is over: closed quietly.
            409 => log::info!("agent: {device:?}: the approval was no longer pending (409)"),
            _ => {
                let (sentence, _) = hermes_mobile::upstream::status_outcome(status, None);
                self.say(device, say::answer_lost(&sentence));
            }
        }
    }

    pub(super) fn send_stop(&mut self, device: &DeviceId, user: bool) {
        let headers = self.headers_for(device);
        let Some(run) = self.turn_mut(device).and_then(|t| t.run().cloned()) else {
            return;
        };
        match hermes_runs::stop(&self.settings.endpoint, self.settings.key.as_deref(), &headers, &run) {
            Ok(bytes) => {
                let role = CallRole::Stop {
                    device: device.clone(),
                    run,
                    user,
                };
                self.new_call(role, bytes);
            }
            Err(why) => log::warn!("agent: the stop request could not be made: {why}"),
        }
    }

    pub(super) fn stop_answered(&mut self, device: &DeviceId, run: &RunId, user: bool, status: u16) {
        if !(200..=299).contains(&status) && status != 409 {
            log::warn!("agent: {device:?}: stop of run {} answered {status}", run.as_str());
            if user {
                self.stop_failed(device, run, format!("Hermes answered {status}"));
            }
        }
    }

    /// The stop did not reach Hermes: say so, and let a later `/stop` try again.
    pub(super) fn stop_failed(&mut self, device: &DeviceId, run: &RunId, why: String) {
        let current = self.turn_mut(device).filter(|t| t.run() == Some(run) && !t.finishing());
        let Some(t) = current else {
            return; // that run's turn is over
        };
        t.stop_failed();
        self.say(device, say::stop_lost(&why));
    }
}
