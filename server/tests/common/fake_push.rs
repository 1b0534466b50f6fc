//! A fake push service on loopback over TLS (issue 18): it checks each POST the way a real
//! one does and decrypts it the way the browser would, with a second implementation that
//! shares no code with the gateway (RustCrypto's p256, hkdf and aes-gcm; the gateway uses
//! ring). It answers each request from a script (201 unless told otherwise).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes128Gcm, Nonce};
use base64::Engine;
use hkdf::Hkdf;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::{PublicKey, SecretKey};
use sha2::Sha256;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

pub fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

fn unb64(s: &str) -> Vec<u8> {
    B64.decode(s.trim_end_matches('=')).expect("base64url")
}

/// A browser's side of a subscription: the key pair and auth secret the page would make.
pub struct Browser {
    secret: SecretKey,
    pub auth: [u8; 16],
}

impl Browser {
    pub fn new() -> Browser {
        let mut bytes = [0u8; 48];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).unwrap();
        let secret = SecretKey::from_slice(&bytes[..32]).expect("a random scalar is a key");
        Browser {
            secret,
            auth: bytes[32..].try_into().unwrap(),
        }
    }

    /// The uncompressed public point, as `p256dh` carries it.
    pub fn p256dh(&self) -> Vec<u8> {
        use p256::elliptic_curve::sec1::ToEncodedPoint;
        self.secret.public_key().to_encoded_point(false).as_bytes().to_vec()
    }

    /// The `subscription` object of a `push_subscribe`.
    pub fn subscription(&self, endpoint: &str) -> serde_json::Value {
        serde_json::json!({"endpoint": endpoint, "keys": {"p256dh": b64(&self.p256dh()), "auth": b64(&self.auth)}})
    }

    /// RFC 8291 decryption of one `aes128gcm` body.
    pub fn decrypt(&self, body: &[u8]) -> Result<Vec<u8>, String> {
        if body.len() < 86 + 17 {
            return Err(format!("body of {} bytes is too short", body.len()));
        }
        let (salt, rs, idlen) = (
            &body[..16],
            u32::from_be_bytes(body[16..20].try_into().unwrap()),
            body[20],
        );
        if idlen != 65 || rs < 18 {
            return Err(format!("bad header: rs {rs}, idlen {idlen}"));
        }
        let as_public = &body[21..86];
        let record = &body[86..];
        if record.len() > rs as usize {
            return Err("more than one record".into());
        }
        let sender = PublicKey::from_sec1_bytes(as_public).map_err(|e| format!("sender key: {e}"))?;
        let shared = p256::ecdh::diffie_hellman(self.secret.to_nonzero_scalar(), sender.as_affine());
        let ua_public = self.p256dh();
        let mut key_info = b"WebPush: info\0".to_vec();
        key_info.extend_from_slice(&ua_public);
        key_info.extend_from_slice(as_public);
        let mut ikm = [0u8; 32];
        Hkdf::<Sha256>::new(Some(&self.auth), shared.raw_secret_bytes())
            .expand(&key_info, &mut ikm)
            .unwrap();
        let prk = Hkdf::<Sha256>::new(Some(salt), &ikm);
        let (mut cek, mut nonce) = ([0u8; 16], [0u8; 12]);
        prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek).unwrap();
        prk.expand(b"Content-Encoding: nonce\0", &mut nonce).unwrap();
        let mut plain = Aes128Gcm::new_from_slice(&cek)
            .unwrap()
            .decrypt(Nonce::from_slice(&nonce), record)
            .map_err(|_| "the record does not decrypt".to_owned())?;
        // The last record ends with 0x02, then zero padding.
        while plain.last() == Some(&0) {
            plain.pop();
        }
        if plain.pop() != Some(2) {
            return Err("no last-record delimiter".into());
        }
        Ok(plain)
    }
}

/// One POST the service took, checked and decrypted.
#[derive(Debug, Clone)]
pub struct Push {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub at: Instant,
    /// The VAPID claims, once the signature verified against the key in `k=`.
    pub claims: serde_json::Value,
    /// `k=` of the Authorization header.
    pub vapid_key: String,
    /// The decrypted payload, if the path is a known subscription's.
    pub payload: Option<serde_json::Value>,
    /// Why the request is not what a push service accepts, if it is not.
    pub problem: Option<String>,
}

impl Push {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

type Answer = (u16, Vec<(String, String)>);

struct State {
    pushes: Vec<Push>,
    script: VecDeque<Answer>,
    browsers: Vec<(String, Arc<Browser>)>,
}

pub struct FakePush {
    pub port: u16,
    pub ca_pem: String,
    state: Arc<(Mutex<State>, Condvar)>,
    /// TCP connections accepted, whatever came of them.
    pub connections: Arc<AtomicUsize>,
}

impl FakePush {
    pub fn start() -> FakePush {
        let (config, ca_pem) = tls_config();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new((
            Mutex::new(State {
                pushes: Vec::new(),
                script: VecDeque::new(),
                browsers: Vec::new(),
            }),
            Condvar::new(),
        ));
        let connections = Arc::new(AtomicUsize::new(0));
        let (shared, count) = (Arc::clone(&state), Arc::clone(&connections));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let (state, config) = (Arc::clone(&shared), Arc::clone(&config));
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    serve(rustls::StreamOwned::new(conn, stream), port, &state);
                });
            }
        });
        FakePush {
            port,
            ca_pem,
            state,
            connections,
        }
    }

    /// A new browser subscribed at `/push/<name>` of this service; its endpoint.
    pub fn browser(&self, name: &str) -> (Arc<Browser>, String) {
        let browser = Arc::new(Browser::new());
        let path = format!("/push/{name}");
        self.state
            .0
            .lock()
            .unwrap()
            .browsers
            .push((path.clone(), Arc::clone(&browser)));
        (browser, format!("https://127.0.0.1:{}{path}", self.port))
    }

    /// The next answers, in order (then 201 again).
    pub fn answer_next(&self, status: u16, headers: &[(&str, &str)]) {
        let headers = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.state.0.lock().unwrap().script.push_back((status, headers));
    }

    pub fn pushes(&self) -> Vec<Push> {
        self.state.0.lock().unwrap().pushes.clone()
    }

    /// Waits until `n` pushes came (at most `within`); all of them.
    pub fn wait_for(&self, n: usize, within: Duration) -> Vec<Push> {
        let deadline = Instant::now() + within;
        let (lock, cv) = &*self.state;
        let mut state = lock.lock().unwrap();
        while state.pushes.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{} pushes came, not {n}: {:#?}",
                state.pushes.len(),
                state.pushes
            );
            state = cv.wait_timeout(state, left).unwrap().0;
        }
        state.pushes.clone()
    }
}

/// A test CA and a certificate for 127.0.0.1 and localhost signed by it.
fn tls_config() -> (Arc<rustls::ServerConfig>, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "fake push CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf_params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let leaf = leaf_params
        .signed_by(&leaf_key, &rcgen::Issuer::from_params(&ca_params, &ca_key))
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap(),
        )
        .unwrap();
    (Arc::new(config), ca.pem())
}

fn serve<S: Read + Write>(mut stream: S, port: u16, state: &(Mutex<State>, Condvar)) {
    let Some((head, body)) = read_request(&mut stream) else {
        return;
    };
    let mut lines = head.lines();
    let request_line = lines.next().unwrap_or_default().to_owned();
    let path = request_line.split(' ').nth(1).unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect();
    let mut push = Push {
        path: path.clone(),
        headers,
        at: Instant::now(),
        claims: serde_json::Value::Null,
        vapid_key: String::new(),
        payload: None,
        problem: None,
    };
    let browser = state
        .0
        .lock()
        .unwrap()
        .browsers
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, b)| Arc::clone(b));
    if let Err(problem) = check(&mut push, &request_line, &body, port, browser.as_deref()) {
        push.problem = Some(problem);
    }
    let (status, extra) = {
        let (lock, cv) = state;
        let mut s = lock.lock().unwrap();
        let answer = s.script.pop_front().unwrap_or((201, Vec::new()));
        s.pushes.push(push);
        cv.notify_all();
        answer
    };
    let mut response = format!("HTTP/1.1 {status} Scripted\r\nContent-Length: 0\r\nConnection: close\r\n");
    for (k, v) in extra {
        response.push_str(&format!("{k}: {v}\r\n"));
    }
    response.push_str("\r\n");
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
}

/// What RFC 8030/8291/8292 ask of the request, as a push service checks it.
fn check(push: &mut Push, request_line: &str, body: &[u8], port: u16, browser: Option<&Browser>) -> Result<(), String> {
    if !request_line.starts_with("POST ") {
        return Err(format!("not a POST: {request_line}"));
    }
    let ttl = push.header("TTL").ok_or("no TTL")?;
    ttl.parse::<u64>().map_err(|_| format!("TTL {ttl:?}"))?;
    if push.header("Content-Encoding") != Some("aes128gcm") {
        return Err("Content-Encoding is not aes128gcm".into());
    }
    let auth = push.header("Authorization").ok_or("no Authorization")?.to_owned();
    let rest = auth.strip_prefix("vapid t=").ok_or("not a vapid Authorization")?;
    let (jwt, k) = rest.split_once(", k=").ok_or("no k=")?;
    push.vapid_key = k.to_owned();
    let key = VerifyingKey::from_sec1_bytes(&unb64(k)).map_err(|e| format!("k= is not a P-256 key: {e}"))?;
    let parts: Vec<&str> = jwt.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err("the JWT has not three parts".into());
    };
    let header: serde_json::Value = serde_json::from_slice(&unb64(header)).map_err(|e| e.to_string())?;
    if header["alg"] != "ES256" {
        return Err(format!("JWT alg {}", header["alg"]));
    }
    let signature = Signature::from_slice(&unb64(signature)).map_err(|e| format!("signature: {e}"))?;
    key.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
        .map_err(|_| "the VAPID signature does not verify".to_owned())?;
    push.claims = serde_json::from_slice(&unb64(claims)).map_err(|e| e.to_string())?;
    let aud = format!("https://127.0.0.1:{port}");
    if push.claims["aud"] != aud.as_str() {
        return Err(format!("aud {} is not {aud}", push.claims["aud"]));
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let exp = push.claims["exp"].as_u64().ok_or("no exp")?;
    if exp <= now || exp > now + 24 * 3600 {
        return Err(format!("exp {exp} is not within 24 h of {now}"));
    }
    if !push.claims["sub"]
        .as_str()
        .is_some_and(|s| s.starts_with("mailto:") || s.starts_with("https:"))
    {
        return Err(format!("sub {}", push.claims["sub"]));
    }
    if body.len() > 4096 {
        return Err(format!("body of {} bytes is over 4096", body.len()));
    }
    if let Some(browser) = browser {
        let plain = browser.decrypt(body)?;
        push.payload = Some(serde_json::from_slice(&plain).map_err(|e| format!("payload is not JSON: {e}"))?);
    }
    Ok(())
}

fn read_request<S: Read>(stream: &mut S) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((head, buf[head_end..head_end + len].to_vec()))
}
