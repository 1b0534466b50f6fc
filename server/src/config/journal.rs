//! The journal's settings (issue 24, L62): `MOBILE_HISTORY`, `MOBILE_HISTORY_ITEMS`,
//! `MOBILE_HISTORY_DAYS`.

use hermes_mobile::journal::JournalConfig;

/// Reads the three settings; the journal itself is opened at start-up.
pub fn journal_config(get: &dyn Fn(&str) -> Option<String>) -> Result<JournalConfig, String> {
    let history = match get("--history")
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "" | "on" | "1" | "true" | "yes" => true,
        "off" | "0" | "false" | "no" => false,
        other => return Err(format!("MOBILE_HISTORY must be on or off, got {other:?}")),
    };
    let items = whole("MOBILE_HISTORY_ITEMS", get("--history-items"))?;
    let days = whole("MOBILE_HISTORY_DAYS", get("--history-days"))?;
    Ok(JournalConfig {
        history,
        items: usize::try_from(items).map_err(|_| "MOBILE_HISTORY_ITEMS is too large".to_owned())?,
        days: u32::try_from(days).map_err(|_| "MOBILE_HISTORY_DAYS is too large".to_owned())?,
    })
}

/// A whole number of at least 1.
fn whole(name: &str, given: Option<String>) -> Result<u64, String> {
    let text = given.unwrap_or_default().trim().to_owned();
    match text.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{name} must be a whole number of at least 1, got {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_refusals() {
        let table = |f: &str| {
            let row = crate::config::settings::SETTINGS.iter().find(|s| s.flag == f)?;
            match row.default {
                crate::config::settings::DefaultValue::Value(v) => Some(v.to_owned()),
                _ => None,
            }
        };
        assert_eq!(journal_config(&table), Ok(JournalConfig::new()), "the table's defaults");
        let off = |f: &str| {
            if f == "--history" {
                Some("off".to_owned())
            } else {
                table(f)
            }
        };
        assert!(!journal_config(&off).unwrap().history);
        let zero = |f: &str| {
            if f == "--history-items" {
                Some("0".to_owned())
            } else {
                table(f)
            }
        };
        assert_eq!(
            journal_config(&zero),
            Err("MOBILE_HISTORY_ITEMS must be a whole number of at least 1, got \"0\"".into())
        );
    }
}
