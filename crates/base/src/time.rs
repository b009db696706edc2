//! Durations as the whole milliseconds records and logs hold, and a
//! moment as a person writes it on the command line (`--since`).

use std::time::Duration;

use chrono::{DateTime, NaiveDate, TimeZone, Utc};

use crate::zone::Zone;

/// `d` in whole milliseconds; `u64::MAX` for a duration longer than that
/// (never a wrapped number).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The moment `text` names, as `--since` takes it: an age (`90m`, `12h`,
/// `3d`, `2w`) before `now`; a date (`2026-11-26`), its midnight in `zone`;
/// or an RFC 3339 time (`2026-11-26T08:00:00+01:00`). `Err` says what is
/// accepted. An age past the calendar's start is its start, never a
/// wrapped time.
pub fn since(text: &str, now: DateTime<Utc>, zone: &Zone) -> Result<DateTime<Utc>, String> {
    let text = text.trim();
    let wrong = || {
        format!(
            "{text:?} is no time: write an age (90m, 12h, 3d, 2w), a date (2026-11-26) or an RFC 3339 time (2026-11-26T08:00:00Z)"
        )
    };
    if let Some(unit) = text.chars().last().filter(char::is_ascii_alphabetic)
        && let Ok(n) = text[..text.len() - 1].parse::<u64>()
    {
        let secs_per = match unit {
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return Err(wrong()),
        };
        let back = n
            .checked_mul(secs_per)
            .and_then(|s| i64::try_from(s).ok())
            .and_then(chrono::TimeDelta::try_seconds);
        return Ok(back
            .and_then(|back| now.checked_sub_signed(back))
            .unwrap_or(DateTime::<Utc>::MIN_UTC));
    }
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.to_utc());
    }
    if let Ok(day) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        // A midnight a clock change skips starts the day at the first
        // moment that exists.
        let start = (0..=3)
            .filter_map(|h| day.and_hms_opt(h, 0, 0))
            .find_map(|local| zone.from_local_datetime(&local).earliest());
        return start.map(|at| at.to_utc()).ok_or_else(wrong);
    }
    Err(wrong())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    #[test]
    fn since_takes_ages_dates_in_the_zone_and_rfc_3339() {
        let now = at("2026-11-27T08:00:00Z");
        let utc = Zone::utc();
        assert_eq!(since("90m", now, &utc), Ok(at("2026-11-27T06:30:00Z")));
        assert_eq!(since("12h", now, &utc), Ok(at("2026-11-26T20:00:00Z")));
        assert_eq!(since(" 3d ", now, &utc), Ok(at("2026-11-24T08:00:00Z")));
        assert_eq!(since("2w", now, &utc), Ok(at("2026-11-13T08:00:00Z")));
        assert_eq!(since("0h", now, &utc), Ok(now));
        assert_eq!(
            since("2026-11-26T08:00:00+01:00", now, &utc),
            Ok(at("2026-11-26T07:00:00Z"))
        );
        assert_eq!(
            since("2026-11-26", now, &utc),
            Ok(at("2026-11-26T00:00:00Z"))
        );
        let berlin = Zone::named("Europe/Berlin").unwrap();
        assert_eq!(
            since("2026-11-26", now, &berlin),
            Ok(at("2026-11-25T23:00:00Z"))
        );
        // São Paulo skipped midnight on 2018-11-04: the day began at 01:00.
        let sao_paulo = Zone::named("America/Sao_Paulo").unwrap();
        assert_eq!(
            since("2018-11-04", now, &sao_paulo),
            Ok(at("2018-11-04T03:00:00Z"))
        );
    }

    #[test]
    fn since_refuses_what_is_no_time_and_never_wraps() {
        let now = at("2026-11-27T08:00:00Z");
        let utc = Zone::utc();
        for wrong in [
            "",
            "h",
            "12",
            "12x",
            "-3d",
            "3.5h",
            "yesterday",
            "2026-13-01",
            "12 h",
        ] {
            let err = since(wrong, now, &utc).unwrap_err();
            assert!(
                err.contains("write an age (90m, 12h, 3d, 2w)"),
                "{wrong}: {err}"
            );
        }
        let far = format!("{}d", u64::MAX);
        assert_eq!(since(&far, now, &utc), Ok(DateTime::<Utc>::MIN_UTC));
        assert_eq!(
            since("99999999999w", now, &utc),
            Ok(DateTime::<Utc>::MIN_UTC)
        );
    }

    #[test]
    fn milliseconds_are_whole_and_saturate() {
        assert_eq!(millis(Duration::from_micros(1_999)), 1);
        assert_eq!(millis(Duration::from_secs(3)), 3_000);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
