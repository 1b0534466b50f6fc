//! `abuse`: every hostile peer of issues 8 and 23 at once (or those `--only` names), for
//! `--seconds`, while one well-behaved client does text turns; then 30 s of quiet. It
//! reports the server's peak RSS, its RSS after the quiet, the good client's latency with
//! and without the abuse, whether the server survived, and whether its sockets came back to
//! the live clients. Loopback only, bounded in threads, sockets, rates and time.

mod memory;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

use crate::client::Client;
use crate::proc_stat;

/// Sockets each socket-holding abuser keeps open at most.
const SLOWLORIS_SOCKETS: usize = 100;
const IDLE_UNAUTH_SOCKETS: usize = 200;

struct Shared {
    url: String,
    token: String,
    stop: AtomicBool,
    /// Abusive operations done, for the report.
    ops: AtomicU64,
    /// What the memory attacks did and saw, each on its own.
    memory: memory::Tallies,
}

impl Shared {
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    fn authority(&self) -> String {
        self.url
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .unwrap_or("")
            .to_owned()
    }

    fn hello(&self, device: &str) -> Option<Client> {
        let mut c = Client::connect(&self.url).ok()?;
        c.hello(&self.token, device).ok()?;
        Some(c)
    }

    fn text(c: &mut Client, id: String, text: &str) -> bool {
        c.send(&json!({"t":"text","id":id,"text":text})).is_ok()
    }
}

fn pause(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Asks for two 8 MiB files and never reads; a new one every 3 s.
fn non_reader(s: &Shared, t: usize) {
    let mut n = 0;
    while s.running() {
        n += 1;
        if let Some(mut c) = s.hello(&format!("abuse-nr-{t}-{n}")) {
            for i in 0..2 {
                Shared::text(&mut c, format!("nr{t}-{n}-{i}"), "/file 8388608");
            }
            s.ops.fetch_add(1, Ordering::Relaxed);
            pause(3000);
        } else {
            pause(200);
        }
    }
}

/// Request heads that trickle in one byte at a time.
fn slowloris(s: &Shared) {
    let head = b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n";
    let mut socks: Vec<(TcpStream, usize)> = Vec::new();
    while s.running() {
        while socks.len() < SLOWLORIS_SOCKETS {
            match TcpStream::connect(s.authority()) {
                Ok(t) => socks.push((t, 0)),
                Err(_) => break,
            }
        }
        socks.retain_mut(|(t, sent)| {
            let byte = head[*sent % head.len()];
            *sent += 1;
            t.write_all(&[byte]).is_ok()
        });
        s.ops.fetch_add(1, Ordering::Relaxed);
        pause(500);
    }
}

/// WebSockets that never say hello, as many as allowed.
fn idle_unauthenticated(s: &Shared) {
    let mut held = Vec::new();
    while s.running() {
        while held.len() < IDLE_UNAUTH_SOCKETS && s.running() {
            let Ok(stream) = TcpStream::connect(s.authority()) else {
                break;
            };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            match tungstenite::client(s.url.as_str(), stream) {
                Ok((ws, _)) => held.push(ws),
                Err(_) => break,
            }
            s.ops.fetch_add(1, Ordering::Relaxed);
        }
        pause(1000);
        // The server closes them at the hello timeout; let those go and open new ones.
        held.retain_mut(|ws| ws.get_mut().peek(&mut [0u8; 1]).is_err());
    }
}

/// A new device id for each streamed reply, gone before the reply is: its output is held.
fn throwaway_devices(s: &Shared) {
    let words = vec!["word"; 300].join(" ");
    let mut n = 0u64;
    while s.running() {
        n += 1;
        if let Some(mut c) = s.hello(&format!("throw-{n}")) {
            Shared::text(&mut c, format!("tw{n}"), &format!("/stream {words}"));
            s.ops.fetch_add(1, Ordering::Relaxed);
        }
        pause(50);
    }
}

/// Eight uploads that announce 2048 parts, send a 4 KiB first one and stall; the connection
/// stays alive (pings) so nothing but the limits clean them up.
fn stalled_uploads(s: &Shared, t: usize) {
    let part = base64::engine::general_purpose::STANDARD.encode(vec![9u8; 4096]);
    let mut round = 0;
    while s.running() {
        round += 1;
        let Some(mut c) = s.hello(&format!("abuse-up-{t}")) else {
            pause(200);
            continue;
        };
        for i in 0..8 {
            let _ = c.send(&json!({"t":"media","id":format!("up{t}-{round}-{i}"),"kind":"document",
                "filename":"x.bin","part":0,"parts":2048,"data":part}));
        }
        s.ops.fetch_add(8, Ordering::Relaxed);
        let until = Instant::now() + Duration::from_secs(20);
        while s.running() && Instant::now() < until {
            if c.send(&json!({"t":"ping"})).is_err() || c.recv().is_err() {
                break;
            }
            pause(1000);
        }
    }
}

/// The same first chunk of an unfinished upload, again and again.
fn repeated_chunks(s: &Shared) {
    let part = base64::engine::general_purpose::STANDARD.encode(vec![1u8; 64 * 1024]);
    while s.running() {
        let Some(mut c) = s.hello("abuse-repeat") else {
            pause(200);
            continue;
        };
        while s.running() {
            let chunk = json!({"t":"media","id":"again","kind":"document","part":0,"parts":3,"data":part});
            if c.send(&chunk).is_err() {
                break;
            }
            s.ops.fetch_add(1, Ordering::Relaxed);
            pause(100);
        }
    }
}

/// Cards with day-long TTLs, as fast as the demo opens them; the replies are read.
fn card_spam(s: &Shared) {
    let mut n = 0u64;
    while s.running() {
        let Some(mut c) = s.hello("abuse-cards") else {
            pause(200);
            continue;
        };
        while s.running() {
            n += 1;
            if !Shared::text(&mut c, format!("card{n}"), "/ttl 86400 rm -rf /") {
                break;
            }
            // Read what comes back (the card, or the refusal once the cap is reached).
            if c.recv().is_err() {
                break;
            }
            s.ops.fetch_add(1, Ordering::Relaxed);
            pause(50);
        }
    }
}

/// One device reconnecting as fast as it can: every hello replaces the previous connection.
fn reconnect_storm(s: &Shared) {
    while s.running() {
        if s.hello("storm-1").is_some() {
            s.ops.fetch_add(1, Ordering::Relaxed);
        }
        pause(20);
    }
}

/// Text turns at a steady pace; their latencies.
fn good_client(s: &Shared, seconds: u64, tag: &str) -> Vec<Duration> {
    let mut c = s.hello(&format!("good-{tag}")).expect("the good client connects");
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut latencies = Vec::new();
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        let t0 = Instant::now();
        if c.turn(&format!("good-{tag}-{n}-{}", std::process::id()), "hello")
            .is_err()
        {
            eprintln!("abuse: the good client's turn failed");
            break;
        }
        latencies.push(t0.elapsed());
        pause(100);
    }
    latencies.sort_unstable();
    latencies
}

fn healthz(s: &Shared) -> Option<Value> {
    let mut stream = TcpStream::connect(s.authority()).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut body = String::new();
    std::io::Read::read_to_string(&mut stream, &mut body).ok()?;
    serde_json::from_str(body.rsplit("\r\n\r\n").next()?).ok()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted
        .get(((sorted.len().max(1) - 1) as f64 * p).round() as usize)
        .copied()
        .unwrap_or_default()
}

type Abuser = fn(&Shared, usize);

/// Every abuser: its name for `--only`, how many threads run it, and what a thread does
/// (given its index).
const ABUSERS: [(&str, usize, Abuser); 10] = [
    ("slowloris", 1, |s, _| slowloris(s)),
    ("idle-unauthenticated", 1, |s, _| idle_unauthenticated(s)),
    ("throwaway-devices", 1, |s, _| throwaway_devices(s)),
    ("repeated-chunks", 1, |s, _| repeated_chunks(s)),
    ("card-spam", 1, |s, _| card_spam(s)),
    ("reconnect-storm", 1, |s, _| reconnect_storm(s)),
    ("non-readers", 4, non_reader),
    ("stalled-uploads", 2, stalled_uploads),
    ("minted-uploads", memory::UPLOAD_THREADS, memory::minted_uploads),
    ("half-messages", 1, |s, _| memory::half_messages(s)),
];

/// The abusers `--only` names (every one without it), or the names it got wrong.
fn select(only: Option<&[String]>) -> Result<Vec<(&'static str, usize, Abuser)>, String> {
    let Some(names) = only else {
        return Ok(ABUSERS.to_vec());
    };
    if let Some(bad) = names.iter().find(|n| !ABUSERS.iter().any(|a| a.0 == n.as_str())) {
        let known: Vec<&str> = ABUSERS.iter().map(|a| a.0).collect();
        return Err(format!("no abuser {bad:?}; known: {}", known.join(", ")));
    }
    Ok(ABUSERS.into_iter().filter(|a| names.iter().any(|n| n == a.0)).collect())
}

pub fn run(url: &str, token: &str, seconds: u64, pid: u32, only: Option<&[String]>) {
    let abusers = select(only).unwrap_or_else(|e| {
        eprintln!("abuse: {e}");
        std::process::exit(2)
    });
    let s = Arc::new(Shared {
        url: url.to_owned(),
        token: token.to_owned(),
        stop: AtomicBool::new(false),
        ops: AtomicU64::new(0),
        memory: memory::Tallies::default(),
    });
    let idle_rss = proc_stat::rss_kib(pid);
    println!("abuse: server pid {pid}, idle RSS {idle_rss} KiB; 10 s of good turns alone first");
    let calm = good_client(&s, 10, "calm");

    let names: Vec<&str> = abusers.iter().map(|a| a.0).collect();
    println!("abuse: {}", names.join(", "));
    let mut threads = Vec::new();
    for (name, count, f) in abusers {
        for t in 0..count {
            let s = Arc::clone(&s);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("{name}-{t}"))
                    .spawn(move || f(&s, t))
                    .expect("thread"),
            );
        }
    }
    let sampler = {
        let s = Arc::clone(&s);
        std::thread::spawn(move || {
            let mut peak = 0;
            while s.running() {
                peak = peak.max(proc_stat::rss_kib(pid));
                pause(250);
            }
            peak
        })
    };
    let cpu0 = proc_stat::cpu_ticks(pid);
    let during = good_client(&s, seconds, "abused");
    // What the gateway still holds with every abuser in place: the peak may be a moment.
    let at_end = proc_stat::rss_kib(pid);
    s.stop.store(true, Ordering::Relaxed);
    let peak = sampler.join().unwrap_or(0);
    for t in threads {
        let _ = t.join();
    }
    let cpu = (proc_stat::cpu_ticks(pid) - cpu0) as f64 / proc_stat::ticks_per_second();
    println!(
        "abuse: {} abusive operations over {seconds} s; server CPU {cpu:.1} s",
        s.ops.load(Ordering::Relaxed)
    );
    if names.contains(&"minted-uploads") {
        println!("{}", s.memory.minted_uploads.report("minted-uploads", "parts sent"));
    }
    if names.contains(&"half-messages") {
        println!("{}", s.memory.half_messages.report("half-messages", "messages begun"));
    }
    println!(
        "abuse: peak RSS {peak} KiB ({:.1} MiB); at the end of the abuse {at_end} KiB ({:.1} MiB)",
        peak as f64 / 1024.0,
        at_end as f64 / 1024.0
    );
    println!(
        "abuse: good client alone: {} turns, p50 {:?}, p99 {:?}",
        calm.len(),
        pct(&calm, 0.5),
        pct(&calm, 0.99)
    );
    println!(
        "abuse: good client under abuse: {} turns, p50 {:?}, p99 {:?}",
        during.len(),
        pct(&during, 0.5),
        pct(&during, 0.99)
    );
    println!("abuse: 30 s of quiet");
    pause(30_000);
    let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
    let after = proc_stat::rss_kib(pid);
    println!("abuse: server alive: {alive}; RSS 30 s after: {after} KiB (idle was {idle_rss} KiB)");
    match healthz(&s) {
        // The only live client now is this request itself.
        Some(h) => {
            println!(
                "abuse: /healthz after: sockets {} (1 expected: this request), connections {}, devices_online {}",
                h["sockets"], h["connections"], h["devices_online"]
            );
            println!("abuse: /healthz after: {h}");
        }
        None => println!("abuse: /healthz did not answer"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_runs_the_abusers_it_names() {
        let only = ["half-messages".to_owned(), "minted-uploads".to_owned()];
        let names: Vec<&str> = select(Some(&only)).unwrap().iter().map(|a| a.0).collect();
        assert_eq!(names, ["minted-uploads", "half-messages"]);
        assert_eq!(select(None).unwrap().len(), ABUSERS.len());
        let err = select(Some(&["half-message".to_owned()])).err().unwrap();
        assert!(err.contains("half-message") && err.contains("half-messages"), "{err}");
    }
}
