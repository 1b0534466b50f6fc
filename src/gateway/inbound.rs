//! What the app sends: `hello`, then user frames.

use std::borrow::Cow;

use super::timers::TimerKey;
use super::{AvatarState, ConnState, Gateway, Output};
use crate::agent::{AgentEvent, Audio, UserInfo};
use crate::auth::{authorize, Access, Role};
use crate::base64::{decode_bounded, BoundedDecodeError};
use crate::ids::{ConnId, DeviceId};
use crate::limits::{CLOSE_NORMAL, MAX_AUDIO_BYTES, MIN_UPLOAD_BYTES_SHARE};
use crate::prompts::Closed;
use crate::time::Time;
use crate::uploads::ChunkOutcome;
use crate::wire::client::{AudioFrame, ClientFrame, Hello, MediaChunk, PromptAnswer};
use crate::wire::server::{encode, Avatar, Pong, PushCapability, Ready, Typing, WebPushCapability};
use crate::wire::{parse_client_frame, ErrorCode, Rejection};

impl Gateway {
    /// One whole WebSocket message, text or binary (G6).
    pub fn handle_message(&mut self, now: Time, conn: ConnId, bytes: &[u8]) {
        self.now = self.now.max(now);
        let Some(c) = self.conns.get(&conn) else {
            log::debug!("{conn:?}: message for a closed connection ignored");
            return;
        };
        let parsed = parse_client_frame(bytes);
        match &c.state {
            ConnState::AwaitingHello => match parsed {
                Ok(ClientFrame::Hello(hello)) => self.on_hello(now, conn, hello),
                // G4: anything else first is fatal `bad_frame`.
                Ok(_) => self.fail(conn, Rejection::bad_frame("first frame must be hello")),
                Err(r) if r.code == ErrorCode::BadFrame => self.fail(conn, r),
                Err(r) => self.fail(
                    conn,
                    Rejection::bad_frame("first frame must be hello").with_id(r.id.as_deref()),
                ),
            },
            ConnState::Ready { device, role, owner } => {
                let (device, role, owner) = (device.clone(), *role, *owner);
                match parsed {
                    Ok(ClientFrame::Devices { id }) => self.on_devices(conn, owner, &id),
                    Ok(ClientFrame::Revoke { id, device }) => self.on_revoke(now, conn, owner, &id, &device),
                    Ok(frame) => self.on_frame(now, conn, device, role, frame),
                    Err(r) => self.send_error(conn, &r, false),
                }
            }
        }
    }

    fn on_hello(&mut self, now: Time, conn: ConnId, hello: Hello<'_>) {
        let device = match self.hello_device(conn, &hello.device_id) {
            Ok(device) => device,
            Err(r) => return self.fail(conn, r),
        };
        let Access { role, owner } = match self.authorize_throttled(now, conn, &hello.token, &device) {
            Ok(access) => access,
            Err(r) => return self.fail(conn, r),
        };
        let name = if hello.device_name.is_empty() {
            device.as_str().to_owned()
        } else {
            hello.device_name.into_owned()
        };
        if role == Role::Device {
            // H5: the newest connection of a device wins.
            let previous = self.devices.get(&device).and_then(|d| d.conn);
            if let Some(old) = previous.filter(|old| *old != conn) {
                log::info!("device {device:?}: {old:?} replaced by {conn:?}");
                self.close(old, CLOSE_NORMAL, "replaced");
            }
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = ConnState::Ready {
                device: device.clone(),
                role,
                owner,
            };
        }
        let ready = self.ready_frame(&device, &name, role);
        self.send(conn, ready);
        self.outputs.push_back(Output::Authenticated {
            conn,
            device: device.clone(),
            service: role.is_service(),
        });
        if role.is_service() {
            return; // S2: never addressable.
        }
        let user = UserInfo {
            id: hello.user_id.into_owned(),
            name: hello.user_name.into_owned(),
        };
        self.device_online(now, conn, &device, name, user, hello.resume_after);
    }

    /// The device a `hello` names: its own id, or a new one when it gave none.
    fn hello_device(&mut self, conn: ConnId, id: &str) -> Result<DeviceId, Rejection> {
        if id.trim().is_empty() {
            return Ok(self.ids.device_id());
        }
        if let Some(problem) = crate::hidden::device_id_problem(id) {
            // L50: no look-alike of another device (`tel-1 `, `tel-\u{202E}1`).
            log::info!("{conn:?}: hello refused: {problem}: {id:?}");
            return Err(Rejection::bad_frame(problem));
        }
        Ok(DeviceId(id.to_owned()))
    }

    /// `ready`, with what this gateway offers (push, history) and the device's seq (L56).
    fn ready_frame(&self, device: &DeviceId, name: &str, role: Role) -> String {
        let mut ready = Ready::new(device.as_str(), name, &self.config.avatar_url);
        ready.capabilities.push = self.config.push.as_ref().and_then(|p| {
            p.vapid_public_key.clone().map(|key| PushCapability {
                webpush: WebPushCapability { vapid_public_key: key },
                actions: Some(p.actions.to_owned()),
            })
        });
        if role == Role::Device {
            ready.seq = self.latest_safe_seq(device);
            ready.capabilities.history =
                self.config
                    .journal
                    .filter(|j| j.history)
                    .map(|j| crate::wire::server::HistoryCapability {
                        items: j.items,
                        days: j.days,
                    });
        }
        encode("ready", &ready)
    }

    /// A device is reachable on `conn`: the agent hears it, and the device gets what waits
    /// for it, from the journal after `resume_after` (L58) or else its open cards and held
    /// output (H5, P1, M4).
    fn device_online(
        &mut self,
        now: Time,
        conn: ConnId,
        device: &DeviceId,
        name: String,
        user: UserInfo,
        resume_after: Option<u64>,
    ) {
        self.push.touch(device);
        self.paired_seen(device);
        let d = self.device_entry(device);
        d.conn = Some(conn);
        d.name = name;
        d.user = user;
        let online = AgentEvent::DeviceOnline {
            device: device.clone(),
            name: d.name.clone(),
            user: d.user.clone(),
        };
        self.event(online);
        self.top_up_seqs(device);
        if let (Some(after), true) = (resume_after, self.journal_on()) {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.resumed = true;
            }
            // Before the replay, which carries these closings only while the journal keeps
            // closed cards (history on: L65), and before any card opened since under the
            // same id: the old card closes first, and the new one is a new card.
            let replayed = self.history_on();
            self.send_unseen(conn, device, replayed);
            return self.begin_replay(conn, device, after);
        }
        let unsafe_seqs = self.latest_safe_seq(device) != self.latest_seq(device);
        if unsafe_seqs {
            // L57: held output after a restart carries seqs not yet reserved on disk; it
            // goes once they are (or once the reservation failed: L62), and stays in the
            // hold until then, so a connection gone before loses none of it.
            self.hold_back(conn);
        }
        let cards: Vec<String> = self
            .prompts
            .for_device(device)
            .iter()
            .map(|c| super::journal::stamp(vec![c.frame(now)], c.journal_seq).remove(0))
            .collect();
        // How cards closed while away first: one reopened since under the same id then
        // comes as a new card, never as the old one still open (L65).
        self.send_unseen(conn, device, false);
        for frame in cards {
            self.send(conn, frame);
        }
        match self.conns.get_mut(&conn) {
            Some(c) if unsafe_seqs => c.hold_on_release = true,
            _ => self.flush_hold(conn, device),
        }
    }

    /// H1–H3 behind L52's throttle: a blocked address is refused without its token being
    /// looked at, so a block is never a guess; an `auth_failed` counts against it.
    fn authorize_throttled(
        &mut self,
        now: Time,
        conn: ConnId,
        token: &str,
        device: &DeviceId,
    ) -> Result<Access, Rejection> {
        let source = self.conns.get(&conn).map(|c| c.peer.source).unwrap_or_default();
        self.authorize_from(now, source, token, device)
    }

    /// [`Gateway::authorize_throttled`] for a source address: a `hello`'s, or a `/files/`
    /// request's (L63), whose failures count the same.
    pub(super) fn authorize_from(
        &mut self,
        now: Time,
        source: crate::throttle::SourceKey,
        token: &str,
        device: &DeviceId,
    ) -> Result<Access, Rejection> {
        if let Some(left) = self.throttle.blocked(source, now) {
            let message = format!(
                "too many failed attempts; try again in {} s",
                left.as_millis().div_ceil(1000)
            );
            return Err(Rejection::new(ErrorCode::AuthFailed, message));
        }
        let verdict = authorize(&self.config, &self.pairing.tokens, token, device.as_str());
        if verdict.as_ref().is_err_and(|r| r.code == ErrorCode::AuthFailed) {
            if let Some(block) = self.throttle.record_failure(source, now) {
                log::warn!("failed hellos from one address; refusing it for {block:?} (L52)");
            }
            self.arm_sweep(now);
        }
        verdict
    }

    fn on_frame(&mut self, now: Time, conn: ConnId, device: DeviceId, role: Role, frame: ClientFrame<'_>) {
        let user_frame = matches!(
            frame,
            ClientFrame::Text(_)
                | ClientFrame::Audio(_)
                | ClientFrame::Media(_)
                | ClientFrame::Prompt(_)
                | ClientFrame::PushSubscribe(_)
                | ClientFrame::PushUnsubscribe { .. }
                | ClientFrame::PushTest { .. }
                | ClientFrame::History { .. }
                | ClientFrame::Forget { .. }
        );
        if user_frame && role.is_service() {
            // S2: a service connection has no session for the agent to answer.
            let r = Rejection::new(ErrorCode::Forbidden, "service connections may only deliver");
            return self.send_error(conn, &r, false);
        }
        match frame {
            ClientFrame::Hello(_) => self.send_error(conn, &Rejection::bad_frame("repeated hello"), false),
            ClientFrame::Text(t) => {
                if self.duplicate(now, conn, &device, &t.id) {
                    return;
                }
                let message = UserMessage {
                    text: Some(t.text.into_owned()),
                    audio: None,
                    file: None,
                };
                self.accept_message(now, conn, &device, &t.id, message);
            }
            ClientFrame::Audio(a) => self.on_audio(now, conn, &device, a),
            ClientFrame::Media(m) => self.on_media(now, conn, &device, m),
            ClientFrame::Prompt(p) => self.on_prompt(now, conn, &device, p),
            ClientFrame::Typing => self.event(AgentEvent::UserTyping { device }),
            ClientFrame::Ping { ts } => self.send(conn, encode("pong", &Pong { ts })),
            ClientFrame::Ack { .. } => {}
            ClientFrame::Deliver(d) => self.on_deliver(now, conn, &device, role, d),
            ClientFrame::PushSubscribe(p) => self.on_push_subscribe(conn, &device, p),
            ClientFrame::PushUnsubscribe { id } => self.on_push_unsubscribe(conn, &device, &id),
            ClientFrame::PushTest { id } => self.on_push_test(conn, &device, &id),
            ClientFrame::History { id, before, limit } => self.on_history(conn, &device, &id, before, limit),
            ClientFrame::Forget { id } => self.on_forget(conn, &device, &id),
            // Answered before the role is looked at (handle_message): owners only.
            ClientFrame::Devices { .. } | ClientFrame::Revoke { .. } => {}
            ClientFrame::Unknown(t) => log::debug!("{conn:?}: ignored frame of unknown type {t:?} (G3)"),
        }
    }

    /// I2: a `text`/`audio`/`media` seen within the window is dropped, and confirmed again
    /// with `received` to a client that resumed (L58).
    fn duplicate(&mut self, now: Time, conn: ConnId, device: &DeviceId, id: &str) -> bool {
        let Some(seq) = self.seen.get(now, device, id).copied() else {
            return false;
        };
        log::debug!("device {device:?}: duplicate {id:?} dropped (I2)");
        self.confirm_received(conn, id, seq);
        true
    }

    /// Records the id, tells the agent, and starts the turn (M3 step 1).
    fn accept_message(&mut self, now: Time, conn: ConnId, device: &DeviceId, id: &str, message: UserMessage) {
        let UserMessage {
            text,
            mut audio,
            mut file,
        } = message;
        let bytes = text.as_ref().map_or(0, String::len)
            + audio.as_ref().map_or(0, |a| a.data.len())
            + file.as_ref().map_or(0, |f| f.data.len());
        if !self.gate_has_room(bytes) {
            // Not kept, not seen (I2): the phone gets no `received` and may send it again.
            log::warn!("device {device:?}: message {id:?} refused, the journal's disk is behind");
            let busy = Rejection::new(
                ErrorCode::InternalError,
                "the gateway's disk is behind; send it again shortly",
            );
            return self.send_error(conn, &busy.with_id(Some(id)), false);
        }
        self.name_upload(device, &mut audio, &mut file);
        let seq = self.keep_user_message(now, device, id, || user_body(id, &text, &audio, &file));
        self.seen.insert(now, device, id, seq);
        self.arm_sweep(now);
        let user = self.devices.get(device).map(|d| d.user.clone()).unwrap_or_default();
        self.event_after_commit(AgentEvent::MessageReceived {
            device: device.clone(),
            id: id.to_owned(),
            user,
            text,
            audio,
            file,
            redelivered: false,
        });
        // After the event's owed row: `received` promises the agent will have it (L58, L64),
        // whatever the order in which the store groups its commits.
        self.confirm_received(conn, id, seq);
        let Some(d) = self.devices.get_mut(device) else { return };
        d.avatar = AvatarState::Thinking;
        d.idle_at = None;
        if let Some(conn) = d.conn {
            self.send(
                conn,
                encode(
                    "avatar",
                    &Avatar {
                        state: Cow::Borrowed("thinking"),
                    },
                ),
            );
            self.send(conn, encode("typing", &Typing { stop: false }));
        }
    }

    fn on_audio(&mut self, now: Time, conn: ConnId, device: &DeviceId, a: AudioFrame<'_>) {
        if self.duplicate(now, conn, device, &a.id) {
            return;
        }
        let fail = |r: Rejection| r.with_id(Some(&a.id));
        let data = match decode_bounded(&a.data, MAX_AUDIO_BYTES) {
            Ok(data) => data,
            Err(BoundedDecodeError::TooBig) => {
                return self.send_error(conn, &fail(Rejection::too_big("audio is over 8 MiB")), false)
            }
            Err(BoundedDecodeError::Invalid) => {
                return self.send_error(conn, &fail(Rejection::bad_frame("data is not valid base64")), false)
            }
        };
        if data.is_empty() {
            return self.send_error(conn, &fail(Rejection::bad_frame("audio is empty")), false);
        }
        let audio = Audio {
            format: a.format,
            data,
            media_name: None,
        };
        let message = UserMessage {
            text: a.text.map(Cow::into_owned),
            audio: Some(audio),
            file: None,
        };
        self.accept_message(now, conn, device, &a.id, message);
    }

    fn on_media(&mut self, now: Time, conn: ConnId, device: &DeviceId, m: MediaChunk<'_>) {
        // I2: once a file completed, its chunks are dropped and open no buffer.
        if self.duplicate(now, conn, device, &m.id) {
            return;
        }
        let Some(c) = self.conns.get_mut(&conn) else { return };
        let before = c.uploads.footprint();
        let totals = &self.upload_totals;
        // L51: every open upload together stays inside its share of the memory budget,
        // however many device ids a peer mints: their bytes (and bookkeeping) within what
        // the share leaves beside L31's room, which is bounded on its own. The part's
        // decoded size is at most 3/4 of its base64 (white space only makes it smaller, L11).
        // The bytes always have room for one whole upload of one device (U2's 8 MiB and its
        // bookkeeping), however small the budget: a phone alone can always send its file.
        let part = m.data.len() / 4 * 3 + 3;
        let bytes_cap = self
            .config
            .max_upload_total
            .saturating_sub(self.config.max_upload_speculation)
            .max(MIN_UPLOAD_BYTES_SHARE);
        let room = self.config.max_upload_total.saturating_sub(totals.held() + part);
        let bytes_held = totals.held() - totals.speculative();
        if m.parts > 1 && bytes_held + part > bytes_cap {
            c.uploads.abandon(&m.id);
            self.upload_totals.update(before, c.uploads.footprint());
            log::warn!(
                "{conn:?}: upload {:?} refused: a part of {part} bytes on top of the {bytes_held} unfinished uploads hold passes their {bytes_cap} (L51, MOBILE_MEMORY_BUDGET)",
                m.id,
            );
            let r = Rejection::too_big("the gateway holds too many unfinished uploads; try again later");
            return self.send_error(conn, &r.with_id(Some(&m.id)), false);
        }
        // L31: this connection may use what the others leave of the shared room.
        let others = totals.speculative() - before.speculative;
        let shared = self.config.max_upload_speculation.saturating_sub(others).min(room);
        let outcome = c.uploads.accept_within(now, &m, shared);
        self.upload_totals.update(before, c.uploads.footprint());
        match c.uploads.next_deadline(self.config.upload_stall) {
            Some(next) => self.timers.arm(&mut c.stall_slot, next, TimerKey::Uploads(conn)),
            None => c.stall_slot = None,
        }
        match outcome {
            Ok(ChunkOutcome::Stored) | Ok(ChunkOutcome::Repeated) => {}
            Ok(ChunkOutcome::Completed(file)) => {
                let text = (file.kind == crate::wire::UploadKind::Audio)
                    .then(|| file.caption.clone())
                    .flatten();
                let id = file.id.clone();
                let message = UserMessage {
                    text,
                    audio: None,
                    file: Some(file),
                };
                self.accept_message(now, conn, device, &id, message);
            }
            Err(r) => self.send_error(conn, &r.with_id(Some(&m.id)), false),
        }
    }

    fn on_prompt(&mut self, now: Time, conn: ConnId, device: &DeviceId, p: PromptAnswer<'_>) {
        let id = p.prompt_id.as_ref();
        let Some(card) = self.prompts.get(id) else {
            // P4: a repeat gets the same prompt_done; anything else is unknown or expired.
            let frame = match self.prompts.closed(now, device, id) {
                Some(closed) => closed.frame(id),
                None => Closed {
                    option_id: None,
                    expired: true,
                }
                .frame(id),
            };
            return self.send(conn, frame);
        };
        if card.expires_at <= now {
            // Its TTL has passed and only the timer has not run yet: it expires now, whatever
            // the order of timer and input, and no answer is applied (P4, P5; issue 8 #8).
            let owner = card.device.clone();
            let owner_conn = self.devices.get(&owner).and_then(|d| d.conn);
            self.expire_prompt(now, card.id.clone());
            if owner_conn != Some(conn) {
                let expired = Closed {
                    option_id: None,
                    expired: true,
                };
                self.send(conn, expired.frame(id));
            }
            return;
        }
        if &card.device != device {
            let r = Rejection::new(ErrorCode::Forbidden, "card belongs to another device").with_id(Some(id));
            return self.send_error(conn, &r, false);
        }
        let applied = match card.apply(&p.option_id, &p.text) {
            Ok(applied) => applied,
            Err(r) => return self.send_error(conn, &r.with_id(Some(id)), false),
        };
        let closed = Closed {
            option_id: Some(applied.option_id.clone()),
            expired: false,
        };
        let frame = closed.frame(id);
        let Some(card) = self.prompts.close(now, id, closed.clone()) else {
            return;
        };
        let seq = self.keep_card_closed(now, &card, &closed);
        self.card_closed(&card, &closed);
        self.event_after_commit(AgentEvent::PromptAnswered {
            device: device.clone(),
            asked: card.asked(),
            prompt: card.id,
            kind: card.kind,
            option_id: applied.option_id,
            label: applied.label,
            text: applied.text,
        });
        // The phone shows the card answered only once the answer and what is owed to the
        // agent are on disk: a crash before must leave the card open, not answered.
        self.send_after_commit(conn, super::journal::stamp(vec![frame], seq).remove(0));
    }
}

/// What the person sent: a text, a voice note (with its transcript, if any) or a file.
struct UserMessage {
    text: Option<String>,
    audio: Option<Audio>,
    file: Option<crate::uploads::ReceivedFile>,
}

/// The journal's body of the person's own message (L59: `from: user`, no data).
fn user_body(
    id: &str,
    text: &Option<String>,
    audio: &Option<Audio>,
    file: &Option<crate::uploads::ReceivedFile>,
) -> crate::journal::body::Body {
    use crate::journal::body::Body;
    match (audio, file) {
        (Some(a), _) => {
            let mut body = Body::user_audio(id, a.format.as_str(), a.data.len(), text.as_deref());
            body.stored = a.media_name.clone();
            body
        }
        (None, Some(f)) => {
            let mut body = Body::file(true, id, f.kind.as_str(), &f.mime, &f.filename, f.data.len());
            body.caption = f.caption.clone();
            body.stored = f.media_name.clone();
            body
        }
        (None, None) => Body::user_text(id, text.as_deref().unwrap_or("")),
    }
}
