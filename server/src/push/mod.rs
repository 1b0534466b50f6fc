//! Notifications for phones with no live connection (issue 18, docs/push.md): Web Push
//! (RFC 8030, encrypted per RFC 8291, signed per RFC 8292) and ntfy.
//!
//! The core decides when a device is notified and keeps the subscriptions; [`Sender`]
//! decides when each POST goes and what an answer means, on virtual time. This module is
//! the I/O around them: the VAPID key in the state directory, the request bytes, and the
//! calls through the loop's non-blocking HTTP client (never a blocking request).

pub mod actions;
pub mod card_token;
pub mod content;
pub mod ece;
mod ntfy;
mod request;
mod retry_after;
pub mod sender;
pub mod store;
pub mod vapid;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hermes_mobile::prompts::Card;
use hermes_mobile::push::{AllowList, Notification, PushConfig};
use hermes_mobile::upstream::ResponseHead;
use hermes_mobile::{DeviceId, Gateway, Time};
use rustls::ClientConfig;

use crate::agent::io::{CallEvent, CallId};
pub use actions::NotifyActions;
use card_token::{CardTokens, Verdict};
use content::AnswerLinks;
pub use content::ContentMode;
pub use ntfy::NtfyTarget;
use request::Request;
use sender::{Answer, JobId, SendOut, Sender};
use vapid::Vapid;

/// A push service answers in well under a second; these are for a slow one, and shorter
/// than an agent's (whose model may think for minutes), so a stuck push service cannot
/// hold the client's connections long.
pub const PUSH_TIMEOUTS: crate::http_client::Timeouts = crate::http_client::Timeouts {
    connect: Duration::from_secs(10),
    first_byte: Duration::from_secs(20),
    idle: Duration::from_secs(20),
};

/// Push calls' ids have this bit; the HTTP agent's never do.
const PUSH_CALL: u64 = 1 << 62;
/// A push service's answer body is not needed: read and dropped, at most this much kept.
const MAX_ANSWER_BYTES: usize = 4096;

/// `MOBILE_PUSH_*`, `MOBILE_NTFY_*` and `MOBILE_PUBLIC_URL`.
#[derive(Clone)]
pub struct PushSettings {
    /// `MOBILE_PUSH=on`: Web Push (ntfy works either way).
    pub web_push: bool,
    pub subject: String,
    /// The subject was not set: a start-up warning says Apple will refuse it.
    pub subject_defaulted: bool,
    pub hosts: AllowList,
    pub ca_file: Option<PathBuf>,
    pub content: ContentMode,
    pub ntfy: Option<NtfyTarget>,
    /// Never logged.
    pub ntfy_token: Option<String>,
    pub public_url: Option<String>,
    /// The chat's address guessed at start-up when `MOBILE_PUBLIC_URL` is not set: what an
    /// ntfy notification opens, never where a button sends its token (L67).
    pub guessed_url: Option<String>,
    /// `MOBILE_NOTIFY_ACTIONS` (issue 25).
    pub actions: NotifyActions,
}

/// Where the subscriptions are kept.
pub fn subscriptions_file(state_dir: &Path) -> PathBuf {
    store::subscriptions_path(state_dir)
}

/// The ntfy token never reaches a log, not even through `{:?}`.
impl std::fmt::Debug for PushSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushSettings")
            .field("web_push", &self.web_push)
            .field("subject", &self.subject)
            .field("hosts", &self.hosts)
            .field("ca_file", &self.ca_file)
            .field("content", &self.content)
            .field("ntfy", &self.ntfy)
            .field("ntfy_token", &self.ntfy_token.as_ref().map(|_| "<redacted>"))
            .field("public_url", &self.public_url)
            .field("guessed_url", &self.guessed_url)
            .field("actions", &self.actions)
            .finish()
    }
}

/// Whether a call is push's.
pub fn owns(id: CallId) -> bool {
    id.0 & PUSH_CALL != 0
}

struct Call {
    job: JobId,
    status: Option<u16>,
    retry_after: Option<Duration>,
    body_bytes: usize,
}

pub struct Push {
    settings: PushSettings,
    vapid: Vapid,
    sender: Sender,
    tls: Arc<ClientConfig>,
    calls: HashMap<CallId, Call>,
    next_call: u64,
    subscriptions_file: PathBuf,
    /// The buttons' tokens (issue 25), with the key kept in the state directory.
    tokens: CardTokens,
    /// Unix ms: a token carries its card's expiry on the wall clock (L67).
    wall: fn() -> u64,
}

/// Why a job's POST is not made.
enum NotSent {
    /// Its subscription is gone: dropped quietly.
    Withdrawn,
    /// It cannot be made, now or later.
    Invalid(String),
}

/// The work push asks of the loop.
pub enum PushIo {
    Call {
        id: CallId,
        target: Arc<crate::http_client::Target>,
        request: Vec<u8>,
    },
    /// Keep the subscriptions (through the file worker, atomically, mode 0600).
    Persist { path: PathBuf, contents: Vec<u8> },
}

impl Push {
    /// Reads or makes the VAPID key (0600) in `state_dir`, and reads the kept
    /// subscriptions. Start-up only: this reads files.
    pub fn start(settings: PushSettings, state_dir: &Path) -> Result<(Push, Option<String>), String> {
        let vapid = store::vapid_key(state_dir)?;
        let tokens = CardTokens::new(&store::card_key(state_dir)?);
        // With Web Push off, kept subscriptions are left alone, not used.
        let subscriptions = if settings.web_push {
            store::read_subscriptions(state_dir)?
        } else {
            None
        };
        let tls = crate::http_client::tls::client_config(settings.ca_file.as_deref(), "MOBILE_PUSH_CA_FILE", true)?;
        if settings.subject_defaulted && settings.web_push {
            log::warn!(
                "push: MOBILE_PUSH_SUBJECT is not set; using {:?}, which Apple's push service refuses (403): set it to mailto:you@example.org or an https URL of yours",
                settings.subject
            );
        }
        let sender = Sender::new(settings.content, settings.ntfy.is_some()).with_actions(settings.actions);
        let push = Push {
            vapid,
            sender,
            tls,
            calls: HashMap::new(),
            next_call: 1,
            subscriptions_file: store::subscriptions_path(state_dir),
            settings,
            tokens,
            wall: crate::journal::now_unix_ms,
        };
        Ok((push, subscriptions))
    }

    /// What the core needs: the key for `ready` (with Web Push on), the allow-list, and
    /// whether ntfy is on.
    pub fn core_config(&self) -> PushConfig {
        let mut config = PushConfig::new(self.vapid.public_key(), self.settings.hosts.clone());
        if !self.settings.web_push {
            config.vapid_public_key = None;
        }
        config.ntfy = self.settings.ntfy.is_some();
        config.point_check = ece::is_p256_point;
        config.actions = self.settings.actions.as_str();
        config
    }

    /// `MOBILE_PUBLIC_URL`, if set.
    pub fn public_url(&self) -> Option<&str> {
        self.settings.public_url.as_deref()
    }

    /// `/healthz`: the last push that failed.
    pub fn last_error(&self) -> Option<&str> {
        self.sender.last_error()
    }

    pub fn notify(&mut self, t: Time, n: Notification, core: &Gateway) {
        let subs = if self.settings.web_push {
            core.push_subscriptions(&n.device).to_vec()
        } else {
            Vec::new()
        };
        self.sender.notify(t, n, &subs);
    }

    pub fn device_online(&mut self, device: &DeviceId) {
        self.sender.device_online(device);
    }

    pub fn poll_timeout(&self) -> Option<Time> {
        self.sender.poll_timeout()
    }

    pub fn handle_timeout(&mut self, t: Time) {
        self.sender.handle_timeout(t);
    }

    /// The subscriptions changed: their new snapshot, to keep.
    pub fn persist(&self, core: &Gateway) -> PushIo {
        PushIo::Persist {
            path: self.subscriptions_file.clone(),
            contents: core.push_snapshot().into_bytes(),
        }
    }

    /// Turns the sender's decisions into calls and core inputs.
    pub fn poll(&mut self, t: Time, core: &mut Gateway) -> Option<PushIo> {
        while let Some(out) = self.sender.poll() {
            match out {
                SendOut::Post(job) => match self.request(t, job, core) {
                    Ok(Request { target, bytes }) => {
                        let id = CallId(PUSH_CALL | self.next_call);
                        self.next_call += 1;
                        self.calls.insert(
                            id,
                            Call {
                                job,
                                status: None,
                                retry_after: None,
                                body_bytes: 0,
                            },
                        );
                        return Some(PushIo::Call {
                            id,
                            target,
                            request: bytes,
                        });
                    }
                    Err(NotSent::Withdrawn) => self.sender.answer(t, job, Answer::Withdrawn),
                    // A request that cannot be made now cannot be made later either.
                    Err(NotSent::Invalid(why)) => self.sender.answer(t, job, Answer::Invalid(why)),
                },
                SendOut::Gone { device, endpoint } => core.handle_push_gone(t, &device, &endpoint),
                SendOut::TestResult { conn, id, result } => core.handle_push_test_result(t, conn, &id, result),
            }
        }
        None
    }

    /// The POST of a job. A Web Push job goes to the subscription as the core has it now:
    /// one removed meanwhile (a 404/410 to another job, an unsubscribe, an eviction) is
    /// never used again, and one whose keys were replaced gets the new keys.
    fn request(&self, t: Time, job: JobId, core: &Gateway) -> Result<Request, NotSent> {
        let job = self.sender.job(job).ok_or(NotSent::Withdrawn)?;
        match &job.channel {
            sender::Channel::WebPush(queued) => {
                let sub = core
                    .push_subscriptions(&job.device)
                    .iter()
                    .find(|s| s.endpoint == queued.endpoint)
                    .ok_or(NotSent::Withdrawn)?;
                let unix = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let public_url = self.settings.public_url.as_deref();
                let links = sub
                    .app_url
                    .as_deref()
                    .or(public_url)
                    .and_then(|b| self.links(t, job, b));
                let base = sub
                    .app_url
                    .as_deref()
                    .or(public_url)
                    .or(self.settings.guessed_url.as_deref());
                request::web_push(
                    job,
                    sub,
                    t,
                    base,
                    links.as_ref(),
                    &self.settings,
                    &self.vapid,
                    &self.tls,
                    unix,
                )
                .map_err(NotSent::Invalid)
            }
            sender::Channel::Ntfy => {
                let target = self
                    .settings
                    .ntfy
                    .as_ref()
                    .ok_or(NotSent::Invalid("ntfy is not set".into()))?;
                let token = self.settings.ntfy_token.as_deref();
                let public_url = self.settings.public_url.as_deref();
                // Buttons only with MOBILE_PUBLIC_URL: an address guessed from this host's
                // interfaces may not be one the phone reaches, or the owner's to expose.
                let links = public_url.and_then(|b| self.links(t, job, b));
                let click = public_url.or(self.settings.guessed_url.as_deref());
                ntfy::request(job, target, token, click, links.as_ref(), &self.tls).map_err(NotSent::Invalid)
            }
        }
    }

    /// A card's buttons' tokens and where they answer, beside the page at `base`; `None`
    /// for a job without buttons.
    fn links(&self, t: Time, job: &sender::Job, base: &str) -> Option<AnswerLinks> {
        let card = job.content.card.as_ref()?;
        if job.content.buttons.is_empty() {
            return None;
        }
        let url = actions::answer_url(base)?;
        let expires_ms = self.wall_expiry_ms(t, card.expires_at);
        let tokens = job
            .content
            .buttons
            .iter()
            .map(|b| {
                let answer = card_token::Answer {
                    device: job.device.as_str(),
                    card: &card.prompt,
                    option: &b.option_id,
                    digest: &card.digest,
                };
                (b.option_id.clone(), self.tokens.mint(answer, expires_ms.div_ceil(1000)))
            })
            .collect();
        Some(AnswerLinks {
            url,
            tokens,
            expires_unix_ms: expires_ms,
        })
    }

    /// A time on the core's clock (whose origin is this run's start) on the wall clock.
    fn wall_expiry_ms(&self, now: Time, at: Time) -> u64 {
        let left = u64::try_from(at.since(now).as_millis()).unwrap_or(u64::MAX);
        (self.wall)().saturating_add(left)
    }

    /// Reads a button's token against the open card it names (L67): a token only for an
    /// option that is a button under `MOBILE_NOTIFY_ACTIONS` now, for this card's device,
    /// id and contents.
    pub fn check_answer(&self, now: Time, card: &Card, option: &str, token: &str) -> Verdict {
        // The token first: one HMAC over values kept with the card, whatever its size.
        let answer = card_token::Answer {
            device: card.device.as_str(),
            card: card.id.as_str(),
            option,
            digest: card.answer_digest(),
        };
        let card_expires = self.wall_expiry_ms(now, card.expires_at).div_ceil(1000);
        let verdict = self.tokens.check(token, answer, card_expires, (self.wall)() / 1000);
        // Then whether it is a button now, as `content` decided when it made the buttons:
        // from the same card, the same way (a changed MOBILE_NOTIFY_ACTIONS ends some).
        let ids: Vec<&str> = card.options.iter().map(|o| o.id.as_str()).collect();
        let approvals = actions::approvals_shown(self.settings.content == ContentMode::Preview, card.display());
        if verdict == Verdict::Valid && !actions::is_button(self.settings.actions, card.kind, &ids, option, approvals) {
            return Verdict::Forbidden;
        }
        verdict
    }

    /// A token was used: refused from now on.
    pub fn spend_token(&mut self, token: &str) {
        self.tokens.spend(token, (self.wall)() / 1000);
    }

    /// The wall clock tokens read (a test's, to move with its virtual time).
    pub fn set_wall(&mut self, wall: fn() -> u64) {
        self.wall = wall;
    }

    /// News of a push call from the HTTP client.
    pub fn handle_call(&mut self, t: Time, id: CallId, event: CallEvent) {
        let Some(call) = self.calls.get_mut(&id) else { return };
        match event {
            CallEvent::Head(head) => {
                call.status = Some(head.status);
                call.retry_after = retry_after(&head);
            }
            CallEvent::Body(bytes) => call.body_bytes = (call.body_bytes + bytes.len()).min(MAX_ANSWER_BYTES),
            CallEvent::End => {
                let call = self.calls.remove(&id).expect("looked up above");
                let answer = match call.status {
                    Some(status) => Answer::Status {
                        status,
                        retry_after: call.retry_after,
                    },
                    None => Answer::Failed("no answer".into()),
                };
                self.sender.answer(t, call.job, answer);
            }
            CallEvent::Failed(error) => {
                let call = self.calls.remove(&id).expect("looked up above");
                // A status already read counts (a 413 sent before the body was taken).
                let answer = match call.status {
                    Some(status) => Answer::Status {
                        status,
                        retry_after: call.retry_after,
                    },
                    None => Answer::Failed(error.to_string()),
                };
                self.sender.answer(t, call.job, answer);
            }
        }
    }
}

/// `Retry-After`, seconds or an HTTP date (the wall clock turns a date into seconds).
fn retry_after(head: &ResponseHead) -> Option<Duration> {
    let value = head
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("retry-after"))
        .map(|(_, v)| v.as_str())?;
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Some(retry_after::wait(value, now_unix))
}
