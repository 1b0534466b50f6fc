//! The `openai:` backend: any OpenAI-compatible chat-completions server. The request
//! carries the conversation (unless the server keeps it, as Hermes does with its session
//! header), and the answer is a stream of chunks, or one whole completion from a server
//! that ignored `stream: true`.

use hermes_mobile::upstream::{parse_stream_data, ChatRequest, History, SseEvent, StreamItem};
use hermes_mobile::{DeviceId, Time};
use serde_json::{json, Value};

use super::sentences as say;
use super::{Answer, HttpAgent};

impl HttpAgent {
    /// The chat request of the device's turn; `None` without a turn.
    pub(super) fn chat_request(&self, device: &DeviceId) -> Option<Result<Vec<u8>, String>> {
        let keeps = self.server_keeps_history();
        let headers = self.headers_for(device);
        let d = self.devices.get(device)?;
        let turn = d.turn.as_ref()?;
        let mut messages = if keeps {
            History::system_message(self.settings.system.as_deref())
                .into_iter()
                .collect()
        } else {
            d.history.messages(self.settings.system.as_deref())
        };
        messages.push(json!({"role": "user", "content": turn.input.content()}));
        let request = ChatRequest {
            endpoint: &self.settings.endpoint,
            model: &self.settings.model,
            key: self.settings.key.as_deref(),
            headers: &headers,
            messages,
            temperature: self.settings.temperature,
        };
        Some(request.to_bytes().map_err(|why| why.to_string()))
    }

    /// Hermes loads the history itself when its session header is set: then only the new
    /// turn is sent (docs/http-agents.md).
    fn server_keeps_history(&self) -> bool {
        self.settings
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("X-Hermes-Session-Id"))
    }

    /// One event of the chat stream.
    pub(super) fn on_chat_event(&mut self, now: Time, device: &DeviceId, event: &SseEvent) {
        if !event.event.is_empty() && event.event != "message" {
            // hermes.tool.progress and the like: the avatar already thinks.
            return;
        }
        match parse_stream_data(&event.data) {
            StreamItem::Delta(d) => self.delta(now, device, &d),
            StreamItem::Finished(reason) => {
                if let Some(t) = self.turn_mut(device) {
                    t.complete = true;
                    t.length_cut = reason == "length";
                }
            }
            // The answer is whole: the turn ends now, whether or not the server closes
            // the connection.
            StreamItem::Done => {
                if let Some(t) = self.turn_mut(device) {
                    t.complete = true;
                }
                self.end_stream(device, None);
            }
            StreamItem::Error(message) => self.cut(device, &say::model_error(&message)),
            StreamItem::Malformed => log::warn!(
                "agent: a stream event is not a chat chunk: {:?}",
                event.data.chars().take(120).collect::<String>()
            ),
        }
    }

    /// The chat request's answer ended; whether it was a 200 (the turn then ends).
    pub(super) fn chat_ended(&mut self, device: &DeviceId, status: u16, answer: &Answer) -> bool {
        if status != 200 {
            return false;
        }
        if !answer.stream {
            // A server that ignored `stream: true`: one whole completion.
            let whole = serde_json::from_slice::<Value>(&answer.body).ok().and_then(|v| {
                v.pointer("/choices/0/message/content")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
            if let Some(t) = self.turn_mut(device) {
                t.complete = whole.is_some();
                t.output = whole;
            }
        }
        self.end_stream(device, None);
        true
    }
}
