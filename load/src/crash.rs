//! `crash`: durability under SIGKILL at random moments (issue 24, L57, L58, L61).
//!
//! The tool starts the gateway itself (loopback, port 0, a fresh state directory, an
//! `exec:` agent of its own that logs every event: crash/agent.rs). N phones do turns over
//! WebSocket, each message re-sent with its id after a reconnect until `received`, each
//! `hello` resuming after the highest seq seen. Meanwhile the gateway is SIGKILLed at
//! seeded random moments (one in each of `--kills` equal slots of `--seconds`) and started
//! again on the same state directory; the phones reconnect to its new port. Then the phones
//! finish their turn in flight, the gateway is stopped with SIGTERM and started once more,
//! and each phone resumes one last time. The checks (crash/check.rs) then read only what
//! was recorded. Exit status 1 on any violation, with the ids, seqs and times involved; the
//! run's directory (state, agent log, one log per start) is kept then.

mod agent;
mod check;
mod gateway;
mod phone;
mod record;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::{shell_word, Gateway, Setup, Stopped};
use phone::{Phone, Shared};

pub use agent::run as agent_main;

/// How long the agents of earlier starts may take to see EOF and exit before the log is read.
const AGENTS_WAIT: Duration = Duration::from_secs(10);

pub struct Options {
    pub phones: usize,
    pub kills: u32,
    pub seconds: u64,
    pub seed: u64,
    pub gateway: PathBuf,
}

/// SplitMix64: small, seeded, and the same on every platform.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// In [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One kill at a random moment in each of `kills` equal slots of the run: spread over it,
/// and still anywhere in a slot (right after a restart too).
fn kill_times(seed: u64, kills: u32, seconds: u64) -> Vec<Duration> {
    let mut rng = Rng::new(seed);
    let slot = seconds as f64 / f64::from(kills.max(1));
    (0..kills)
        .map(|k| Duration::from_secs_f64(slot * (f64::from(k) + rng.unit())))
        .collect()
}

/// The gateway the tool runs by default: `$GATEWAY_BIN`, else `hermes-mobile` beside this
/// binary (target/release/hermes-mobile-load → target/release/hermes-mobile).
pub fn default_gateway() -> PathBuf {
    if let Some(bin) = std::env::var_os("GATEWAY_BIN") {
        return bin.into();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("hermes-mobile")))
        .unwrap_or_else(|| "target/release/hermes-mobile".into())
}

/// Sleeps until `t0 + at`, or less if the phones have all stopped (a failure).
fn sleep_until(t0: Instant, at: Duration, phones: &[std::thread::JoinHandle<Phone>]) {
    while t0.elapsed() < at && !phones.iter().all(|p| p.is_finished()) {
        std::thread::sleep((at.saturating_sub(t0.elapsed())).min(Duration::from_millis(50)));
    }
}

fn stopped(gw: Gateway, problems: &mut Vec<String>) {
    let generation = gw.generation;
    match gw.stop() {
        Stopped::Exited(status) if status.success() => println!("gateway #{generation} stopped by SIGTERM: {status}"),
        Stopped::Exited(status) => problems.push(format!("gateway #{generation} exited with {status} after SIGTERM")),
        Stopped::Hung => problems.push(format!(
            "gateway #{generation} did not stop within 20 s of SIGTERM (SIGKILLed)"
        )),
    }
}

/// Waits until every agent that logged `start` has exited (or is a zombie), bounded.
fn wait_for_agents(events: &[record::AgentEvent]) -> Vec<u32> {
    let pids: Vec<u32> = events
        .iter()
        .filter(|e| e.kind == record::AgentKind::Start)
        .map(|e| e.pid)
        .collect();
    let alive = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
    };
    let deadline = Instant::now() + AGENTS_WAIT;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(alive).collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs the whole test; the process's exit status.
pub fn run(o: &Options) -> i32 {
    let run_id = crate::run_id();
    let dir = std::env::temp_dir().join(format!("hermes-mobile-crash-{run_id}"));
    let state_dir = dir.join("state");
    let agent_log = dir.join("agent.log");
    if !o.gateway.is_file() {
        eprintln!(
            "crash: no gateway at {} (set GATEWAY_BIN or --gateway; build it with `cargo build --release -p hermes-mobile-server`)",
            o.gateway.display()
        );
        return 2;
    }
    if let Err(e) = std::fs::create_dir_all(&state_dir) {
        eprintln!("crash: cannot make {}: {e}", state_dir.display());
        return 2;
    }
    let exe = std::env::current_exe().expect("the load tool's own path");
    let setup = Setup {
        bin: o.gateway.clone(),
        state_dir,
        token: format!("crash-token-{run_id}"),
        agent: format!(
            "exec:{} crash-agent {} {}",
            shell_word(&exe.to_string_lossy()),
            shell_word(&agent_log.to_string_lossy()),
            o.seed
        ),
        dir: dir.clone(),
    };
    let schedule = kill_times(o.seed, o.kills, o.seconds);
    println!(
        "crash: seed={} phones={} kills={} seconds={} gateway={} dir={}",
        o.seed,
        o.phones,
        o.kills,
        o.seconds,
        o.gateway.display(),
        dir.display()
    );
    let times: Vec<String> = schedule.iter().map(|d| format!("{:.3}", d.as_secs_f64())).collect();
    println!("kills at (s): {}", times.join(" "));

    let mut problems = Vec::new();
    let Supervised {
        steps,
        kills,
        phones,
        t0_us,
    } = match supervise(o, &setup, &schedule, &run_id, &mut problems) {
        Ok(done) => done,
        Err(e) => {
            println!("RESULT: FAILED: {e}\nkept {}", dir.display());
            return 1;
        }
    };

    let text = std::fs::read_to_string(&agent_log).unwrap_or_default();
    let (events, _) = record::parse_agent_log(&text, t0_us);
    let lingering = wait_for_agents(&events);
    if !lingering.is_empty() {
        problems.push(format!(
            "agents still running {AGENTS_WAIT:?} after the end: pids {lingering:?}"
        ));
    }
    // Read again: agents that were finishing have written their last lines.
    let text = std::fs::read_to_string(&agent_log).unwrap_or_default();
    let (events, bad) = record::parse_agent_log(&text, t0_us);
    for line in bad {
        problems.push(format!("a line of the agent's log does not parse: {line:?}"));
    }
    for p in &phones {
        if let Some(f) = &p.failure {
            problems.push(f.clone());
        }
    }

    summary(&phones, kills);
    let report = check::check(&phones, &events);
    report.print();
    print_gateway_warnings(&dir, kills as u32 + 2);
    let violations = report.violations() + problems.len();
    for p in &problems {
        println!("FAILURE: {p}");
    }
    let mut timeline: Vec<(f64, String)> = phones.iter().flat_map(|p| p.timeline()).collect();
    timeline.extend(events.iter().map(|e| (e.at, format!("agent {} {:?}", e.pid, e.kind))));
    timeline.extend(steps);
    timeline.sort_by(|a, b| a.0.total_cmp(&b.0));
    let text: String = timeline.iter().map(|(at, line)| format!("{at:.6} {line}\n")).collect();
    let _ = std::fs::write(dir.join("timeline.log"), text);
    if violations == 0 {
        println!("RESULT: OK (seed {})", o.seed);
        let _ = std::fs::remove_dir_all(&dir);
        0
    } else {
        println!(
            "RESULT: FAILED: {violations} violations (seed {}); kept {} (timeline.log, agent.log, gateway-N.log, state/)",
            o.seed,
            dir.display()
        );
        1
    }
}

/// What the run did (kills, starts, stops; seconds since its start), what the phones saw,
/// and the run's start in unix µs.
struct Supervised {
    steps: Vec<(f64, String)>,
    kills: usize,
    phones: Vec<record::PhoneLog>,
    t0_us: u64,
}

/// The run itself: the phones, the kills and restarts, the clean stop, the final resume.
fn supervise(
    o: &Options,
    setup: &Setup,
    schedule: &[Duration],
    run_id: &str,
    problems: &mut Vec<String>,
) -> Result<Supervised, String> {
    let mut generation = 0;
    let mut gw = setup.start(generation)?;
    let shared = Arc::new(Shared {
        address: Default::default(),
        token: setup.token.clone(),
        run: run_id.to_owned(),
        t0: Instant::now(),
        seed: o.seed,
        stop: Default::default(),
        abort: Default::default(),
    });
    let t0 = shared.t0;
    let t0_us = unix_micros();
    shared.address.set(Some((generation, gw.url())));
    println!(
        "gateway #0 listening on port {} ({:.3} s to start)",
        gw.port,
        gw.started.elapsed().as_secs_f64()
    );
    let mut steps = vec![(0.0, format!("gateway #0 listening on port {}", gw.port))];
    let handles: Vec<_> = (0..o.phones)
        .map(|i| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                let mut p = Phone::new(shared, i);
                p.run_turns();
                p
            })
        })
        .collect();
    let abort = |why: String, handles: Vec<std::thread::JoinHandle<Phone>>| {
        shared.abort.store(true, Ordering::Relaxed);
        for h in handles {
            let _ = h.join();
        }
        why
    };

    let mut kills = 0;
    for (k, at) in schedule.iter().enumerate() {
        sleep_until(t0, *at, &handles);
        if handles.iter().all(|h| h.is_finished()) {
            break;
        }
        shared.address.set(None);
        let (uptime, killed_at) = (gw.started.elapsed().as_secs_f64(), t0.elapsed().as_secs_f64());
        gw.kill();
        kills += 1;
        steps.push((killed_at, format!("SIGKILL gateway #{generation} (up {uptime:.3} s)")));
        generation += 1;
        gw = match setup.start(generation) {
            Ok(gw) => gw,
            Err(e) => return Err(abort(e, handles)),
        };
        shared.address.set(Some((generation, gw.url())));
        steps.push((
            t0.elapsed().as_secs_f64(),
            format!("gateway #{generation} listening on port {}", gw.port),
        ));
        println!(
            "kill {} at {killed_at:.3} s: gateway #{} (up {uptime:.3} s) SIGKILLed; #{generation} listening on port {} after {:.3} s",
            k + 1,
            generation - 1,
            gw.port,
            gw.started.elapsed().as_secs_f64()
        );
    }
    sleep_until(t0, Duration::from_secs(o.seconds), &handles);
    shared.stop.store(true, Ordering::Relaxed);
    let mut phones = Vec::new();
    for h in handles {
        match h.join() {
            Ok(p) => phones.push(p),
            Err(_) => problems.push("a phone's thread panicked".into()),
        }
    }
    println!(
        "turns over at {:.3} s; stopping gateway #{generation} with SIGTERM",
        t0.elapsed().as_secs_f64()
    );
    shared.address.set(None);
    steps.push((t0.elapsed().as_secs_f64(), format!("SIGTERM gateway #{generation}")));
    stopped(gw, problems);

    generation += 1;
    let gw = setup.start(generation)?;
    shared.address.set(Some((generation, gw.url())));
    steps.push((
        t0.elapsed().as_secs_f64(),
        format!("gateway #{generation} listening on port {}: the final resume", gw.port),
    ));
    println!("gateway #{generation} listening on port {}: the final resume", gw.port);
    for p in &mut phones {
        p.final_resume();
    }
    shared.address.set(None);
    stopped(gw, problems);
    Ok(Supervised {
        steps,
        kills,
        phones: phones.into_iter().map(|p| p.log).collect(),
        t0_us,
    })
}

/// Counts of what the phones did.
fn summary(phones: &[record::PhoneLog], kills: usize) {
    let sent: usize = phones.iter().map(|p| p.sent.len()).sum();
    let sends: usize = phones.iter().flat_map(|p| &p.sent).map(|s| s.sends.len()).sum();
    let confirmed = phones.iter().flat_map(|p| &p.sent).filter(|s| s.confirmed()).count();
    let conns: usize = phones.iter().map(|p| p.conns.len()).sum();
    let offline = phones
        .iter()
        .flat_map(|p| &p.ends)
        .filter(|(_, why)| why == "dropped on purpose")
        .count();
    let errors: Vec<&str> = phones
        .iter()
        .flat_map(|p| &p.conns)
        .flat_map(|c| &c.frames)
        .filter_map(|f| match f {
            record::Frame::Error { frame, .. } => Some(frame.as_str()),
            _ => None,
        })
        .collect();
    println!(
        "{} kills; {} phones: {sent} messages ({} re-sends), {confirmed} confirmed by `received`; {conns} connections ({offline} dropped on purpose)",
        kills,
        phones.len(),
        sends - sent
    );
    if !errors.is_empty() {
        println!("error frames the phones got: {}", errors.len());
        for e in errors.iter().take(10) {
            println!("    {e}");
        }
    }
}

/// The gateways' WARN and ERROR lines, each once with a count: what the log said.
fn print_gateway_warnings(dir: &std::path::Path, starts: u32) {
    let mut seen: Vec<(String, usize, u32)> = Vec::new();
    for g in 0..starts {
        let text = std::fs::read_to_string(dir.join(format!("gateway-{g}.log"))).unwrap_or_default();
        for line in text.lines().filter(|l| l.starts_with("WARN") || l.starts_with("ERROR")) {
            match seen.iter_mut().find(|(l, _, _)| l == line) {
                Some((_, n, _)) => *n += 1,
                None => seen.push((line.to_owned(), 1, g)),
            }
        }
    }
    if !seen.is_empty() {
        println!("gateway warnings and errors (each once, first start that logged it):");
        for (line, n, g) in seen {
            println!("    #{g} ×{n}: {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_fall_one_in_each_slot_and_follow_the_seed() {
        let a = kill_times(42, 5, 60);
        assert_eq!(a.len(), 5);
        for (k, t) in a.iter().enumerate() {
            let t = t.as_secs_f64();
            assert!(t >= 12.0 * k as f64 && t < 12.0 * (k + 1) as f64, "kill {k} at {t}");
        }
        assert_eq!(a, kill_times(42, 5, 60));
        assert_ne!(a, kill_times(43, 5, 60));
    }

    #[test]
    fn the_rng_is_splitmix64() {
        // The first output of SplitMix64 seeded with 0 (the reference implementation's).
        assert_eq!(Rng::new(0).next(), 0xe220_a839_7b1d_cdaf);
        let mut r = Rng::new(1);
        assert!((0..1000).all(|_| (0.0..1.0).contains(&r.unit())));
    }
}
