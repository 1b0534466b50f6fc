//! A card's outcome (issue 25, L66): where a card's push went, so that its closing replaces
//! it there, and the card's own push is never retried once it has closed.

use hermes_mobile::push::{Notification, Subscription, PUSH_HOLD};
use hermes_mobile::Time;

use super::{content, topic, Channel, JobId, Sender, MAX_SENT_CARDS};

impl Sender {
    /// L66: the outcome goes where the card's push went or is going (for a card notified
    /// before a restart, which this run cannot know, to every subscription), with the card's
    /// `Topic` (a push service still holding the card's push replaces it, RFC 8030 5.4).
    /// The card's push not sent yet goes unsent, and one in flight is not retried. Web
    /// Push only: an ntfy message is not replaced, and its buttons clear it.
    pub(super) fn card_closed(&mut self, now: Time, n: &Notification, prompt: &str, subs: &[Subscription]) {
        let topic = topic(prompt);
        let mut reached: Vec<String> = Vec::new();
        self.jobs.retain(|_, j| {
            if j.device != n.device || j.topic.as_deref() != Some(&topic) || j.followup {
                return true;
            }
            // In flight, or a POST with no answer: it may show on the phone.
            let may_show = j.maybe_delivered || !(j.due.is_some() || j.queued);
            if let (Channel::WebPush(s), true) = (&j.channel, may_show) {
                reached.push(s.endpoint.clone());
            }
            if j.due.is_some() || j.queued {
                return false; // not sent again: its card is closed
            }
            j.superseded = true;
            true
        });
        self.sent_cards.retain(|(d, t, endpoint)| {
            let this = *d == n.device && *t == topic;
            if this {
                reached.push(endpoint.clone());
            }
            !this
        });
        let before = self.notified_cards.len();
        self.notified_cards.retain(|(d, t)| !(*d == n.device && *t == topic));
        let this_run = self.notified_cards.len() < before;
        // A card notified before a restart may show on any of the device's subscriptions.
        let subs: Vec<Subscription> = subs
            .iter()
            .filter(|s| !this_run || reached.contains(&s.endpoint))
            .cloned()
            .collect();
        if subs.is_empty() {
            return; // nothing shows the card: nothing to replace
        }
        let c = content(&n.event, 1, self.mode, self.actions);
        self.fan_out(
            now,
            &n.device,
            &subs,
            c,
            now + PUSH_HOLD,
            Some(topic),
            None,
            false,
            true,
        );
    }

    /// A card's push leaves the queue unsent after a POST that got no answer: it may show
    /// all the same, so its outcome goes there too (L66).
    pub(super) fn card_may_show(&mut self, id: JobId) {
        if self.jobs.get(&id).is_some_and(|j| j.maybe_delivered) {
            self.card_sent(id);
        }
    }

    /// A card's push was taken by its push service: its outcome will go there (L66).
    pub(super) fn card_sent(&mut self, id: JobId) {
        let Some(job) = self.jobs.get(&id).filter(|j| !j.followup && !j.superseded) else {
            return;
        };
        let (Some(topic), Channel::WebPush(sub)) = (&job.topic, &job.channel) else {
            return;
        };
        if self.sent_cards.len() >= MAX_SENT_CARDS {
            // Forgotten where it went: its closing then goes to every subscription, as
            // for a card from before a restart.
            if let Some((device, topic, _)) = self.sent_cards.pop_front() {
                self.notified_cards.retain(|(d, t)| !(*d == device && *t == topic));
            }
        }
        self.sent_cards
            .push_back((job.device.clone(), topic.clone(), sub.endpoint.clone()));
    }
}
