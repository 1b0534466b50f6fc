//! The sender on virtual time: no sockets, no sleeps.

use super::*;
use hermes_mobile::{MessageId, PromptId, PromptKind};

fn sub(n: u8) -> Subscription {
    Subscription {
        endpoint: format!("https://fcm.googleapis.com/fcm/send/{n}"),
        p256dh: "k".into(),
        auth: "a".into(),
        app_url: None,
    }
}

fn dev() -> DeviceId {
    DeviceId("phone".into())
}

fn at(secs: u64) -> Time {
    Time::from_secs(secs)
}

fn reply(n: u8) -> Notification {
    Notification {
        device: dev(),
        event: NotifyEvent::Reply {
            message: MessageId(format!("m{n}")),
            text: format!("reply {n}"),
        },
    }
}

fn card(ttl: u64) -> Notification {
    Notification {
        device: dev(),
        event: NotifyEvent::Card {
            prompt: PromptId("c1".into()),
            kind: PromptKind::ExecApproval,
            text: "ls".into(),
            ttl: Duration::from_secs(ttl),
            facts: Default::default(),
        },
    }
}

fn drain(s: &mut Sender) -> Vec<SendOut> {
    std::iter::from_fn(|| s.poll()).collect()
}

fn posts(s: &mut Sender) -> Vec<JobId> {
    drain(s)
        .into_iter()
        .map(|o| match o {
            SendOut::Post(id) => id,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn status(status: u16) -> Answer {
    Answer::Status {
        status,
        retry_after: None,
    }
}

#[test]
fn a_card_goes_at_once_to_each_subscription_and_ntfy_with_its_topic_and_ttl() {
    let mut s = Sender::new(ContentMode::Preview, true);
    s.notify(at(10), card(90), &[sub(1), sub(2)]);
    let ids = posts(&mut s);
    assert_eq!(ids.len(), 3);
    let channels: Vec<_> = ids.iter().map(|id| s.job(*id).unwrap().channel.clone()).collect();
    assert_eq!(
        channels,
        vec![Channel::WebPush(sub(1)), Channel::WebPush(sub(2)), Channel::Ntfy]
    );
    let job = s.job(ids[0]).unwrap();
    assert_eq!(job.ttl_secs(at(10)), 90, "a card's TTL is at most the time it has left");
    assert_eq!(job.topic.as_deref(), Some(topic("c1").as_str()));
    assert!(job.topic.as_ref().unwrap().len() <= 32);
    assert!(job.content.urgent);
}

#[test]
fn replies_within_the_window_make_one_notification_and_a_connected_phone_gets_none() {
    let mut s = Sender::new(ContentMode::Preview, false);
    s.notify(at(0), reply(1), &[sub(1)]);
    s.notify(at(1), reply(2), &[sub(1)]);
    s.notify(at(1), reply(3), &[sub(1)]);
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.poll_timeout(), Some(Time::ZERO + COALESCE));
    s.handle_timeout(at(2));
    let ids = posts(&mut s);
    assert_eq!(ids.len(), 1);
    let job = s.job(ids[0]).unwrap();
    assert_eq!(
        (job.content.title.as_str(), job.content.body.as_str()),
        ("Hermes: 3 new messages", "reply 3")
    );
    assert_eq!(job.topic, None);
    // One more, then the phone connects before the window ends: nothing is sent.
    s.notify(at(5), reply(4), &[sub(1)]);
    s.device_online(&dev());
    s.handle_timeout(at(10));
    assert!(drain(&mut s).is_empty());
}

#[test]
fn gone_subscriptions_are_reported_and_never_retried() {
    for code in [404, 410] {
        let mut s = Sender::new(ContentMode::Preview, false);
        s.notify(at(0), card(60), &[sub(1)]);
        let id = posts(&mut s)[0];
        s.answer(at(1), id, status(code));
        assert_eq!(
            drain(&mut s),
            vec![SendOut::Gone {
                device: dev(),
                endpoint: sub(1).endpoint
            }]
        );
        assert_eq!(s.poll_timeout(), None);
        assert_eq!(
            s.last_error(),
            Some(format!("{code} from https://fcm.googleapis.com").as_str())
        );
    }
}

#[test]
fn a_429_waits_for_retry_after_and_5xx_backs_off_within_the_ttl() {
    let mut s = Sender::new(ContentMode::Preview, false);
    s.notify(at(0), card(300), &[sub(1)]);
    let id = posts(&mut s)[0];
    s.answer(
        at(1),
        id,
        Answer::Status {
            status: 429,
            retry_after: Some(Duration::from_secs(30)),
        },
    );
    assert_eq!(s.poll_timeout(), Some(at(31)));
    s.handle_timeout(at(30));
    assert!(drain(&mut s).is_empty(), "not sooner than Retry-After");
    s.handle_timeout(at(31));
    assert_eq!(posts(&mut s), vec![id]);
    s.answer(at(32), id, status(503));
    assert_eq!(s.poll_timeout(), Some(at(42)), "second attempt failed: 10 s");
    s.handle_timeout(at(42));
    assert_eq!(posts(&mut s), vec![id]);
    s.answer(at(43), id, Answer::Failed("connection refused".into()));
    assert_eq!(s.poll_timeout(), Some(at(63)));
    s.handle_timeout(at(63));
    posts(&mut s);
    s.answer(at(64), id, status(201));
    assert_eq!(s.poll_timeout(), None);
    // Past the TTL, a failure is not retried.
    s.notify(at(100), card(3), &[sub(1)]);
    let id = posts(&mut s)[0];
    s.answer(at(101), id, status(500));
    assert_eq!(s.poll_timeout(), None);
    assert!(s.job(id).is_none());
}

#[test]
fn auth_failures_too_large_and_redirects_are_not_retried() {
    for code in [401, 403, 413, 301, 302, 400] {
        let mut s = Sender::new(ContentMode::Preview, false);
        s.notify(at(0), card(300), &[sub(1)]);
        let id = posts(&mut s)[0];
        s.answer(at(1), id, status(code));
        assert!(drain(&mut s).is_empty(), "{code}");
        assert_eq!(s.poll_timeout(), None, "{code}");
    }
}

#[test]
fn a_test_reports_once_every_subscription_answered_naming_the_status() {
    let test = |id: &str| Notification {
        device: dev(),
        event: NotifyEvent::Test {
            conn: ConnId(7),
            id: id.into(),
        },
    };
    let mut s = Sender::new(ContentMode::Preview, true);
    s.notify(at(0), test("t1"), &[sub(1), sub(2)]);
    let ids = posts(&mut s);
    assert_eq!(ids.len(), 2, "a test goes to Web Push only");
    s.answer(at(1), ids[0], status(410));
    let out = drain(&mut s);
    assert_eq!(out.len(), 1, "{out:?}");
    s.answer(at(1), ids[1], status(201));
    assert_eq!(
        drain(&mut s),
        vec![SendOut::TestResult {
            conn: ConnId(7),
            id: "t1".into(),
            result: Ok(())
        }]
    );

    s.notify(at(2), test("t2"), &[sub(3)]);
    let id = posts(&mut s)[0];
    s.answer(at(3), id, status(503));
    match drain(&mut s).as_slice() {
        [SendOut::TestResult {
            id, result: Err(why), ..
        }] => {
            assert_eq!(id, "t2");
            assert!(why.contains("503"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    s.notify(at(4), test("t3"), &[]);
    assert!(matches!(
        drain(&mut s).as_slice(),
        [SendOut::TestResult { result: Err(_), .. }]
    ));
}

#[test]
fn jobs_are_bounded_and_at_most_sixteen_are_in_flight() {
    let mut s = Sender::new(ContentMode::Preview, false);
    let subs: Vec<_> = (0..4).map(sub).collect();
    for n in 0..100 {
        let mut c = card(300);
        if let NotifyEvent::Card { prompt, .. } = &mut c.event {
            *prompt = PromptId(format!("c{n}"));
        }
        s.notify(at(0), c, &subs);
    }
    assert!(
        s.last_error().unwrap().contains("dropped"),
        "past MAX_JOBS a new one is dropped"
    );
    let first = posts(&mut s);
    assert_eq!(first.len(), MAX_IN_FLIGHT);
    assert_eq!(s.poll_timeout(), None, "queued jobs wait for a slot, not for a timer");
    // Each answer frees a slot for the next one.
    s.answer(at(1), first[0], status(201));
    assert_eq!(posts(&mut s).len(), 1);
    s.answer(at(1), first[1], status(503));
    assert_eq!(
        posts(&mut s).len(),
        1,
        "a retry waiting for its time frees its slot too"
    );
    let mut sent = MAX_IN_FLIGHT + 2;
    let mut open: Vec<JobId> = first[2..].to_vec();
    while let Some(id) = open.pop() {
        s.answer(at(2), id, status(201));
        let next = posts(&mut s);
        sent += next.len();
        open.extend(next);
    }
    assert_eq!(
        sent, MAX_JOBS,
        "every kept job went once (the 503 one waits for its retry)"
    );
}

#[test]
fn a_phone_that_reconnects_gets_no_retry_and_tests_run_one_at_a_time() {
    let mut s = Sender::new(ContentMode::Preview, false);
    s.notify(at(0), card(300), &[sub(1)]);
    let id = posts(&mut s)[0];
    s.device_online(&dev());
    s.answer(at(1), id, status(503));
    assert_eq!(s.poll_timeout(), None, "connected: what waited is on the phone already");
    let test = |id: &str| Notification {
        device: dev(),
        event: NotifyEvent::Test {
            conn: ConnId(1),
            id: id.into(),
        },
    };
    s.notify(at(2), test("t1"), &[sub(1)]);
    assert_eq!(posts(&mut s).len(), 1);
    s.notify(at(2), test("t2"), &[sub(1)]);
    match drain(&mut s).as_slice() {
        [SendOut::TestResult {
            id, result: Err(why), ..
        }] => assert!(id == "t2" && why.contains("already")),
        other => panic!("{other:?}"),
    }
    // A request that cannot be made is not retried.
    s.notify(at(3), card(300), &[sub(2)]);
    let id = posts(&mut s)[0];
    s.answer(at(3), id, Answer::Invalid("host not allowed".into()));
    assert!(s.job(id).is_none());
}

#[test]
fn a_job_that_waited_past_its_ttl_for_a_slot_is_not_sent() {
    let mut s = Sender::new(ContentMode::Preview, false);
    let subs: Vec<_> = (0..4).map(sub).collect();
    // 16 long-lived cards fill the slots; a short card waits behind them.
    for n in 0..4 {
        let mut c = card(3600);
        if let NotifyEvent::Card { prompt, .. } = &mut c.event {
            *prompt = PromptId(format!("long{n}"));
        }
        s.notify(at(0), c, &subs);
    }
    let first = posts(&mut s);
    assert_eq!(first.len(), MAX_IN_FLIGHT);
    s.notify(at(0), card(5), &[sub(9)]);
    assert!(posts(&mut s).is_empty(), "queued behind a full set of slots");
    // A slot frees after the short card's TTL: it is dropped, not sent with TTL 0.
    s.answer(at(10), first[0], status(201));
    assert!(posts(&mut s).is_empty());
    assert_eq!(s.jobs.len(), MAX_IN_FLIGHT - 1);
}

#[test]
fn withdrawn_jobs_go_quietly_and_online_devices_are_only_those_with_jobs() {
    let mut s = Sender::new(ContentMode::Preview, false);
    s.notify(at(0), card(300), &[sub(1)]);
    let id = posts(&mut s)[0];
    s.answer(at(1), id, Answer::Withdrawn);
    assert!(s.job(id).is_none());
    assert_eq!(s.last_error(), None, "a removed subscription is no failure");
    // Devices that come and go with nothing in flight leave no trace.
    for n in 0..1000 {
        s.device_online(&DeviceId(format!("d{n}")));
    }
    assert!(s.online.is_empty());
    s.notify(at(2), card(300), &[sub(1)]);
    let id = posts(&mut s)[0];
    s.device_online(&dev());
    assert!(s.online.contains(&dev()), "its in-flight job is not retried");
    s.answer(at(3), id, status(503));
    assert!(s.online.is_empty() && s.jobs.is_empty());
}

fn card_closed() -> Notification {
    Notification {
        device: dev(),
        event: NotifyEvent::CardClosed {
            prompt: PromptId("c1".into()),
            kind: PromptKind::ExecApproval,
            text: "ls".into(),
            option_id: Some("deny".into()),
            label: Some("Deny".into()),
            expired: false,
        },
    }
}

// L66: a card's outcome replaces its notification: on Web Push only, where the card's
// push went, with the card's Topic, silently, and to a connected phone as well.
#[test]
fn a_cards_outcome_goes_only_where_its_push_went_and_ends_its_retries() {
    let mut s = Sender::new(ContentMode::Preview, true);
    s.notify(at(0), card(90), &[sub(1), sub(2)]);
    let first = posts(&mut s);
    assert_eq!(first.len(), 3, "two subscriptions and ntfy");
    // sub(1) took it; sub(2) met a 5xx and waits for its retry; ntfy took it.
    s.answer(at(1), first[0], status(201));
    s.answer(at(1), first[1], status(503));
    s.answer(at(1), first[2], status(200));
    s.notify(at(2), card_closed(), &[sub(1), sub(2)]);
    let ids = posts(&mut s);
    assert_eq!(
        ids.len(),
        1,
        "sub(1) only: sub(2) never showed the card, ntfy is not replaced"
    );
    let job = s.job(ids[0]).unwrap();
    assert_eq!(job.channel, Channel::WebPush(sub(1)));
    assert_eq!(job.topic.as_deref(), Some(topic("c1").as_str()));
    assert!(job.content.silent && !job.content.urgent);
    assert_eq!(job.content.title, "Denied: ls");
    // sub(2)'s card push is never retried now; the outcome is, even once the phone is online.
    s.device_online(&dev());
    s.answer(at(3), ids[0], status(503));
    s.handle_timeout(at(3600));
    assert_eq!(posts(&mut s), vec![ids[0]], "only the outcome");
}

#[test]
fn a_card_push_in_flight_when_its_card_closes_is_not_retried_and_a_card_never_shown_gets_no_outcome() {
    let mut s = Sender::new(ContentMode::Preview, false);
    s.notify(at(0), card(90), &[sub(1)]);
    let card_push = posts(&mut s);
    s.notify(at(1), card_closed(), &[sub(1)]);
    let outcome = posts(&mut s);
    assert_eq!(outcome.len(), 1, "in flight: it may show");
    s.answer(at(2), outcome[0], status(201));
    s.answer(at(2), card_push[0], status(503));
    s.handle_timeout(at(3600));
    assert!(
        posts(&mut s).is_empty(),
        "the card must not come back after its outcome"
    );
    // A card whose push never went (a phone that subscribed after it) has nothing to replace.
    let mut s = Sender::new(ContentMode::Preview, false);
    s.notify(at(0), card(90), &[]);
    s.notify(at(1), card_closed(), &[sub(1)]);
    assert!(drain(&mut s).is_empty());
    // One notified before a restart (this run never saw it) may show anywhere: all get it.
    let mut s = Sender::new(ContentMode::Preview, false);
    s.notify(at(0), card_closed(), &[sub(1), sub(2)]);
    assert_eq!(posts(&mut s).len(), 2);
}

#[test]
fn a_card_push_that_got_no_answer_may_show_so_its_outcome_goes_there() {
    let mut s = Sender::new(ContentMode::Preview, false);
    s.notify(at(0), card(90), &[sub(1)]);
    let first = posts(&mut s);
    // A timeout: the push service may have taken it before the connection died.
    s.answer(at(1), first[0], Answer::Failed("timed out".into()));
    s.notify(at(2), card_closed(), &[sub(1)]);
    let outcome = posts(&mut s);
    assert_eq!(outcome.len(), 1);
    assert!(s.job(outcome[0]).unwrap().content.silent);
    s.handle_timeout(at(3600));
    assert!(posts(&mut s).is_empty(), "the card's own retry is gone");
}

#[test]
fn a_card_push_with_no_answer_dropped_when_the_phone_connects_still_gets_its_outcome() {
    let mut s = Sender::new(ContentMode::Preview, false);
    s.notify(at(0), card(90), &[sub(1)]);
    let first = posts(&mut s);
    s.answer(at(1), first[0], Answer::Failed("timed out".into()));
    // The phone saw it and opens the app: the retry goes, and the card is answered there.
    s.device_online(&dev());
    s.notify(at(5), card_closed(), &[sub(1)]);
    assert_eq!(posts(&mut s).len(), 1, "the lock screen may still show the card");
}
