//! The journal's reads (issue 24), as the loop gets them: a read sent to the journal
//! thread, served by SQLite, and its answer drained after the `mio::Waker` fires.
//!
//! The journal holds one device's full history (5,000 entries, `MOBILE_HISTORY_ITEMS`'s
//! default: a user's text and the agent's reply, turn after turn, with bodies as the core
//! writes them) beside 63 other devices with 200 entries each. The goal (issue 24): a
//! 200-item `history` page in under 5 ms. Beside it in the same run, the smallest read
//! there is (one entry) is the floor of the thread round trip, and a resume after the
//! newest 200 the other kind of read. The core's turning of entries into frames is
//! measured through the protocol in docs/PERFORMANCE.md.
//!
//! `cargo bench -p hermes-mobile-server --bench journal`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use hermes_mobile::ids::DeviceId;
use hermes_mobile::journal::body::Body;
use hermes_mobile::journal::{Entry, Read, ReadResult, Record};
use hermes_mobile::Time;
use hermes_mobile_server::journal::{Clock, Done, JournalSettings, JournalWorker, Opened, Store};
use mio::{Events, Poll, Token, Waker};

const ITEMS: u64 = 5000;
const OTHER_DEVICES: u64 = 63;
const OTHER_ITEMS: u64 = 200;

/// The journal thread and the poll its waker wakes.
struct Journal {
    worker: JournalWorker,
    poll: Poll,
    events: Events,
    token: u64,
    dir: PathBuf,
}

impl Journal {
    fn open(dir: PathBuf) -> Journal {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let settings = JournalSettings::new(dir.join("journal.sqlite3"));
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        let clock = Clock { origin_unix_ms: now };
        let Opened::Ready { store, .. } = Store::open(&settings, clock) else {
            panic!("the journal did not open")
        };
        let poll = Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), Token(0)).unwrap());
        Journal {
            worker: store.start(waker).unwrap(),
            poll,
            events: Events::with_capacity(4),
            token: 0,
            dir,
        }
    }

    /// The next report of the thread, waiting on the waker as the loop does.
    fn next(&mut self) -> Done {
        loop {
            if let Some(done) = self.worker.poll() {
                return done;
            }
            self.poll.poll(&mut self.events, Some(Duration::from_secs(10))).unwrap();
        }
    }

    fn write_and_wait(&mut self, mut records: Vec<Record>) {
        self.token += 1;
        records.push(Record::Confirm { ticket: self.token });
        self.worker.write(records);
        match self.next() {
            Done::Committed { ticket } if ticket == self.token => {}
            other => panic!("expected the commit of {}, got {other:?}", self.token),
        }
    }

    fn read(&mut self, read: Read) -> ReadResult {
        self.token += 1;
        self.worker.read(self.token, read);
        match self.next() {
            Done::Read { token, result } if token == self.token => result.unwrap(),
            other => panic!("expected the read {}, got {other:?}", self.token),
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.worker.shutdown();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `n`th entry of a device: even seqs are the user's texts, odd ones the agent's
/// replies (a few sentences, as a reply usually is).
fn entry(device: &DeviceId, seq: u64, at: Time) -> Entry {
    let body = if seq % 2 == 0 {
        Body::user_text(
            &format!("web-{seq:08x}-4d2a"),
            "Can you check whether the backup of the photos finished last night?",
        )
    } else {
        Body::message(
            &format!("demo-run-m{seq}"),
            "The backup finished at 03:12: 1,284 photos, 6.1 GB, no errors. The next one is \
             scheduled for tonight at 03:00. The disk is 71% full; at this rate it lasts about \
             four more months.",
            true,
            false,
        )
    };
    Entry {
        device: device.clone(),
        key: format!("{}:{seq}", if seq % 2 == 0 { 'u' } else { 'm' }),
        seq,
        first_seq: seq,
        at,
        held: false,
        open: false,
        deadline: None,
        body: body.to_json(),
        blob: None,
    }
}

fn fill(j: &mut Journal, device: &DeviceId, items: u64) {
    for start in (1..=items).step_by(500) {
        let batch = (start..(start + 500).min(items + 1))
            .map(|seq| Record::Put(entry(device, seq, Time::from_millis(seq))))
            .collect();
        j.write_and_wait(batch);
    }
}

fn history(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("hermes-journal-bench-{}", std::process::id()));
    let mut j = Journal::open(dir);
    let phone = DeviceId("phone".into());
    fill(&mut j, &phone, ITEMS);
    for d in 0..OTHER_DEVICES {
        fill(&mut j, &DeviceId(format!("other-{d}")), OTHER_ITEMS);
    }
    let page = j.read(Read::Before {
        device: phone.clone(),
        before: None,
        limit: 200,
    });
    assert_eq!((page.entries.len(), page.more), (200, true));
    assert_eq!(page.entries.last().map(|e| e.seq), Some(ITEMS));

    let mut g = c.benchmark_group("journal_5000");
    g.bench_function("history page of 200, newest", |b| {
        b.iter(|| {
            j.read(Read::Before {
                device: phone.clone(),
                before: None,
                limit: black_box(200),
            })
        })
    });
    g.bench_function("history page of 200, the oldest (before 201)", |b| {
        b.iter(|| {
            j.read(Read::Before {
                device: phone.clone(),
                before: Some(201),
                limit: black_box(200),
            })
        })
    });
    g.bench_function("resume after the newest 200", |b| {
        b.iter(|| {
            j.read(Read::After {
                device: phone.clone(),
                after: black_box(ITEMS - 200),
                limit: usize::MAX,
            })
        })
    });
    g.bench_function("baseline: history page of 1", |b| {
        b.iter(|| {
            j.read(Read::Before {
                device: phone.clone(),
                before: None,
                limit: black_box(1),
            })
        })
    });
    g.finish();
}

criterion_group!(benches, history);
criterion_main!(benches);
