//! When and how often to POST a notification: a pure state machine on virtual time
//! (issue 18). It coalesces replies, turns each notification into one job per channel
//! (each Web Push subscription, and ntfy), retries by the push service's answer, and
//! reports what the core must hear (a subscription gone, a `push_test`'s outcome).
//!
//! Answers: 2xx sent; 404/410 the subscription is gone for good; 413 a bug, not retried;
//! 429 retried no sooner than `Retry-After`; 5xx and network failures backed off and
//! retried within the TTL; 401/403 logged with what to check, not retried; a redirect is
//! not followed (a push service has no reason to send one; following it would let a
//! phone's endpoint choose another host).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use hermes_mobile::push::{Notification, NotifyEvent, Subscription, PUSH_HOLD};
use hermes_mobile::{ConnId, DeviceId, Time};

use super::actions::NotifyActions;
use super::content::{content, Content, ContentMode};

/// Replies and deliveries within this long of the first make one notification.
pub const COALESCE: Duration = Duration::from_secs(2);
/// A `push_test` lives this long at the push service.
const TEST_TTL: Duration = Duration::from_secs(60);
/// Jobs waiting or in flight at once: past it a new one is dropped (and logged).
pub const MAX_JOBS: usize = 256;
/// POSTs open at once: push shares the HTTP client (64 connections) with the agent, whose
/// calls must never find it full because of notifications; the rest wait their turn.
pub const MAX_IN_FLIGHT: usize = 16;
/// Cards' pushes remembered as delivered (device, topic, endpoint), for their outcome to
/// go where the card went (L66); the oldest is forgotten first.
const MAX_SENT_CARDS: usize = 1024;
/// A safety net only: retries end at the TTL (15 min apart at most: about 100 in 24 h).
const MAX_ATTEMPTS: u32 = 128;
const FIRST_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);

pub type JobId = u64;

/// Where a job goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    WebPush(Subscription),
    Ntfy,
}

/// One notification for one channel.
#[derive(Debug, Clone)]
pub struct Job {
    pub device: DeviceId,
    pub channel: Channel,
    pub content: Content,
    /// When the push service should drop it (and we stop retrying).
    pub expires: Time,
    /// A card's `Topic`, so a newer push replaces an undelivered one.
    pub topic: Option<String>,
    test: Option<TestKey>,
    /// A card's outcome (L66): sent to a connected device too, and retried while it is.
    followup: bool,
    /// A card's push whose card has closed since: not retried, so that the card never
    /// comes back after its outcome.
    superseded: bool,
    /// A POST of it got no answer (a timeout, a reset): the push service may have taken it.
    maybe_delivered: bool,
    attempts: u32,
    /// When to (re)send; `None` while in flight or queued.
    due: Option<Time>,
    /// Waiting for one of the `MAX_IN_FLIGHT` slots.
    queued: bool,
}

impl Job {
    /// The `TTL` header at `now`: the seconds left, at least 0.
    pub fn ttl_secs(&self, now: Time) -> u64 {
        self.expires.since(now).as_secs()
    }
}

type TestKey = (ConnId, String);

struct TestWait {
    device: DeviceId,
    left: usize,
    sent: bool,
    errors: Vec<String>,
}

struct Pending {
    due: Time,
    count: usize,
    event: NotifyEvent,
    subs: Vec<Subscription>,
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOut {
    /// Build and POST the request of this job ([`Sender::job`]).
    Post(JobId),
    /// The push service says this subscription is gone: `Gateway::handle_push_gone`.
    Gone { device: DeviceId, endpoint: String },
    /// `Gateway::handle_push_test_result`.
    TestResult {
        conn: ConnId,
        id: String,
        result: Result<(), String>,
    },
}

/// How a job's answer is taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Status {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// No answer (refused, reset, timed out, TLS).
    Failed(String),
    /// The request could not be made (a host no longer allowed, a key that is not one):
    /// it never will be, so it is not retried.
    Invalid(String),
    /// Not sent, and nothing went wrong: the subscription was removed meanwhile (a 404/410
    /// to another job, an unsubscribe), so it is never used again.
    Withdrawn,
}

pub struct Sender {
    mode: ContentMode,
    actions: NotifyActions,
    ntfy: bool,
    pending: HashMap<DeviceId, Pending>,
    jobs: BTreeMap<JobId, Job>,
    next_job: JobId,
    tests: HashMap<TestKey, TestWait>,
    /// Jobs waiting for a slot, in order.
    queue: VecDeque<JobId>,
    in_flight: usize,
    /// Devices connected since their last notification that still have a job in flight:
    /// its retries are dropped. Only devices with jobs: bounded by `MAX_JOBS`.
    online: std::collections::HashSet<DeviceId>,
    out: VecDeque<SendOut>,
    last_error: Option<String>,
    /// Cards' pushes a push service took, oldest first (L66).
    sent_cards: VecDeque<(DeviceId, String, String)>,
    /// Cards this run notified (device, topic), oldest first: a card closing that is not
    /// here was notified before a restart, and its outcome goes to every subscription.
    notified_cards: VecDeque<(DeviceId, String)>,
}

impl Sender {
    pub fn new(mode: ContentMode, ntfy: bool) -> Sender {
        Sender {
            mode,
            actions: NotifyActions::Safe,
            ntfy,
            pending: HashMap::new(),
            jobs: BTreeMap::new(),
            next_job: 1,
            tests: HashMap::new(),
            queue: VecDeque::new(),
            in_flight: 0,
            online: std::collections::HashSet::new(),
            out: VecDeque::new(),
            last_error: None,
            sent_cards: VecDeque::new(),
            notified_cards: VecDeque::new(),
        }
    }

    /// Which buttons cards get (`MOBILE_NOTIFY_ACTIONS`, issue 25).
    pub fn with_actions(mut self, actions: NotifyActions) -> Sender {
        self.actions = actions;
        self
    }

    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// The last push that failed, for `/healthz`.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    pub fn poll(&mut self) -> Option<SendOut> {
        self.out.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Time> {
        let pending = self.pending.values().map(|p| p.due);
        let jobs = self.jobs.values().filter_map(|j| j.due);
        pending.chain(jobs).min()
    }

    /// A notification from the core, with the device's subscriptions now.
    pub fn notify(&mut self, now: Time, n: Notification, subs: &[Subscription]) {
        if !matches!(n.event, NotifyEvent::Test { .. } | NotifyEvent::CardClosed { .. }) {
            // The core notifies only a device with no live connection.
            self.online.remove(&n.device);
        }
        match &n.event {
            NotifyEvent::Card { prompt, ttl, .. } => {
                let expires = now + (*ttl).min(PUSH_HOLD);
                let topic = Some(topic(prompt.as_str()));
                if self.notified_cards.len() >= MAX_SENT_CARDS {
                    self.notified_cards.pop_front();
                }
                self.notified_cards
                    .push_back((n.device.clone(), topic.clone().unwrap_or_default()));
                let c = content(&n.event, 1, self.mode, self.actions);
                self.fan_out(now, &n.device, subs, c, expires, topic, None, self.ntfy, false);
            }
            NotifyEvent::CardClosed { prompt, .. } => self.card_closed(now, &n, prompt.as_str(), subs),
            NotifyEvent::Test { conn, id } => self.test(now, &n, *conn, id.clone(), subs),
            NotifyEvent::Reply { .. } | NotifyEvent::Deliver { .. } => {
                let p = self.pending.entry(n.device.clone()).or_insert_with(|| Pending {
                    due: now + COALESCE,
                    count: 0,
                    event: n.event.clone(),
                    subs: Vec::new(),
                });
                p.count += 1;
                p.event = n.event;
                p.subs = subs.to_vec();
            }
        }
    }

    /// One test at a time per device, so a phone cannot fill the queue with tests.
    fn test(&mut self, now: Time, n: &Notification, conn: ConnId, id: String, subs: &[Subscription]) {
        let refuse = if self.tests.values().any(|w| w.device == n.device) {
            Some("a push test is already running for this device")
        } else if subs.is_empty() {
            Some("this device has no push subscription")
        } else if self.jobs.len() + subs.len() > MAX_JOBS {
            Some("too many notifications are waiting; try again in a minute")
        } else {
            None
        };
        if let Some(why) = refuse {
            let result = Err(why.to_owned());
            return self.out.push_back(SendOut::TestResult { conn, id, result });
        }
        let key = (conn, id);
        let c = content(&n.event, 1, self.mode, self.actions);
        let left = self.fan_out(
            now,
            &n.device,
            subs,
            c,
            now + TEST_TTL,
            None,
            Some(key.clone()),
            false,
            false,
        );
        let wait = TestWait {
            device: n.device.clone(),
            left,
            sent: false,
            errors: Vec::new(),
        };
        self.tests.insert(key, wait);
    }

    /// The device is connected again: nothing waiting for it is sent (a connected phone
    /// gets no push), and what is in flight is not retried. A test is not dropped: it is
    /// sent while connected on purpose.
    pub fn device_online(&mut self, device: &DeviceId) {
        self.pending.remove(device);
        let in_flight = |j: &Job| j.due.is_none() && !j.queued;
        // A card push dropped here that may have shown still gets its card's outcome.
        let dropped: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| &j.device == device && j.test.is_none() && !j.followup && !in_flight(j))
            .map(|(id, _)| *id)
            .collect();
        for id in dropped {
            self.card_may_show(id);
        }
        self.jobs
            .retain(|_, j| &j.device != device || j.test.is_some() || j.followup || in_flight(j));
        if self.jobs.values().any(|j| &j.device == device) {
            self.online.insert(device.clone());
        }
    }

    /// Sends what is due: coalesced notifications, and retries.
    pub fn handle_timeout(&mut self, now: Time) {
        let due: Vec<DeviceId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.due <= now)
            .map(|(d, _)| d.clone())
            .collect();
        for device in due {
            let Some(p) = self.pending.remove(&device) else {
                continue;
            };
            let c = content(&p.event, p.count, self.mode, self.actions);
            self.fan_out(now, &device, &p.subs, c, now + PUSH_HOLD, None, None, self.ntfy, false);
        }
        let retry: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| !j.queued && j.due.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in retry {
            self.start(now, id);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn fan_out(
        &mut self,
        now: Time,
        device: &DeviceId,
        subs: &[Subscription],
        c: Content,
        expires: Time,
        topic: Option<String>,
        test: Option<TestKey>,
        ntfy: bool,
        followup: bool,
    ) -> usize {
        let channels = subs
            .iter()
            .cloned()
            .map(Channel::WebPush)
            .chain(ntfy.then_some(Channel::Ntfy));
        let mut made = 0;
        for channel in channels {
            if self.jobs.len() >= MAX_JOBS {
                log::warn!("push: {MAX_JOBS} notifications waiting; one for device {device:?} was dropped");
                self.last_error = Some(format!("{MAX_JOBS} notifications waiting: one was dropped"));
                break;
            }
            let id = self.next_job;
            self.next_job += 1;
            let job = Job {
                device: device.clone(),
                channel,
                content: c.clone(),
                expires,
                topic: topic.clone(),
                test: test.clone(),
                followup,
                superseded: false,
                maybe_delivered: false,
                attempts: 0,
                due: Some(now),
                queued: false,
            };
            self.jobs.insert(id, job);
            self.start(now, id);
            made += 1;
        }
        made
    }

    fn start(&mut self, now: Time, id: JobId) {
        let full = self.in_flight >= MAX_IN_FLIGHT;
        let Some(job) = self.jobs.get_mut(&id) else { return };
        if now >= job.expires {
            // It waited for a slot past its TTL (a card that has expired meanwhile).
            log::info!(
                "push to device {:?}: not sent: its time ran out while it waited",
                job.device
            );
            let (device, test) = (job.device.clone(), job.test.clone());
            self.jobs.remove(&id);
            self.forget_online(&device);
            if let Some(key) = test {
                self.test_done(key, false, "its time ran out before it could be sent".into());
            }
            return;
        }
        job.due = None;
        if full {
            job.queued = true;
            self.queue.push_back(id);
            return;
        }
        job.queued = false;
        job.attempts += 1;
        self.in_flight += 1;
        self.out.push_back(SendOut::Post(id));
    }

    /// A slot is free: the next queued job goes.
    fn start_queued(&mut self, now: Time) {
        while self.in_flight < MAX_IN_FLIGHT {
            let Some(id) = self.queue.pop_front() else { return };
            if self.jobs.get(&id).is_some_and(|j| j.queued) {
                self.start(now, id);
            }
        }
    }

    /// A device's last job is done: it leaves `online`.
    fn forget_online(&mut self, device: &DeviceId) {
        if !self.jobs.values().any(|j| &j.device == device) {
            self.online.remove(device);
        }
    }

    /// The push service's answer to a job (or why there was none).
    pub fn answer(&mut self, now: Time, id: JobId, answer: Answer) {
        let Some(job) = self.jobs.get(&id).filter(|j| j.due.is_none() && !j.queued) else {
            return;
        };
        self.in_flight -= 1;
        let mut verdict = verdict(&answer, job, now);
        let sees_it = job.test.is_none() && !job.followup && self.online.contains(&job.device);
        if matches!(answer, Answer::Failed(_)) {
            if let Some(j) = self.jobs.get_mut(&id) {
                j.maybe_delivered = true;
            }
        }
        let Some(job) = self.jobs.get(&id) else { return };
        if (sees_it || job.superseded) && matches!(verdict, Verdict::Retry(_)) {
            verdict = Verdict::Drop; // it is connected now and sees what waited
        }
        let (device, channel, test) = (job.device.clone(), job.channel.clone(), job.test.clone());
        let service = match &channel {
            Channel::WebPush(s) => origin_of(&s.endpoint),
            Channel::Ntfy => "ntfy".to_owned(),
        };
        let described = describe(&answer, &service);
        match verdict {
            Verdict::Retry(at) if test.is_none() => {
                log::info!(
                    "push to device {device:?}: {described}; retrying in {} s",
                    at.since(now).as_secs()
                );
                self.last_error = Some(described);
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.due = Some(at);
                }
                return self.start_queued(now);
            }
            Verdict::Sent => {
                log::debug!("push to device {device:?}: sent ({described})");
                self.card_sent(id);
            }
            Verdict::Gone => {
                log::info!("push to device {device:?}: {described}: the subscription is gone, removed");
                self.last_error = Some(described.clone());
                if let Channel::WebPush(s) = &channel {
                    self.out.push_back(SendOut::Gone {
                        device: device.clone(),
                        endpoint: s.endpoint.clone(),
                    });
                }
            }
            Verdict::Drop if answer == Answer::Withdrawn => {
                log::debug!("push to device {device:?}: {described}")
            }
            Verdict::Retry(_) | Verdict::Drop => {
                log_drop(&device, &answer, &described, &channel);
                self.last_error = Some(described.clone());
            }
        }
        if !matches!(verdict, Verdict::Sent) {
            self.card_may_show(id); // given up: it may still have shown (L66)
        }
        self.jobs.remove(&id);
        self.forget_online(&device);
        if let Some(key) = test {
            self.test_done(key, matches!(verdict, Verdict::Sent), described);
        }
        self.start_queued(now);
    }

    fn test_done(&mut self, key: TestKey, sent: bool, described: String) {
        let Some(wait) = self.tests.get_mut(&key) else { return };
        wait.left -= 1;
        wait.sent |= sent;
        if !sent {
            wait.errors.push(described);
        }
        if wait.left > 0 {
            return;
        }
        let wait = self.tests.remove(&key).expect("just looked up");
        let result = if wait.sent {
            Ok(())
        } else {
            Err(format!("push test failed: {}", wait.errors.join("; ")))
        };
        self.out.push_back(SendOut::TestResult {
            conn: key.0,
            id: key.1,
            result,
        });
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Sent,
    Gone,
    Retry(Time),
    Drop,
}

fn verdict(answer: &Answer, job: &Job, now: Time) -> Verdict {
    let backoff = FIRST_BACKOFF
        .saturating_mul(1 << job.attempts.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    let retry = |at: Time| {
        if job.attempts >= MAX_ATTEMPTS || at >= job.expires {
            Verdict::Drop
        } else {
            Verdict::Retry(at)
        }
    };
    match answer {
        Answer::Status { status: 200..=299, .. } => Verdict::Sent,
        Answer::Status { status: 404 | 410, .. } if matches!(job.channel, Channel::WebPush(_)) => Verdict::Gone,
        Answer::Status {
            status: 429,
            retry_after,
        } => retry(now + retry_after.unwrap_or(backoff).max(Duration::from_secs(1))),
        Answer::Status { status: 500..=599, .. } | Answer::Failed(_) => retry(now + backoff),
        Answer::Status { .. } | Answer::Invalid(_) | Answer::Withdrawn => Verdict::Drop,
    }
}

fn describe(answer: &Answer, service: &str) -> String {
    match answer {
        Answer::Status { status, .. } => format!("{status} from {service}"),
        Answer::Failed(why) => format!("no answer from {service}: {why}"),
        Answer::Invalid(why) => format!("not sent to {service}: {why}"),
        Answer::Withdrawn => format!("not sent to {service}: the subscription was removed"),
    }
}

fn log_drop(device: &DeviceId, answer: &Answer, described: &str, channel: &Channel) {
    let ntfy = matches!(channel, Channel::Ntfy);
    match answer {
        Answer::Status { status: 413, .. } => {
            log::error!(
                "push to device {device:?}: {described}: the payload is too large; this is a bug in hermes-mobile"
            )
        }
        Answer::Status { status: 401 | 403, .. } if ntfy => {
            log::warn!("push to device {device:?}: {described}: check MOBILE_NTFY_TOKEN and the topic's access rights")
        }
        Answer::Status { status: 401 | 403, .. } => log::warn!(
            "push to device {device:?}: {described}: the push service refused the VAPID signature; check \
             MOBILE_PUSH_SUBJECT (a mailto: or https: contact; Apple refuses localhost), the system clock, and \
             that the key in the state directory is the one the page subscribed with (turn notifications off and on)"
        ),
        Answer::Status { status: 300..=399, .. } => {
            log::warn!("push to device {device:?}: {described}: redirects are not followed")
        }
        _ => log::warn!("push to device {device:?}: {described}: given up"),
    }
}

/// `https://host[:port]` of an endpoint, for logs (never its path, which is a secret
/// capability of the subscription).
fn origin_of(endpoint: &str) -> String {
    hermes_mobile::push::Endpoint::parse(endpoint).map_or_else(|_| "the push service".to_owned(), |e| e.origin())
}

/// A `Topic` for a card: at most 32 characters of the URL-safe alphabet (RFC 8030 5.4).
pub fn topic(prompt: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(prompt.as_bytes());
    hermes_mobile::wire::push::b64url(&digest[..16])
}

mod outcomes;

#[cfg(test)]
mod tests;
