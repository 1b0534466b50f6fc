//! `hermes-mobile-load`: reproducible load and memory figures for docs/PERFORMANCE.md.
//!
//! Loopback only, and bounded in connections, messages and seconds: it refuses any other
//! address and stops by itself.
//!
//! ```text
//! hermes-mobile-load turns  --clients 64 --messages 200000 [--seconds 30] [--pid PID]
//! hermes-mobile-load echo   --clients 64 --messages 200000 --url ws://127.0.0.1:8790/ws [--pid PID]
//! hermes-mobile-load idle   --clients 1000 --seconds 10 --pid PID
//! hermes-mobile-load upload --size 8388608 --chunk 3145728 --count 20
//! hermes-mobile-load soak   --clients 32 --rate 2000 --seconds 600 --sample 10 --pid PID
//! hermes-mobile-load smoke  [--upload 8388608]
//! hermes-mobile-load abuse  --seconds 60 --pid PID [--only minted-uploads,half-messages]
//! hermes-mobile-load crash  [--clients 4] [--kills 5] [--seconds 60] [--seed N] [--gateway PATH]
//! ```
//! Common: `--url ws://127.0.0.1:8787/ws`, `--token T` (else `MOBILE_TOKEN`).

mod abuse;
mod client;
mod crash;
mod proc_stat;
mod smoke;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::Client;

const MAX_CLIENTS: usize = 5000;
const MAX_SECONDS: u64 = 3600;
const MAX_MESSAGES: u64 = 10_000_000;

struct Opts {
    mode: String,
    url: String,
    token: String,
    clients: usize,
    messages: u64,
    seconds: u64,
    pid: Option<u32>,
    size: usize,
    chunk: usize,
    count: usize,
    rate: u64,
    sample: u64,
    upload: usize,
    only: Option<Vec<String>>,
    kills: u64,
    seed: Option<u64>,
    gateway: Option<String>,
}

fn usage() -> ! {
    eprintln!("{}", include_str!("usage.txt"));
    std::process::exit(2)
}

fn parse() -> Opts {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| usage());
    if mode == "--help" || mode == "-h" {
        print!("{}", include_str!("usage.txt"));
        std::process::exit(0);
    }
    if mode == "crash-agent" {
        // The crash mode's own agent, started by the gateway it runs: FILE SEED.
        let (Some(file), Some(seed)) = (args.next(), args.next().and_then(|s| s.parse().ok())) else {
            usage()
        };
        crash::agent_main(&file, seed);
    }
    let crash = mode == "crash";
    let mut o = Opts {
        mode,
        url: "ws://127.0.0.1:8787/ws".into(),
        token: std::env::var("MOBILE_TOKEN").unwrap_or_default(),
        clients: if crash { 4 } else { 64 },
        messages: 100_000,
        seconds: if crash { 60 } else { 30 },
        pid: None,
        size: 8 * 1024 * 1024,
        chunk: 3 * 1024 * 1024,
        count: 10,
        rate: 1000,
        sample: 5,
        upload: 0,
        only: None,
        kills: 5,
        seed: None,
        gateway: None,
    };
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage());
        let num = || value.parse::<u64>().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "--url" => o.url = value.clone(),
            "--token" => o.token = value.clone(),
            "--clients" => o.clients = num() as usize,
            "--messages" => o.messages = num(),
            "--seconds" => o.seconds = num(),
            "--pid" => o.pid = Some(num() as u32),
            "--size" => o.size = num() as usize,
            "--chunk" => o.chunk = num() as usize,
            "--count" => o.count = num() as usize,
            "--rate" => o.rate = num(),
            "--sample" => o.sample = num(),
            "--only" => o.only = Some(value.split(',').map(str::to_owned).collect()),
            "--kills" if (1..=1000).contains(&num()) => o.kills = num(),
            "--seed" => o.seed = Some(num()),
            "--gateway" => o.gateway = Some(value.clone()),
            "--upload" if num() <= 8 * 1024 * 1024 => o.upload = num() as usize,
            _ => usage(),
        }
    }
    if !client::is_loopback_url(&o.url) {
        eprintln!(
            "refusing {}: the load tool only targets loopback (127.0.0.0/8, localhost, [::1])",
            o.url
        );
        std::process::exit(2);
    }
    if o.clients == 0
        || o.clients > MAX_CLIENTS
        || o.seconds == 0
        || o.seconds > MAX_SECONDS
        || o.messages > MAX_MESSAGES
    {
        eprintln!("bounds: 1..={MAX_CLIENTS} clients, 1..={MAX_SECONDS} seconds, at most {MAX_MESSAGES} messages");
        std::process::exit(2);
    }
    o
}

fn main() {
    let o = parse();
    match o.mode.as_str() {
        "turns" => turns(&o, false),
        "echo" => turns(&o, true),
        "idle" => idle(&o),
        "upload" => upload(&o),
        "soak" => soak(&o),
        "abuse" => {
            let pid = o.pid.unwrap_or_else(|| {
                eprintln!("abuse needs --pid of the server");
                std::process::exit(2)
            });
            abuse::run(&o.url, &o.token, o.seconds, pid, o.only.as_deref())
        }
        "smoke" => {
            if let Err(e) = smoke::run(&o.url, &o.token, o.upload) {
                eprintln!("smoke FAILED at {e}");
                std::process::exit(1);
            }
        }
        "crash" => {
            let seed = o
                .seed
                .unwrap_or_else(|| crash::unix_micros() ^ u64::from(std::process::id()));
            std::process::exit(crash::run(&crash::Options {
                phones: o.clients,
                kills: o.kills as u32,
                seconds: o.seconds,
                seed,
                gateway: o.gateway.map_or_else(crash::default_gateway, Into::into),
            }))
        }
        _ => usage(),
    }
}

/// Distinguishes this run's message ids from earlier runs' (the gateway drops repeats, I2).
fn run_id() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!("{:x}{:x}", t, std::process::id())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// N clients doing round trips as fast as they can: protocol turns (text in, the demo
/// agent's final message out) or, with `echo`, bare WebSocket echoes.
fn turns(o: &Opts, echo: bool) {
    let done = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    let mut clients = Vec::new();
    for i in 0..o.clients {
        let mut c = Client::connect(&o.url).expect("connect");
        if !echo {
            c.hello(&o.token, &format!("load-{i}")).expect("hello");
        }
        clients.push(c);
    }
    let cpu0 = o.pid.map(proc_stat::cpu_ticks);
    let start = Instant::now();
    let threads: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            let (done, latencies, limit) = (Arc::clone(&done), Arc::clone(&latencies), o.messages);
            let run = run_id();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let mut n = 0u64;
                while Instant::now() < deadline && done.fetch_add(1, Ordering::Relaxed) < limit {
                    n += 1;
                    let t0 = Instant::now();
                    let ok = if echo {
                        c.echo(&format!("load {i} {n}"))
                    } else {
                        c.turn(&format!("{run}-{i}-{n}"), "load test")
                    };
                    if ok.is_err() {
                        break;
                    }
                    mine.push(t0.elapsed());
                }
                latencies.lock().unwrap().extend(mine);
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    let elapsed = start.elapsed();
    let cpu1 = o.pid.map(proc_stat::cpu_ticks);
    let mut l = latencies.lock().unwrap().clone();
    l.sort_unstable();
    let n = l.len() as f64;
    println!(
        "mode={} clients={} round_trips={} seconds={:.2}",
        if echo { "echo" } else { "turns" },
        o.clients,
        l.len(),
        elapsed.as_secs_f64()
    );
    println!(
        "throughput={:.0}/s p50={:?} p99={:?} p999={:?}",
        n / elapsed.as_secs_f64(),
        percentile(&l, 0.5),
        percentile(&l, 0.99),
        percentile(&l, 0.999)
    );
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        let secs = (b - a) as f64 / proc_stat::ticks_per_second();
        println!(
            "server_cpu={:.2}s per_round_trip={:.2}us",
            secs,
            secs * 1e6 / n.max(1.0)
        );
    }
}

/// Opens N hello'd connections, holds them, and reports the server's RSS growth per connection.
fn idle(o: &Opts) {
    let pid = o.pid.unwrap_or_else(|| {
        eprintln!("idle needs --pid of the server");
        std::process::exit(2)
    });
    let before = proc_stat::rss_kib(pid);
    let mut held = Vec::new();
    for i in 0..o.clients {
        let mut c = Client::connect(&o.url).expect("connect");
        c.hello(&o.token, &format!("idle-{i}")).expect("hello");
        held.push(c);
    }
    std::thread::sleep(Duration::from_secs(o.seconds.min(10)));
    let after = proc_stat::rss_kib(pid);
    let per = (after.saturating_sub(before)) as f64 * 1024.0 / o.clients as f64;
    println!(
        "mode=idle clients={} rss_before={}KiB rss_after={}KiB per_connection={:.0}B ({:.2} KiB)",
        o.clients,
        before,
        after,
        per,
        per / 1024.0
    );
    std::thread::sleep(Duration::from_secs(o.seconds.saturating_sub(10)));
    drop(held);
}

/// Multipart uploads of `--size` bytes in `--chunk` chunks, each answered by the demo agent.
fn upload(o: &Opts) {
    let mut c = Client::connect(&o.url).expect("connect");
    c.hello(&o.token, "upload-0").expect("hello");
    let data: Vec<u8> = (0..o.size).map(|i| (i % 253) as u8).collect();
    let run = run_id();
    let start = Instant::now();
    for n in 0..o.count {
        c.upload(&format!("{run}-{n}"), &data, o.chunk.max(1)).expect("upload");
    }
    let secs = start.elapsed().as_secs_f64();
    let mb = (o.size * o.count) as f64 / 1e6;
    println!(
        "mode=upload size={} chunk={} count={} seconds={:.2} throughput={:.1}MB/s",
        o.size,
        o.chunk,
        o.count,
        secs,
        mb / secs
    );
}

/// A steady rate of turns for `--seconds`, sampling the server's RSS every `--sample` s.
fn soak(o: &Opts) {
    let pid = o.pid;
    let stop = Instant::now() + Duration::from_secs(o.seconds);
    let per_client = Duration::from_secs_f64(o.clients as f64 / o.rate.max(1) as f64);
    let count = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..o.clients)
        .map(|i| {
            let (url, token, count) = (o.url.clone(), o.token.clone(), Arc::clone(&count));
            let run = run_id();
            std::thread::spawn(move || {
                let mut c = Client::connect(&url).expect("connect");
                c.hello(&token, &format!("soak-{i}")).expect("hello");
                let mut next = Instant::now();
                let mut n = 0u64;
                while Instant::now() < stop {
                    n += 1;
                    if c.turn(&format!("{run}-{i}-{n}"), "soak").is_err() {
                        break;
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                    next += per_client;
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
            })
        })
        .collect();
    let start = Instant::now();
    while Instant::now() < stop {
        std::thread::sleep(Duration::from_secs(o.sample.max(1)).min(stop.saturating_duration_since(Instant::now())));
        let rss = pid.map(proc_stat::rss_kib).unwrap_or(0);
        println!(
            "t={:>5.0}s turns={} rss={}KiB",
            start.elapsed().as_secs_f64(),
            count.load(Ordering::Relaxed),
            rss
        );
    }
    for t in threads {
        let _ = t.join();
    }
}
