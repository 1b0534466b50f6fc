//! `Retry-After` of a 429 (RFC 9110 10.2.3): seconds, or an HTTP date, which is turned into
//! the seconds left from the wall clock. Push services send seconds; a date is taken too,
//! so that "no sooner than its Retry-After" holds whatever form the answer has.

use std::time::Duration;

/// The longest wait taken from a push service: past it the notification is stale anyway.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// What an unreadable value counts as.
const UNREADABLE: Duration = Duration::from_secs(60);

/// How long to wait, given the header's value and the wall clock (`now_unix`, seconds).
pub fn wait(value: &str, now_unix: u64) -> Duration {
    let value = value.trim();
    let wait = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => match imf_fixdate(value) {
            // A date already past means "now"; the sender waits at least a second anyway.
            Some(at) => Duration::from_secs(at.saturating_sub(now_unix)),
            None => UNREADABLE,
        },
    };
    wait.min(MAX_WAIT)
}

/// Seconds since 1970 of an IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT` (the form RFC 9110
/// says senders use), or `None`.
fn imf_fixdate(s: &str) -> Option<u64> {
    let mut parts = s.split_ascii_whitespace();
    let weekday = parts.next()?;
    let (day, month, year, time, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if parts.next().is_some() || !weekday.ends_with(',') || zone != "GMT" || day.len() != 2 || year.len() != 4 {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == month)? as u64 + 1;
    let day: u64 = day.parse().ok()?;
    let year: u64 = year.parse().ok()?;
    let mut hms = time
        .split(':')
        .map(|p| if p.len() == 2 { p.parse::<u64>().ok() } else { None });
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some() || !(1..=31).contains(&day) || year < 1970 || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + sec)
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (year >= 1970).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12; // March is 0
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_taken_as_they_are_and_capped_at_a_day() {
        assert_eq!(wait("5", 0), Duration::from_secs(5));
        assert_eq!(wait(" 120 ", 0), Duration::from_secs(120));
        assert_eq!(wait("999999999", 0), MAX_WAIT);
    }

    #[test]
    fn an_http_date_is_the_time_left_until_it() {
        // RFC 9110's example date is 784111777 s after the epoch.
        assert_eq!(imf_fixdate("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(
            wait("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_777 - 90),
            Duration::from_secs(90)
        );
        assert_eq!(wait("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_777 + 5), Duration::ZERO);
        assert_eq!(imf_fixdate("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(imf_fixdate("Fri, 04 Dec 2026 10:00:00 GMT"), Some(1_796_378_400));
        assert_eq!(imf_fixdate("Tue, 29 Feb 2028 23:59:59 GMT"), Some(1_835_481_599));
    }

    #[test]
    fn anything_else_counts_as_a_minute() {
        for bad in [
            "",
            "soon",
            "-5",
            "1.5",
            "Sun, 06 Nov 1994 08:49:37 CET",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 8:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
        ] {
            assert_eq!(wait(bad, 0), UNREADABLE, "{bad:?}");
        }
    }
}
