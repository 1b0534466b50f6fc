//! Reading a process's CPU time and resident memory from /proc (Linux).

/// utime + stime of `pid`, in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name is in parentheses and may hold spaces: count fields after it.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let get = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // Fields 14 and 15 of stat(5); after the name, state is index 0, so they are 11 and 12.
    get(11) + get(12)
}

pub fn ticks_per_second() -> f64 {
    // CLK_TCK is 100 on every Linux this runs on.
    100.0
}

/// VmRSS of `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
