//! Hermes' runs API, as bytes (issue 11): `MOBILE_AGENT=hermes:<base URL>`.
//!
//! Facts (../shared/ref/hermes-agent-0.19.md): `POST /v1/runs` answers 202 with a
//! `run_id`; `GET /v1/runs/{id}/events` is an event stream of `data:` lines only, the
//! event's name in its JSON field `event`; approvals are answered with
//! `POST /v1/runs/{id}/approval {"choice"}` and a run is stopped with
//! `POST /v1/runs/{id}/stop`. The runs API loads no history by session, so every run
//! carries `conversation_history` itself. A dropped event stream cannot be re-attached.

use serde_json::Value;

use super::openai::{request_bytes, Endpoint};

/// A request to start a run: `input` is the user's message, `history` the earlier turns.
pub fn start_run(
    endpoint: &Endpoint,
    key: Option<&str>,
    headers: &[(String, String)],
    input: Value,
    history: Vec<Value>,
    instructions: Option<&str>,
    session_id: &str,
) -> Result<Vec<u8>, &'static str> {
    let mut body = serde_json::json!({
        "input": input,
        "conversation_history": history,
        "session_id": session_id,
    });
    if let Some(i) = instructions.filter(|i| !i.is_empty()) {
        body["instructions"] = Value::String(i.to_owned());
    }
    let path = format!("{}/runs", endpoint.base_path);
    request_bytes(
        "POST",
        &path,
        endpoint,
        key,
        headers,
        Some(&body.to_string()),
        "application/json",
    )
}

/// The run's event stream.
pub fn events(
    endpoint: &Endpoint,
    key: Option<&str>,
    headers: &[(String, String)],
    run: &RunId,
) -> Result<Vec<u8>, &'static str> {
    let path = format!("{}/runs/{}/events", endpoint.base_path, run.0);
    request_bytes("GET", &path, endpoint, key, headers, None, "text/event-stream")
}

/// The answer to the run's pending approval.
pub fn answer_approval(
    endpoint: &Endpoint,
    key: Option<&str>,
    headers: &[(String, String)],
    run: &RunId,
    choice: &str,
) -> Result<Vec<u8>, &'static str> {
    let path = format!("{}/runs/{}/approval", endpoint.base_path, run.0);
    let body = serde_json::json!({ "choice": choice }).to_string();
    request_bytes("POST", &path, endpoint, key, headers, Some(&body), "application/json")
}

/// `/stop` from the phone.
pub fn stop(
    endpoint: &Endpoint,
    key: Option<&str>,
    headers: &[(String, String)],
    run: &RunId,
) -> Result<Vec<u8>, &'static str> {
    let path = format!("{}/runs/{}/stop", endpoint.base_path, run.0);
    request_bytes("POST", &path, endpoint, key, headers, Some("{}"), "application/json")
}

/// A run id as Hermes gave it, checked before it goes into a request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunId(String);

impl RunId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Reads the 202 answer to [`start_run`].
pub fn parse_run_started(body: &[u8]) -> Result<RunId, &'static str> {
    let v: Value = serde_json::from_slice(body).map_err(|_| "the run was not started (the answer is not JSON)")?;
    let id = v
        .get("run_id")
        .and_then(Value::as_str)
        .ok_or("the run was not started (no run_id)")?;
    let ok =
        !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !ok {
        return Err("the run id is not one this gateway can use in a URL");
    }
    Ok(RunId(id.to_owned()))
}

/// What one event of a run means for the phone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEvent {
    /// More reply text.
    Delta(String),
    /// A tool began: the avatar thinks (decided in docs/design.md: no status line, so the
    /// reply is not cluttered; the avatar says the agent is working).
    ToolStarted {
        tool: String,
    },
    /// A dangerous command waits for the user.
    Approval {
        command: String,
        description: String,
        /// The options Hermes offers, in its order, from `once|session|always|deny`.
        choices: Vec<String>,
    },
    /// The run ended well; `output` is its whole text (used when no delta came).
    Completed {
        output: String,
    },
    Failed {
        error: String,
    },
    Cancelled,
    /// Known and of no use to the phone (`reasoning.available` repeats the text,
    /// `tool.completed`, `approval.responded`), or unknown.
    Ignored,
    /// Not JSON or not an object.
    Malformed,
}

/// Reads one `data:` payload of the run's event stream.
pub fn parse_run_event(data: &str) -> RunEvent {
    let Ok(v) = serde_json::from_str::<Value>(data.trim()) else {
        return RunEvent::Malformed;
    };
    let text = |key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    match v.get("event").and_then(Value::as_str) {
        Some("message.delta") => RunEvent::Delta(text("delta")),
        Some("tool.started") => RunEvent::ToolStarted { tool: text("tool") },
        Some("approval.request") => {
            let known = ["once", "session", "always", "deny"];
            let mut choices: Vec<String> = v
                .get("choices")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .filter(|c| known.contains(c))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            if choices.is_empty() {
                choices = vec!["once".into(), "deny".into()];
            } else if !choices.iter().any(|c| c == "deny") {
                choices.push("deny".into()); // the phone can always refuse
            }
            RunEvent::Approval {
                command: text("command"),
                description: text("description"),
                choices,
            }
        }
        Some("run.completed") => RunEvent::Completed { output: text("output") },
        Some("run.failed") => RunEvent::Failed {
            error: match v.get("error") {
                Some(Value::String(s)) => s.chars().take(300).collect(),
                Some(e) => e
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("the run failed")
                    .chars()
                    .take(300)
                    .collect(),
                None => "the run failed".into(),
            },
        },
        Some("run.cancelled") => RunEvent::Cancelled,
        Some(_) => RunEvent::Ignored,
        None => RunEvent::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> Endpoint {
        Endpoint::parse("http://127.0.0.1:8642/v1").unwrap()
    }

    #[test]
    fn a_run_carries_its_history_and_the_other_requests_name_it() {
        let e = endpoint();
        let history = vec![serde_json::json!({"role": "user", "content": "earlier"})];
        let req = start_run(
            &e,
            Some("k"),
            &[],
            "now".into(),
            history,
            Some("be brief"),
            "mobile:tel-1",
        )
        .unwrap();
        let req = String::from_utf8(req).unwrap();
        assert!(req.starts_with("POST /v1/runs HTTP/1.1\r\n"));
        let body: Value = serde_json::from_str(req.split_once("\r\n\r\n").unwrap().1).unwrap();
        assert_eq!(body["conversation_history"][0]["content"], "earlier");
        assert_eq!(body["input"], "now");
        let run = parse_run_started(br#"{"run_id":"run_ab12","status":"started"}"#).unwrap();
        assert!(String::from_utf8(events(&e, None, &[], &run).unwrap())
            .unwrap()
            .starts_with("GET /v1/runs/run_ab12/events HTTP/1.1\r\n"));
        let a = String::from_utf8(answer_approval(&e, None, &[], &run, "deny").unwrap()).unwrap();
        assert!(a.starts_with("POST /v1/runs/run_ab12/approval ") && a.ends_with(r#"{"choice":"deny"}"#));
        assert!(String::from_utf8(stop(&e, None, &[], &run).unwrap())
            .unwrap()
            .starts_with("POST /v1/runs/run_ab12/stop "));
    }

    #[test]
    fn run_ids_that_could_change_the_path_are_refused() {
        for bad in [
            &br#"{"run_id":"../x"}"#[..],
            br#"{"run_id":"a b"}"#,
            br#"{"run_id":""}"#,
            b"{}",
            b"nope",
        ] {
            assert!(parse_run_started(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn events_map_to_what_the_phone_needs() {
        assert_eq!(
            parse_run_event(r#"{"event":"message.delta","delta":"Hi"}"#),
            RunEvent::Delta("Hi".into())
        );
        assert_eq!(
            parse_run_event(r#"{"event":"tool.started","tool":"terminal","preview":"rm"}"#),
            RunEvent::ToolStarted {
                tool: "terminal".into()
            }
        );
        assert_eq!(
            parse_run_event(
                r#"{"event":"approval.request","command":"rm -rf x","description":"delete","choices":["once","session","deny","bogus"]}"#
            ),
            RunEvent::Approval {
                command: "rm -rf x".into(),
                description: "delete".into(),
                choices: vec!["once".into(), "session".into(), "deny".into()]
            }
        );
        assert!(matches!(
            parse_run_event(r#"{"event":"approval.request","command":"x","choices":["once"]}"#),
            RunEvent::Approval { choices, .. } if choices == ["once", "deny"]
        ));
        assert_eq!(
            parse_run_event(r#"{"event":"reasoning.available","text":"Hi"}"#),
            RunEvent::Ignored
        );
        assert_eq!(
            parse_run_event(r#"{"event":"run.completed","output":"Hi"}"#),
            RunEvent::Completed { output: "Hi".into() }
        );
        assert_eq!(
            parse_run_event(r#"{"event":"run.failed","error":"boom"}"#),
            RunEvent::Failed { error: "boom".into() }
        );
        assert_eq!(parse_run_event(r#"{"event":"run.cancelled"}"#), RunEvent::Cancelled);
        assert_eq!(parse_run_event("not json"), RunEvent::Malformed);
        assert_eq!(parse_run_event(r#"{"delta":"no name"}"#), RunEvent::Malformed);
    }
}
