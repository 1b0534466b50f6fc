//! `hermes-mobile history --device ID [--json]`: a device's journal, read-only, safe while
//! the gateway runs (SQLite's WAL lets a reader in beside the writer). Issue 24 §5.

use std::collections::HashMap;

use hermes_mobile::ids::DeviceId;
use hermes_mobile::journal::body::Body;
use hermes_mobile::journal::Entry;

use crate::{config, env_file, journal};

const USAGE: &str = "usage: hermes-mobile history --device ID [--json] [--state-dir DIR] [--env-file PATH]

Prints a device's journal (<state dir>/journal.sqlite3), oldest first: one line per entry
with its seq, time (UTC), who and what. --json prints each entry as the `history` frame's
item (one JSON object per line). Read-only: safe while the gateway runs.";

/// Runs the command: the exit status.
pub fn run(env: &HashMap<String, String>, args: &[String]) -> i32 {
    let mut device = None;
    let mut json = false;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--help" | "-h" => {
                println!("{USAGE}");
                return 0;
            }
            "--json" => json = true,
            "--device" => device = it.next().cloned(),
            _ => match a.strip_prefix("--device=") {
                Some(d) => device = Some(d.to_owned()),
                None => rest.push(a.clone()),
            },
        }
    }
    let Some(device) = device.filter(|d| !d.trim().is_empty()) else {
        eprintln!("hermes-mobile history: --device ID is required\n\n{USAGE}");
        return 2;
    };
    let state_dir =
        match env_file::layered(env, &rest, env_file::Unreadable::Skip).and_then(|l| config::parse(&l.env, &l.args)) {
            Ok(c) => c.state_dir,
            Err(e) => {
                eprintln!("hermes-mobile history: {e}");
                return 2;
            }
        };
    let path = state_dir.join(crate::server::JOURNAL_FILE);
    if !path.exists() {
        eprintln!("hermes-mobile history: no journal at {} yet", path.display());
        return 1;
    }
    match journal::read_device(&path, &DeviceId(device.clone())) {
        Ok(entries) if entries.is_empty() => {
            eprintln!("hermes-mobile history: nothing kept for {device:?}");
            0
        }
        Ok(entries) => {
            for e in &entries {
                println!("{}", if json { item_json(e) } else { line(e) });
            }
            0
        }
        Err(e) => {
            eprintln!("hermes-mobile history: {e}");
            1
        }
    }
}

/// The entry as a `history` item (L59): its body with its seq.
fn item_json(e: &Entry) -> String {
    hermes_mobile::wire::journal::with_seq(e.body.clone(), e.seq)
}

/// One readable line; what a peer chose is shown with its hidden characters visible.
fn line(e: &Entry) -> String {
    let when = utc(e.at.as_millis());
    let Some(b) = Body::parse(&e.body) else {
        return format!("#{:<6} {when}  (an entry this build cannot read)", e.seq);
    };
    let who = if b.from.is_some() { "you  " } else { "agent" };
    let what = match b.t.as_str() {
        "prompt" => {
            let asked = b.command.clone().or(b.text.clone()).unwrap_or_default();
            let state = match (&b.closed, e.open) {
                (_, true) => "open".to_owned(),
                (Some(c), _) if c.expired => "expired".to_owned(),
                (Some(c), _) => format!("answered {}", c.option_id.as_deref().unwrap_or("")),
                (None, false) => "closed".to_owned(),
            };
            format!("card ({state}): {asked}")
        }
        "media" => format!(
            "file {} ({} bytes)",
            b.filename.as_deref().unwrap_or(""),
            b.size.unwrap_or(0)
        ),
        "audio" => format!("voice note ({} bytes)", b.size.unwrap_or(0)),
        _ => b.text.clone().unwrap_or_default(),
    };
    let held = if e.held { "  [held]" } else { "" };
    format!("#{:<6} {when}  {who}  {}{held}", e.seq, shown(&what))
}

/// Control characters escaped, hidden ones as ⟨U+XXXX⟩ (L49), one line per entry.
fn shown(s: &str) -> String {
    let revealed = hermes_mobile::hidden::reveal(s);
    revealed
        .chars()
        .map(|c| match c {
            '\n' => "⏎ ".to_owned(),
            '\t' => " ".to_owned(),
            c => c.to_string(),
        })
        .collect()
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of unix milliseconds.
pub(crate) fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_796_342_400_000), "2026-12-04 00:00:00");
        assert_eq!(utc(951_782_400_000 + 3_723_000), "2000-02-29 01:02:03");
    }

    #[test]
    fn a_line_shows_hidden_characters() {
        let e = Entry {
            device: DeviceId("tel-1".into()),
            key: "m:r1".into(),
            seq: 7,
            first_seq: 7,
            at: hermes_mobile::Time::ZERO,
            held: true,
            open: false,
            deadline: None,
            body: Body::message("r1", "a\u{202E}b\nc", true, false).to_json(),
            blob: None,
        };
        assert_eq!(line(&e), "#7      1970-01-01 00:00:00  agent  a⟨U+202E⟩b⏎ c  [held]");
        assert_eq!(
            item_json(&e),
            "{\"t\":\"message\",\"id\":\"r1\",\"text\":\"a\u{202E}b\\nc\",\"final\":true,\"seq\":7}"
        );
    }
}
