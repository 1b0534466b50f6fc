//! A journal in memory with the store's semantics (records in order, reads that see every
//! record before them, commits that make them durable), for tests, fuzzing and the
//! in-memory driver: a crash keeps exactly what was committed.

use std::collections::{BTreeMap, HashMap};

use super::{DedupRow, Entry, Owed, Read, ReadResult, Record, Snapshot, Window};
use crate::ids::DeviceId;

#[derive(Debug, Clone, Default)]
struct State {
    entries: BTreeMap<(DeviceId, String), Entry>,
    reserved: HashMap<DeviceId, u64>,
    dedup: BTreeMap<(u8, DeviceId, String), DedupRow>,
    /// In the order owed.
    owed: Vec<Owed>,
    paired: BTreeMap<String, crate::devices::Paired>,
    codes: Vec<crate::devices::KeptCode>,
}

#[derive(Debug, Default)]
pub struct MemoryJournal {
    /// Every record applied: what reads see.
    working: State,
    /// What the last commit made durable: what a crash keeps.
    durable: State,
    /// The highest `Confirm` ticket applied since the last commit.
    unconfirmed: Option<u64>,
    /// `MOBILE_HISTORY=off`: entries neither held nor open go once committed.
    pub history_off: bool,
    /// Commits so far.
    pub commits: usize,
    /// Records applied since the last commit.
    pending: usize,
}

fn window_tag(w: Window) -> u8 {
    match w {
        Window::Seen => 0,
        Window::Delivered => 1,
    }
}

impl MemoryJournal {
    pub fn new(history: bool) -> MemoryJournal {
        MemoryJournal {
            history_off: !history,
            ..MemoryJournal::default()
        }
    }

    pub fn apply(&mut self, record: Record) {
        self.pending += 1;
        let s = &mut self.working;
        match record {
            Record::Put(entry) => {
                let reserved = s.reserved.entry(entry.device.clone()).or_default();
                *reserved = (*reserved).max(entry.seq);
                s.entries.insert((entry.device.clone(), entry.key.clone()), entry);
            }
            Record::Sent { device, keys } => {
                for key in keys {
                    if let Some(e) = s.entries.get_mut(&(device.clone(), key)) {
                        e.held = false;
                        e.blob = None;
                    }
                }
            }
            Record::Reserve { device, upto } => {
                let reserved = s.reserved.entry(device).or_default();
                *reserved = (*reserved).max(upto);
            }
            Record::Dedup {
                window,
                device,
                id,
                at,
                value,
            } => {
                let row = DedupRow {
                    window,
                    device: device.clone(),
                    id: id.clone(),
                    at,
                    value,
                };
                s.dedup.insert((window_tag(window), device, id), row);
            }
            Record::Forget { device } => s.entries.retain(|(d, _), e| *d != device || e.open),
            Record::Owe(owed) => {
                s.owed.retain(|o| o.device != owed.device || o.key != owed.key);
                s.owed.push(owed);
            }
            Record::Handed { device, key } => s.owed.retain(|o| o.device != device || o.key != key),
            Record::Confirm { ticket } => self.unconfirmed = Some(ticket),
            Record::Pair(p) => {
                s.paired.insert(p.id.clone(), p);
            }
            Record::Unpair { device } => {
                s.paired.remove(device.as_str());
                s.entries.retain(|(d, _), e| *d != device || !e.held);
            }
            Record::PairCode(code) => s.codes.push(code),
            Record::CodeSpent { digest } => s.codes.retain(|c| c.digest != digest),
            Record::Seen { device, at } => {
                if let Some(p) = s.paired.get_mut(device.as_str()) {
                    p.last_seen = Some(at);
                }
            }
        }
        if self.history_off {
            self.working.entries.retain(|_, e| e.held || e.open);
        }
    }

    /// Makes everything applied durable; the highest ticket it confirms.
    pub fn commit(&mut self) -> Option<u64> {
        self.durable = self.working.clone();
        self.commits += 1;
        self.pending = 0;
        self.unconfirmed.take()
    }

    /// Records wait for a commit.
    pub fn has_pending(&self) -> bool {
        self.pending > 0
    }

    /// How many records wait for a commit.
    pub fn pending_records(&self) -> usize {
        self.pending
    }

    /// Loses what was not committed, as a crash (or a rolled-back transaction) would; the
    /// highest ticket it held, which the store would report failed.
    pub fn crash(&mut self) -> Option<u64> {
        self.working = self.durable.clone();
        self.pending = 0;
        self.unconfirmed.take()
    }

    pub fn read(&self, read: &Read) -> ReadResult {
        let s = &self.working;
        let of = |device: &DeviceId| -> Vec<Entry> {
            let mut v: Vec<Entry> = s.entries.values().filter(|e| &e.device == device).cloned().collect();
            v.sort_by_key(|e| e.seq);
            v
        };
        match read {
            Read::After { device, after, limit } => {
                let mut v: Vec<Entry> = of(device).into_iter().filter(|e| e.seq > *after).collect();
                let more = v.len() > *limit;
                v.truncate(*limit);
                ReadResult {
                    entries: v,
                    more,
                    ..ReadResult::default()
                }
            }
            Read::Before { device, before, limit } => {
                let mut v: Vec<Entry> = of(device)
                    .into_iter()
                    .filter(|e| before.is_none_or(|b| e.seq < b))
                    .collect();
                let more = v.len() > *limit;
                let v = v.split_off(v.len().saturating_sub(*limit));
                ReadResult {
                    entries: v,
                    more,
                    ..ReadResult::default()
                }
            }
            Read::Owed { keys, limit, max_bytes } => {
                let wanted = |o: &&Owed| keys.iter().any(|k| k.device == o.device && k.key == o.key);
                let (mut owed, mut bytes) = (Vec::new(), 0);
                for o in s.owed.iter().filter(wanted).take(*limit) {
                    bytes += o.body.len() + o.blob.as_ref().map_or(0, Vec::len);
                    if bytes > *max_bytes && !owed.is_empty() {
                        break;
                    }
                    owed.push(o.clone());
                }
                ReadResult {
                    owed,
                    ..ReadResult::default()
                }
            }
        }
    }

    /// What a restart reads: the durable state.
    pub fn snapshot(&self) -> Snapshot {
        let s = &self.durable;
        let mut seqs: BTreeMap<DeviceId, u64> = s.reserved.iter().map(|(d, n)| (d.clone(), *n)).collect();
        for e in s.entries.values() {
            let n = seqs.entry(e.device.clone()).or_default();
            *n = (*n).max(e.seq);
        }
        let mut held: Vec<Entry> = s.entries.values().filter(|e| e.held).cloned().collect();
        held.sort_by_key(|e| e.seq);
        let mut open_cards: Vec<Entry> = s.entries.values().filter(|e| e.open).cloned().collect();
        open_cards.sort_by_key(|e| e.seq);
        let mut dedup: Vec<DedupRow> = s.dedup.values().cloned().collect();
        dedup.sort_by_key(|r| r.at);
        Snapshot {
            seqs: seqs.into_iter().collect(),
            seq_floor: 0,
            held,
            open_cards,
            dedup,
            owed: s.owed.clone(),
            paired: s.paired.values().cloned().collect(),
            codes: s.codes.clone(),
        }
    }

    /// Every entry of a device, in seq order (what `hermes-mobile history` prints).
    pub fn entries(&self, device: &DeviceId) -> Vec<Entry> {
        self.read(&Read::After {
            device: device.clone(),
            after: 0,
            limit: usize::MAX,
        })
        .entries
    }
}
