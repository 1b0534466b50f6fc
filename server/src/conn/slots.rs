//! Who gets a slot of `MOBILE_MAX_CONNECTIONS` (issue 23 #1, decisions L54, refining L21).
//!
//! One counter for every socket let 1,030 idle sockets, re-opened as the hello timeout
//! closed them, keep the owner's phone out with 503s. So sockets that have not passed a
//! `hello` (plain HTTP ones too) get a share of their own, a quarter of the limit, and at
//! most [`PER_SOURCE`] from one address (an IPv4 address or an IPv6 /64). When either is
//! full, an unauthenticated socket is dropped to make room: the oldest of that address, or
//! the oldest of the address holding the most of them. So a flood makes room out of its own
//! sockets, and a phone between its upgrade and its `hello` (one socket of its address) is
//! not the one dropped. A new socket is never refused for them, and an authenticated one is
//! never dropped. Loopback peers have no per-address cap (a reverse proxy on the same host
//! is one address for every phone); once their upgrade is read they are grouped by the
//! client address the proxy reported.
//!
//! Pure: the server lists its sockets, this decides.

use std::collections::HashMap;
use std::time::Instant;

use hermes_mobile::throttle::SourceKey;

/// Unauthenticated sockets from one address, at most.
pub const PER_SOURCE: usize = 16;

/// One socket the server holds, as the rule sees it.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    pub key: usize,
    pub accepted_at: Instant,
    /// `None` for loopback (no per-address cap).
    pub source: Option<SourceKey>,
    /// Whose flood it would be part of: its address, or for a loopback socket the client
    /// address a proxy reported (all loopback sockets without one are one group).
    pub group: SourceKey,
    pub authenticated: bool,
}

/// What to do with a new socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Admit,
    /// Admit it, and drop this unauthenticated socket first.
    AdmitDropping(usize),
    /// Every slot is an authenticated connection's: 503 (L21).
    Refuse,
}

/// The unauthenticated sockets' share of `max`: a quarter, at least one.
pub fn unauthenticated_share(max: usize) -> usize {
    (max / 4).max(1)
}

/// Decides for a new socket from `source`, given the live sockets.
pub fn admit(slots: &[Slot], source: Option<SourceKey>, max: usize) -> Admission {
    let unauth = || slots.iter().filter(|s| !s.authenticated);
    if let Some(src) = source {
        let own = || unauth().filter(|s| s.source == Some(src));
        if own().count() >= PER_SOURCE {
            return own()
                .min_by_key(|s| s.accepted_at)
                .map_or(Admission::Refuse, |s| Admission::AdmitDropping(s.key));
        }
    }
    let full = unauth().count() >= unauthenticated_share(max) || slots.len() >= max;
    match (full, oldest_of_largest_group(slots)) {
        (false, _) => Admission::Admit,
        (true, Some(key)) => Admission::AdmitDropping(key),
        (true, None) => Admission::Refuse,
    }
}

/// The oldest unauthenticated socket of the group holding the most of them (ties: the
/// group whose oldest is older).
fn oldest_of_largest_group(slots: &[Slot]) -> Option<usize> {
    let mut groups: HashMap<SourceKey, (usize, Slot)> = HashMap::new();
    for s in slots.iter().filter(|s| !s.authenticated) {
        let entry = groups.entry(s.group).or_insert((0, *s));
        entry.0 += 1;
        if s.accepted_at < entry.1.accepted_at {
            entry.1 = *s;
        }
    }
    groups
        .into_values()
        .max_by(|(n, a), (m, b)| n.cmp(m).then(b.accepted_at.cmp(&a.accepted_at)))
        .map(|(_, oldest)| oldest.key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn slots(spec: &[(u8, bool)]) -> Vec<Slot> {
        let t0 = Instant::now();
        spec.iter()
            .enumerate()
            .map(|(i, &(ip, authenticated))| Slot {
                key: i,
                accepted_at: t0 + Duration::from_millis(i as u64),
                source: (ip != 0).then(|| SourceKey::of([192, 0, 2, ip].into())),
                group: SourceKey::of([192, 0, 2, ip].into()),
                authenticated,
            })
            .collect()
    }

    fn src(ip: u8) -> Option<SourceKey> {
        Some(SourceKey::of([192, 0, 2, ip].into()))
    }

    #[test]
    fn the_rule_table() {
        // decisions L54: (sockets held, new socket's address, max) -> admission
        let idle_from_1: Vec<(u8, bool)> = vec![(1, false); PER_SOURCE];
        let mut mixed = vec![(9, true); 6];
        mixed.extend([(2, false), (3, false)]);
        // (sockets held as (address, authenticated), the new one's address, max, answer)
        type Case = (Vec<(u8, bool)>, Option<SourceKey>, usize, Admission);
        let cases: Vec<Case> = vec![
            (vec![], src(1), 8, Admission::Admit),
            // Per address: its own oldest goes, nobody else's.
            (
                [vec![(2, false)], idle_from_1.clone()].concat(),
                src(1),
                100,
                Admission::AdmitDropping(1),
            ),
            (idle_from_1.clone(), src(2), 100, Admission::Admit),
            // Loopback has no per-address cap (a local proxy is everyone).
            (vec![(0, false); PER_SOURCE], None, 100, Admission::Admit),
            // The unauthenticated share (a quarter) is full: the oldest of them goes.
            (vec![(2, false), (3, false)], src(4), 8, Admission::AdmitDropping(0)),
            // Every slot taken: an unauthenticated socket makes room for the new one...
            (mixed.clone(), src(4), 8, Admission::AdmitDropping(6)),
            // ...and only authenticated ones left means 503.
            (vec![(9, true); 8], src(4), 8, Admission::Refuse),
            (vec![(9, true); 7], src(4), 8, Admission::Admit),
        ];
        for (i, (held, source, max, want)) in cases.into_iter().enumerate() {
            assert_eq!(admit(&slots(&held), source, max), want, "case {i}");
        }
    }

    #[test]
    fn a_flood_makes_room_out_of_its_own_sockets() {
        // The review's case: a phone between its upgrade and its hello (address 7, older
        // than the flood's sockets) is not dropped for a flood from elsewhere.
        let mut held = vec![(7, false)];
        held.extend([(0, false); 5]);
        held.extend([(3, false); 2]);
        assert_eq!(admit(&slots(&held), None, 32), Admission::AdmitDropping(1));
        // Behind a local proxy: grouped by the client address the proxy reported.
        let mut proxied = slots(&[(0, false); 8]);
        for (i, s) in proxied.iter_mut().enumerate() {
            s.group = SourceKey::of([198, 51, 100, if i == 0 { 1 } else { 2 }].into());
        }
        assert_eq!(admit(&proxied, None, 32), Admission::AdmitDropping(1));
    }

    #[test]
    fn an_authenticated_socket_is_never_the_one_dropped() {
        let held = slots(&[(1, true), (1, false), (1, true), (2, false)]);
        for max in 1..8 {
            if let Admission::AdmitDropping(key) = admit(&held, src(1), max) {
                assert!(!held[key].authenticated, "max {max}");
            }
        }
    }
}
