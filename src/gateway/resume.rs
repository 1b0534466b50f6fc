//! The journal's read side (issue 24): restore at start-up, `resume`'s replay, `history`
//! pages and `forget`.

use std::borrow::Cow;

use super::journal::{stamp, PendingRead, Replay, Waiting};
use super::{ConnState, Gateway};
use crate::agent::OutgoingFile;
use crate::ids::{ConnId, DeviceId, MessageId};
use crate::journal::body::Body;
use crate::journal::owed::{self, EventKey};
use crate::journal::{Entry, Owed, Read, ReadResult, Record, Snapshot, Window};
use crate::prompts::{Card, Closed};
use crate::time::Time;
use crate::wire::journal::{with_seq, HistoryPage, Resumed};
use crate::wire::server::encode;
use crate::wire::{DownloadKind, ErrorCode, Rejection};

/// Entries per page of a resume's replay: a device's whole journal (5,000 entries, held
/// files among them) is never read into memory at once. Pages follow each other as the
/// phone reads ([`REPLAY_WINDOW`], `handle_drained`).
const REPLAY_PAGE: usize = 64;

/// Bytes of a replay's frames sent before it waits for the connection's queue to drain
/// ([`Gateway::handle_drained`]): a new client on a long journal must not be dropped as too
/// slow (L22) for what the gateway pushed at disk speed. One entry may pass it (a held
/// file: 11 MB in base64), so the queue stays under L22's 24 MiB.
const REPLAY_WINDOW: usize = 1024 * 1024;

/// `forget`s of one device that may wait for their commit at once.
const MAX_FORGETS_WAITING: usize = 4;

/// `history` pages a connection may have asked for and not yet got.
const MAX_HISTORY_READS_PER_CONN: usize = 4;

/// How much of what an ended agent never had is read back at once: what the link keeps
/// for an absent agent (its queue's 256 events and 32 MiB), so that a read-back is never
/// given up for want of room, and memory stays bounded whatever the dead peer's outbox held.
const OWED_READ_EVENTS: usize = 256;
const OWED_READ_BYTES: usize = 32 * 1024 * 1024;

impl Gateway {
    /// Restores what the journal kept (before any input): seqs, held output, open cards and
    /// the idempotency windows. Entries this build cannot read are skipped and logged.
    pub fn restore(&mut self, now: Time, snapshot: Snapshot) {
        self.now = self.now.max(now);
        self.restore_devices(snapshot.paired, snapshot.codes);
        let Some(j) = self.journal.as_mut() else { return };
        j.seqs.restore(&snapshot.seqs, snapshot.seq_floor);
        let mut skipped = 0;
        for entry in snapshot.held {
            skipped += usize::from(!self.restore_held(now, entry));
        }
        for entry in snapshot.open_cards {
            skipped += usize::from(!self.restore_card(now, entry));
        }
        for row in snapshot.dedup {
            match row.window {
                Window::Seen => {
                    let seq = row.value.parse().unwrap_or(0);
                    self.seen.insert(row.at, &row.device, &row.id, seq);
                }
                Window::Delivered => self.delivered.insert(row.at, &row.device, &row.id, row.value),
            }
        }
        if skipped > 0 {
            log::warn!("journal: {skipped} entries this build cannot read were skipped");
        }
        self.restore_owed(snapshot.owed);
        let devices: Vec<DeviceId> = self.devices.keys().cloned().collect();
        for device in devices {
            self.arm_hold(now, &device);
        }
        self.arm_prompts();
        self.arm_sweep(now);
    }

    /// Events the agent had not got before the stop go to it again, first, in the order
    /// they were owed (L64). Their rows stay until it has them.
    fn restore_owed(&mut self, owed: Vec<Owed>) {
        for row in owed {
            match owed::event_of(&row) {
                Some(event) => self.events.push_back(event),
                None => {
                    log::warn!(
                        "journal: an event owed to the agent for device {:?} cannot be read and is dropped",
                        row.device
                    );
                    self.keep(Record::Handed {
                        device: row.device,
                        key: row.key,
                    });
                }
            }
        }
    }

    fn restore_held(&mut self, now: Time, entry: Entry) -> bool {
        let Some(body) = Body::parse(&entry.body) else {
            return false;
        };
        // The same bound in all as while running (L32): what does not fit is held no more.
        let bytes = entry.blob.as_ref().map_or(0, Vec::len) + body.text.as_ref().map_or(0, String::len);
        if !self.make_hold_room(bytes) {
            self.keep_unheld(&entry.device, vec![entry.key]);
            return true;
        }
        let d = self.device_entry(&entry.device);
        let result = match body.t.as_str() {
            "message" => d.hold.message(
                now,
                &MessageId(body.id),
                body.text.as_deref().unwrap_or(""),
                body.edit,
                body.is_final.unwrap_or(true),
                entry.seq,
            ),
            "media" => match file_of(&body, entry.blob) {
                Some(file) => d.hold.file(now, body.id, file, entry.seq),
                None => return false,
            },
            _ => return false,
        };
        if result.is_err() {
            self.keep_unheld(&entry.device, vec![entry.key]);
        }
        true
    }

    fn restore_card(&mut self, now: Time, entry: Entry) -> bool {
        let Some(body) = Body::parse(&entry.body) else {
            return false;
        };
        // A clock that went back across the restart (a Pi with no RTC, before NTP) must not
        // keep a card open for longer than any card may be (L17).
        let longest = now + std::time::Duration::from_secs(crate::limits::MAX_PROMPT_TTL_SECS);
        let deadline = entry.deadline.unwrap_or(now).min(longest);
        let Some(card) = Card::from_body(entry.device.clone(), body, deadline, entry.first_seq) else {
            return false;
        };
        self.device_entry(&entry.device);
        self.prompts.insert(card);
        true
    }

    /// `hello` with `resume`: everything after `after` comes from the journal first; frames
    /// for the connection wait behind it (L58). What the hold has is in that read (the
    /// records went before it, in order), and stays held until the replay has sent it: a
    /// replay cut short loses none of it.
    pub(super) fn begin_replay(&mut self, conn: ConnId, device: &DeviceId, after: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.replaying = true;
        }
        self.hold_back(conn);
        // Fixed now: output made from here on goes live (held back behind the replay), so a
        // page must leave it out even when the first read waits for the device's seqs.
        let ceiling = self.latest_seq(device).unwrap_or(0);
        let replay = Replay {
            conn,
            device: device.clone(),
            after,
            ceiling,
            cursor: after,
            unacked: 0,
        };
        match self.journal.as_mut() {
            Some(j) if !j.seqs.is_safe(device) => j.replays_waiting.push(replay),
            _ => self.start_replay(replay),
        }
        // L6: the phone sees the held versions in the replay; later ones are edits. The
        // hold's timer stops: a paced replay may outlast it (forget_conn re-arms it).
        let Some(d) = self.devices.get_mut(device) else { return };
        d.hold_slot = None;
        let held: Vec<MessageId> = d.hold.message_ids();
        for id in held {
            if let Some(saw) = d.streams.get_mut(&id) {
                *saw = true;
            }
        }
    }

    /// The replay sent the device's held output: it is held no more.
    fn replay_sent_hold(&mut self, device: &DeviceId) {
        let Some(d) = self.devices.get_mut(device) else { return };
        d.hold_slot = None;
        let keys: Vec<String> = d.hold.take().iter().map(|h| h.key()).collect();
        self.keep_unheld(device, keys);
    }

    /// A read the journal answered.
    pub fn handle_journal_read(&mut self, now: Time, token: u64, result: Result<ReadResult, String>) {
        self.now = self.now.max(now);
        let Some(pending) = self.journal.as_mut().and_then(|j| j.reads.remove(&token)) else {
            return;
        };
        match pending {
            PendingRead::Replay(replay) => self.on_replay_page(now, replay, result),
            PendingRead::History { conn, id } => self.answer_history(now, conn, &id, result),
            PendingRead::Owed { asked } => match result {
                Ok(read) => {
                    if read.owed.len() == OWED_READ_EVENTS || read.owed.len() < asked {
                        log::info!(
                            "journal: {} of {asked} events whose lines the agent never had go to the \
                             next agent; the others it had by now, or they stay owed for the next start",
                            read.owed.len()
                        );
                    }
                    self.restore_owed(read.owed);
                }
                Err(e) => log::warn!(
                    "journal: events the agent never got could not be read back ({e}); they go to it \
                     at the next start"
                ),
            },
        }
    }

    /// Owed events whose lines never reached the agent (its process or connection ended
    /// with them still queued) go to the next agent in this run, read back from the
    /// journal as a restart would (L64, review D #8), as many as the link's queue for an
    /// absent agent holds; the rest stay owed for the next start. Without a journal none
    /// was owed.
    /// `read_back` false while the gateway stops: they wait for the next start. Whether they
    /// stay owed: without a journal nothing was owed, and they are lost with the agent
    /// (L41: its phones are asked to send them again).
    pub fn handle_agent_unwritten(&mut self, mut keys: Vec<EventKey>, read_back: bool) -> bool {
        if !self.journal_on() {
            return false;
        }
        if !read_back {
            return true;
        }
        // A key owed again has two lines; its row goes once.
        keys.sort_unstable();
        keys.dedup();
        if !keys.is_empty() {
            let asked = keys.len();
            let read = Read::Owed {
                keys,
                limit: OWED_READ_EVENTS,
                max_bytes: OWED_READ_BYTES,
            };
            self.read(read, PendingRead::Owed { asked });
        }
        true
    }

    /// The first page, once every seq the device was given is reserved on disk: the
    /// replay's frames may carry any of them.
    fn start_replay(&mut self, replay: Replay) {
        let after = replay.after;
        self.read_replay_page(replay, after);
    }

    /// `conn`'s queue of frames has drained (the server says so whenever a connection's
    /// queue empties): a replay that waited for it goes on.
    pub fn handle_drained(&mut self, conn: ConnId) {
        let Some(j) = self.journal.as_mut() else { return };
        let Some(at) = j.replays_paused.iter().position(|r| r.conn == conn) else {
            return;
        };
        let mut replay = j.replays_paused.swap_remove(at);
        replay.unacked = 0;
        let from = replay.cursor;
        self.read_replay_page(replay, from);
    }

    /// The device's seqs were reserved on disk: the replays that waited for it begin.
    pub(super) fn start_waiting_replays(&mut self, device: &DeviceId) {
        let Some(j) = self.journal.as_mut() else { return };
        if !j.seqs.is_safe(device) {
            return;
        }
        let (ready, waiting) = std::mem::take(&mut j.replays_waiting)
            .into_iter()
            .partition(|r| r.device == *device);
        j.replays_waiting = waiting;
        for replay in ready {
            self.start_replay(replay);
        }
    }

    /// The replay's next page: entries after `from`, at most [`REPLAY_PAGE`] of them.
    fn read_replay_page(&mut self, replay: Replay, from: u64) {
        let read = Read::After {
            device: replay.device.clone(),
            after: from,
            limit: REPLAY_PAGE,
        };
        self.read(read, PendingRead::Replay(replay));
    }

    /// One page of a replay: its frames, then the next page, or `resumed` after the last.
    /// A connection that is gone (or now another device's) stops the replay.
    fn on_replay_page(&mut self, now: Time, replay: Replay, result: Result<ReadResult, String>) {
        let conn = replay.conn;
        let still_this_device = self
            .conns
            .get(&conn)
            .is_some_and(|c| matches!(&c.state, ConnState::Ready { device: d, .. } if *d == replay.device));
        if !still_this_device {
            return;
        }
        let page = match result {
            Ok(r) => r,
            Err(e) => {
                // No `resumed`: the client must not think it caught up. It resumes again
                // after the same seq on its next connection.
                log::warn!("{conn:?}: the journal could not be read for resume: {e}");
                return self.close(conn, crate::limits::CLOSE_INTERNAL_ERROR, "journal read failed");
            }
        };
        let mut replay = replay;
        let mut cursor = None;
        for entry in &page.entries {
            if replay.unacked >= REPLAY_WINDOW {
                break;
            }
            cursor = Some(entry.seq);
            if entry.seq <= replay.ceiling {
                for frame in self.replay_frames(now, entry, replay.after) {
                    replay.unacked += frame.len();
                    self.outputs.push_back(super::Output::Send { conn, frame });
                }
            }
        }
        let more = page.more || cursor != page.entries.last().map(|e| e.seq);
        if let (true, Some(cursor)) = (more, cursor) {
            if replay.unacked < REPLAY_WINDOW {
                return self.read_replay_page(replay, cursor);
            }
            // The phone reads at its own pace: the rest once its queue has drained.
            replay.cursor = cursor;
            if let Some(j) = self.journal.as_mut() {
                j.replays_paused.push(replay);
            }
            return;
        }
        self.replay_sent_hold(&replay.device);
        let seq = self.latest_safe_seq(&replay.device).unwrap_or(0);
        self.outputs.push_back(super::Output::Send {
            conn,
            frame: encode("resumed", &Resumed { seq }),
        });
        if let Some(c) = self.conns.get_mut(&conn) {
            c.replaying = false;
        }
        self.release(conn);
    }

    /// One entry as a resuming client gets it: its latest state, once (L58).
    fn replay_frames(&self, now: Time, entry: &Entry, after: u64) -> Vec<String> {
        let Some(body) = Body::parse(&entry.body) else {
            return Vec::new();
        };
        match body.t.as_str() {
            // A client's own messages are not replayed to it.
            _ if body.from.is_some() => Vec::new(),
            "message" => {
                let text = body.text.as_deref().unwrap_or("");
                let edit = entry.first_seq <= after;
                let frames = self.message_frames(&body.id, text, edit, body.is_final.unwrap_or(true));
                stamp(frames, entry.seq)
            }
            "media" => match file_of(&body, entry.blob.clone()) {
                Some(file) if entry.blob.is_some() => stamp(self.media_frames(&body.id, &file), entry.seq),
                _ => {
                    let mut body = body;
                    self.show_file(&entry.device, &mut body);
                    vec![with_seq(media_without_data(&body), entry.seq)]
                }
            },
            "prompt" => self.replay_card(now, entry, body, after),
            _ => Vec::new(),
        }
    }

    fn replay_card(&self, now: Time, entry: &Entry, body: Body, after: u64) -> Vec<String> {
        let mut frames = Vec::new();
        // Card ids are the agent's and may be reused for another device: only this
        // device's own card is its open one.
        if let Some(card) = self.prompts.get(&body.id).filter(|c| c.device == entry.device) {
            if entry.first_seq > after {
                frames.push(with_seq(card.frame(now), entry.first_seq));
            }
            return frames;
        }
        let Some(closed) = body.closed.clone() else {
            return frames; // open in the journal, gone here: expired at restore, told apart
        };
        let body_id = body.id.clone();
        if entry.first_seq > after {
            let mut opened = body;
            opened.closed = None;
            frames.push(with_seq(card_frame_json(&opened), entry.first_seq));
        }
        let done = Closed {
            option_id: closed.option_id,
            expired: closed.expired,
        };
        frames.push(with_seq(done.frame(&body_id), entry.seq));
        frames
    }

    pub(super) fn on_history(&mut self, conn: ConnId, device: &DeviceId, id: &str, before: Option<u64>, limit: usize) {
        if !self.history_on() {
            let r = Rejection::new(ErrorCode::UnsupportedFrame, "history is off on this gateway");
            return self.send_error(conn, &r.with_id(Some(id)), false);
        }
        // One peer cannot queue reads without bound on the journal's thread.
        let waiting = self.journal.as_ref().map_or(0, |j| {
            j.reads
                .values()
                .filter(|r| matches!(r, PendingRead::History { conn: c, .. } if *c == conn))
                .count()
        });
        if waiting >= MAX_HISTORY_READS_PER_CONN {
            let r = Rejection::new(
                ErrorCode::InternalError,
                "too many history pages asked at once; wait for one",
            );
            return self.send_error(conn, &r.with_id(Some(id)), false);
        }
        let read = Read::Before {
            device: device.clone(),
            before,
            limit,
        };
        self.read(
            read,
            PendingRead::History {
                conn,
                id: id.to_owned(),
            },
        );
    }

    fn answer_history(&mut self, now: Time, conn: ConnId, id: &str, result: Result<ReadResult, String>) {
        if !self.conns.contains_key(&conn) {
            return;
        }
        let page = match result {
            Ok(page) => page,
            Err(e) => {
                log::warn!("{conn:?}: the journal could not be read for history: {e}");
                let r = Rejection::new(ErrorCode::InternalError, "history could not be read");
                return self.send_error(conn, &r.with_id(Some(id)), false);
            }
        };
        let items: Vec<String> = page.entries.iter().filter_map(|e| self.history_item(now, e)).collect();
        let raw: Vec<Box<serde_json::value::RawValue>> = items
            .into_iter()
            .filter_map(|i| serde_json::value::RawValue::from_string(i).ok())
            .collect();
        let frame = encode(
            "history",
            &HistoryPage {
                id: Cow::Borrowed(id),
                items: raw.iter().map(|r| r.as_ref()).collect(),
                more: page.more,
            },
        );
        self.send(conn, frame);
    }

    /// One entry as a `history` item: the frame a client would get, whole, with its seq
    /// (L59). An open card says the seconds it has left; a file carries no data, and its
    /// `url` while the media store has it (L63).
    fn history_item(&self, now: Time, entry: &Entry) -> Option<String> {
        let mut body = Body::parse(&entry.body)?;
        body.edit = false;
        self.show_file(&entry.device, &mut body);
        let json = match body.t.as_str() {
            "prompt" => match self.prompts.get(&body.id).filter(|c| c.device == entry.device) {
                Some(card) => card.frame(now),
                None => card_frame_json(&body),
            },
            _ => body.to_json(),
        };
        Some(with_seq(json, entry.seq))
    }

    /// `forget` (issue 24 §3): the device's entries, its hold and its push subscriptions go;
    /// its open cards, dedup window and seq stay. `forgotten` once that is on disk.
    pub(super) fn on_forget(&mut self, conn: ConnId, device: &DeviceId, id: &str) {
        // A flood of `forget`s while the disk is slow queues at most a few commits, and
        // sweeps of the device's files (with their log lines) one at a time (review A #8,
        // B #5, D #9).
        let waiting = self.forgets_waiting(device);
        if waiting >= MAX_FORGETS_WAITING {
            let r = Rejection::new(ErrorCode::InternalError, "a forget is under way; wait for it");
            return self.send_error(conn, &r.with_id(Some(id)), false);
        }
        if let Some(d) = self.devices.get_mut(device) {
            d.hold.take();
            d.hold_slot = None;
        }
        if self.push.unsubscribe(device) {
            self.outputs.push_back(super::Output::PushChanged);
        }
        if self.forget_media(device) {
            log::info!("device {device:?}: forgot its journal, hold, files and push subscriptions (forget)");
        }
        if !self.journal_on() {
            let frame = encode("forgotten", &crate::wire::journal::Forgotten { id: id.into() });
            return self.send(conn, frame);
        }
        self.keep(Record::Forget { device: device.clone() });
        self.confirm(Waiting::Forgotten {
            conn,
            id: id.to_owned(),
            device: device.clone(),
        });
    }
}

/// A stored file's metadata and (held) bytes as an outgoing file.
fn file_of(body: &Body, blob: Option<Vec<u8>>) -> Option<OutgoingFile> {
    Some(OutgoingFile {
        kind: DownloadKind::parse(body.kind.as_deref()?).unwrap_or(DownloadKind::Document),
        mime: body.mime.clone().unwrap_or_default(),
        filename: body.filename.clone().unwrap_or_default(),
        caption: body.caption.clone(),
        data: blob.unwrap_or_default(),
        reply_to: body.reply_to.clone(),
    })
}

/// A `media` frame for a file whose bytes are not kept with the entry: one part, no data.
fn media_without_data(body: &Body) -> String {
    let mut b = body.clone();
    b.edit = false;
    let mut json = b.to_json();
    json.pop();
    json.push_str(r#","part":0,"parts":1,"final":true}"#);
    json
}

/// A closed card's `prompt` frame as kept: no time left.
fn card_frame_json(body: &Body) -> String {
    let mut body = body.clone();
    body.notified = false; // the server's own bookkeeping (L66)
    let mut json = body.to_json();
    json.pop();
    json.push_str(r#","timeout_seconds":0}"#);
    json
}
