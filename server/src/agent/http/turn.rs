//! One turn of a device: its message, the reply being streamed, and where the turn is,
//! as one [`TurnPhase`] rather than a set of flags and optional ids (issue 17).

use hermes_mobile::upstream::{Coalescer, RunId, SseDecoder};
use hermes_mobile::{MessageId, Time};

use super::input::Input;
use super::MAX_EVENT_BYTES;
use crate::agent::io::CallId;

/// Where a turn is. The ids a phase carries are the turn's latest; whether a call is still
/// open is the agent's call table's to say (an ended call leaves it at once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TurnPhase {
    /// The next attempt of the main request is due at this time (the first one, at once).
    Waiting(Time),
    /// The main request is out: the chat stream (`openai:`), or the run's start (`hermes:`).
    Calling(CallId),
    /// `hermes:` the run is going and its event stream is open.
    Streaming { run: RunId, events: CallId },
    /// `/stop` was asked for, or the run was cancelled: the answer ends as stopped. `call`
    /// and `run` are the request and the run, as far as they are known yet.
    Stopping { call: Option<CallId>, run: Option<RunId> },
    /// The final reply is out; this many of its parts (the reply, then each file being
    /// read for it) are still to finish.
    Finishing { left: usize },
}

#[derive(Debug)]
pub(super) struct Turn {
    pub input: Input,
    pub message: MessageId,
    pub started: Time,
    pub coalescer: Coalescer,
    pub sse: SseDecoder,
    /// Attempts of the main request made so far.
    pub attempt: u32,
    pub phase: TurnPhase,
    /// A version of the reply was handed to the core: no retry after this.
    pub shown: bool,
    /// The stream said it was complete (`[DONE]`, a finish reason, `run.completed`).
    pub complete: bool,
    /// The model stopped at its length limit (`finish_reason: length`).
    pub length_cut: bool,
    /// The run's whole output from `run.completed`, or a non-streamed completion.
    pub output: Option<String>,
}

impl Turn {
    pub fn new(input: Input, message: MessageId, now: Time, coalescer: Coalescer) -> Turn {
        Turn {
            input,
            message,
            started: now,
            coalescer,
            sse: SseDecoder::new(MAX_EVENT_BYTES),
            attempt: 0,
            phase: TurnPhase::Waiting(now),
            shown: false,
            complete: false,
            length_cut: false,
            output: None,
        }
    }

    pub fn finishing(&self) -> bool {
        matches!(self.phase, TurnPhase::Finishing { .. })
    }

    pub fn stopping(&self) -> bool {
        matches!(self.phase, TurnPhase::Stopping { .. })
    }

    /// The Hermes run, once it is known.
    pub fn run(&self) -> Option<&RunId> {
        match &self.phase {
            TurnPhase::Streaming { run, .. } | TurnPhase::Stopping { run: Some(run), .. } => Some(run),
            _ => None,
        }
    }

    /// The turn's latest call (open or just ended).
    pub fn call(&self) -> Option<CallId> {
        match self.phase {
            TurnPhase::Calling(call)
            | TurnPhase::Streaming { events: call, .. }
            | TurnPhase::Stopping { call: Some(call), .. } => Some(call),
            _ => None,
        }
    }

    /// When an attempt of the main request is due.
    pub fn retry_at(&self) -> Option<Time> {
        match self.phase {
            TurnPhase::Waiting(at) => Some(at),
            _ => None,
        }
    }

    /// The main request went out as `call`: a new attempt, with a fresh decoder.
    pub fn calling(&mut self, call: CallId) {
        self.phase = TurnPhase::Calling(call);
        self.attempt += 1;
        self.sse = SseDecoder::new(MAX_EVENT_BYTES);
    }

    /// The run started and its events are asked for with `events`; a stop asked for
    /// meanwhile stays asked for. Whether the run is to be stopped now.
    pub fn streaming(&mut self, run: RunId, events: CallId) -> bool {
        self.sse = SseDecoder::new(MAX_EVENT_BYTES);
        let stop_now = self.stopping();
        self.phase = if stop_now {
            TurnPhase::Stopping {
                call: Some(events),
                run: Some(run),
            }
        } else {
            TurnPhase::Streaming { run, events }
        };
        stop_now
    }

    /// `/stop`, or the run's cancellation: what is known of the call and the run stays.
    pub fn stop(&mut self) {
        let (call, run) = (self.call(), self.run().cloned());
        self.phase = TurnPhase::Stopping { call, run };
    }

    /// The stop did not reach Hermes: the run streams on.
    pub fn stop_failed(&mut self) {
        if let TurnPhase::Stopping {
            call: Some(events),
            run: Some(run),
        } = &self.phase
        {
            self.phase = TurnPhase::Streaming {
                run: run.clone(),
                events: *events,
            };
        }
    }
}
