//! CPU per push (issue 18): the encryption (RFC 8291) and the VAPID signature of one
//! notification, beside a bare ECDH P-256 agreement in the same run, the floor under any
//! Web Push implementation. The POST itself (TLS to the push service) is measured with the
//! gateway in docs/PERFORMANCE.md.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use hermes_mobile_server::push::{ece, vapid::Vapid};
use ring::agreement::{agree_ephemeral, EphemeralPrivateKey, UnparsedPublicKey, ECDH_P256};
use ring::rand::SystemRandom;

fn browser_key() -> Vec<u8> {
    let rng = SystemRandom::new();
    let key = EphemeralPrivateKey::generate(&ECDH_P256, &rng).unwrap();
    key.compute_public_key().unwrap().as_ref().to_vec()
}

fn push(c: &mut Criterion) {
    let ua = browser_key();
    let auth = [7u8; 16];
    let payload = br#"{"web_push":8030,"notification":{"title":"Hermes replied","body":"Here is the summary of the three files you sent, with the parts that need your attention first.","navigate":"https://pi.example/#message=r-1","tag":"hermes-reply"},"hermes":{"kind":"reply","id":"r-1"}}"#;
    let (vapid, _) = Vapid::generate().unwrap();
    let rng = SystemRandom::new();
    let mut g = c.benchmark_group("push");
    g.bench_function("bare ECDH P-256 (keygen + agree)", |b| {
        b.iter(|| {
            let key = EphemeralPrivateKey::generate(&ECDH_P256, &rng).unwrap();
            agree_ephemeral(key, &UnparsedPublicKey::new(&ECDH_P256, black_box(&ua)), |s| s[0]).unwrap()
        })
    });
    g.bench_function("encrypt (RFC 8291, one record)", |b| {
        b.iter(|| ece::encrypt(black_box(&ua), &auth, black_box(payload)).unwrap())
    });
    g.bench_function("VAPID ES256 token", |b| {
        b.iter(|| {
            vapid.authorization(
                black_box("https://fcm.googleapis.com"),
                "mailto:o@example.org",
                1_800_000_000,
            )
        })
    });
    g.bench_function("encrypt + sign (one push)", |b| {
        b.iter(|| {
            let body = ece::encrypt(black_box(&ua), &auth, black_box(payload)).unwrap();
            let auth = vapid.authorization("https://fcm.googleapis.com", "mailto:o@example.org", 1_800_000_000);
            (body.len(), auth.len())
        })
    });
    g.finish();
}

criterion_group!(benches, push);
criterion_main!(benches);
