//! Paired devices and pairing codes in the store (issue 26, L69–L73): kept as digests,
//! read back at start-up, replaced, revoked with what was held, expired codes left out;
//! and what the CLI reads and writes with the gateway stopped.

use std::time::Duration;

use hermes_mobile::devices::{KeptCode, Paired};
use hermes_mobile::journal::Record;
use hermes_mobile::Time;

use super::tests::{clock, dev, entry, open, Dir, Rig};
use super::*;

fn phone(id: &str, token: &str, owner: bool) -> Paired {
    Paired::new(id, "Pixel", "android", owner, 1_800_000_000_000, token)
}

#[test]
fn devices_and_codes_round_trip_and_a_revocation_takes_what_was_held() {
    let dir = Dir::new("devices");
    let (settings, clock) = (dir.settings(), clock());
    let (store, _) = open(&settings, clock);
    let mut rig = Rig::start(store);
    let mut held = entry("tel-2", "m:1", 1);
    held.held = true;
    // Expired by the time the store reads it back (its start-up compares with the wall).
    let soon = KeptCode::new("code-soon", false, Time::ZERO);
    let later = KeptCode::new("code-later", true, Time::from_secs(3600));
    let spent = KeptCode::new("code-spent", false, Time::from_secs(3600));
    rig.worker.write(vec![
        Record::Pair(phone("tel-1", "token-one", true)),
        Record::Pair(phone("tel-2", "token-two", false)),
        Record::Put(held),
        Record::Put(entry("tel-2", "u:2", 2)),
        Record::Seen {
            device: dev("tel-1"),
            at: 1_800_000_100_000,
        },
        Record::PairCode(soon),
        Record::PairCode(later.clone()),
        Record::PairCode(spent.clone()),
        Record::CodeSpent { digest: spent.digest },
        // A reinstall: the new token's digest replaces the old.
        Record::Pair(phone("tel-1", "token-one-again", true)),
        Record::Unpair { device: dev("tel-2") },
        Record::Confirm { ticket: 1 },
    ]);
    rig.committed(1);
    drop(rig);

    // Reopened by a run that began two minutes later: the expired code is not read back,
    // and the other keeps its moment on the wall, two minutes nearer on the run's clock.
    let later_clock = Clock {
        origin_unix_ms: clock.origin_unix_ms + 120_000,
    };
    let (_store, snapshot) = open(&settings, later_clock);
    assert_eq!(snapshot.paired, vec![phone("tel-1", "token-one-again", true)]);
    assert_eq!(snapshot.paired[0].last_seen, None, "pairing again starts it afresh");
    assert_eq!(snapshot.codes.len(), 1);
    assert_eq!(snapshot.codes[0].digest, later.digest);
    assert_eq!(
        snapshot.codes[0].expires,
        Time::from_secs(3600) - Duration::from_secs(120)
    );
    // Revoking dropped what was held for tel-2, not its history.
    let left: Vec<String> = read_device(&settings.path, &dev("tel-2"))
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(left, ["u:2"]);
    // Nothing in the file is a token or a code.
    let bytes = std::fs::read(&settings.path).unwrap();
    for secret in ["token-one", "token-two", "code-later"] {
        assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "{secret}");
    }
}

#[test]
fn the_cli_lists_revokes_and_keeps_codes_with_the_gateway_stopped() {
    let dir = Dir::new("devices-cli");
    let (settings, clock) = (dir.settings(), clock());
    let (store, _) = open(&settings, clock);
    let mut rig = Rig::start(store);
    rig.worker.write(vec![
        Record::Pair(phone("tel-1", "token-one", false)),
        Record::Put(entry("tel-1", "u:1", 1)),
        Record::Put(entry("tel-1", "m:2", 2)),
        Record::Confirm { ticket: 1 },
    ]);
    rig.committed(1);
    drop(rig);
    let listed = read_devices(&settings.path).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].device.id.as_str(), listed[0].history), ("tel-1", 2));

    let now = now_unix_ms();
    let code = KeptCode::new("offline-code", true, Time::ZERO);
    devices::offline(&settings.path, |c| devices::add_code(c, &code, now + 600_000)).unwrap();
    assert_eq!(
        devices::offline(&settings.path, |c| devices::codes_waiting(c, now)).unwrap(),
        1
    );
    let revoked = devices::offline(&settings.path, |c| devices::revoke(c, &dev("tel-1"), true)).unwrap();
    assert!(revoked);
    assert!(read_devices(&settings.path).unwrap().is_empty());
    assert!(
        read_device(&settings.path, &dev("tel-1")).unwrap().is_empty(),
        "--forget"
    );
    let again = devices::offline(&settings.path, |c| devices::revoke(c, &dev("tel-1"), false)).unwrap();
    assert!(!again);
    // The gateway's next start reads the code back.
    let (_store, snapshot) = open(&settings, clock);
    assert_eq!(snapshot.codes.len(), 1);
    assert!(snapshot.codes[0].owner);
}
