//! An IANA time zone read from the system's tz database when it is named
//! (jiff reads `/usr/share/zoneinfo`, or `$TZDIR`), offered to chrono as a
//! `TimeZone`. Unlike a database compiled into the binary, it costs the
//! process nothing until it is used: no table to load, no pointer for the
//! loader to relocate at every start.

use std::fmt;

use chrono::{FixedOffset, MappedLocalTime, NaiveDate, NaiveDateTime, Offset, TimeZone, Utc};
use jiff::tz::AmbiguousOffset;

/// The tz database's names for UTC itself.
const UTC_NAMES: &[&str] = &[
    "UTC",
    "Etc/UTC",
    "UCT",
    "Etc/UCT",
    "Universal",
    "Etc/Universal",
    "Zulu",
    "Etc/Zulu",
    "GMT",
    "Etc/GMT",
    "GMT0",
    "Etc/GMT0",
    "Greenwich",
    "Etc/Greenwich",
];

/// A named time zone.
#[derive(Clone, Debug)]
pub struct Zone {
    name: String,
    tz: jiff::tz::TimeZone,
}

/// Zones are the same when they have the same name.
impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

/// A [`Zone`]'s offset at some instant (chrono's `Offset`), with the zone
/// it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneOffset {
    zone: Zone,
    fixed: FixedOffset,
}

impl Zone {
    /// UTC, which needs no database.
    pub fn utc() -> Zone {
        Zone {
            name: "UTC".into(),
            tz: jiff::tz::TimeZone::UTC,
        }
    }

    /// The zone `name` names in the system's tz database; `Err` says why
    /// there is none. UTC under any of its names needs no database.
    pub fn named(name: &str) -> Result<Zone, String> {
        if UTC_NAMES.iter().any(|u| u.eq_ignore_ascii_case(name)) {
            return Ok(Zone {
                name: name.to_string(),
                tz: jiff::tz::TimeZone::UTC,
            });
        }
        jiff::tz::TimeZone::get(name)
            .map(|tz| Zone {
                name: name.to_string(),
                tz,
            })
            .map_err(|e| e.to_string())
    }

    fn offset(&self, offset: jiff::tz::Offset) -> ZoneOffset {
        ZoneOffset {
            zone: self.clone(),
            // Every offset a tz database holds is under a day: FixedOffset's range.
            fixed: FixedOffset::east_opt(offset.seconds()).unwrap_or_else(|| Utc.fix()),
        }
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl Offset for ZoneOffset {
    fn fix(&self) -> FixedOffset {
        self.fixed
    }
}

impl fmt::Display for ZoneOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.fixed, f)
    }
}

impl TimeZone for Zone {
    type Offset = ZoneOffset;

    fn from_offset(offset: &ZoneOffset) -> Zone {
        offset.zone.clone()
    }

    fn offset_from_local_date(&self, local: &NaiveDate) -> MappedLocalTime<ZoneOffset> {
        self.offset_from_local_datetime(&local.and_time(chrono::NaiveTime::MIN))
    }

    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> MappedLocalTime<ZoneOffset> {
        let Some(civil) = civil(local) else {
            return MappedLocalTime::None;
        };
        match self.tz.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => MappedLocalTime::Single(self.offset(offset)),
            AmbiguousOffset::Gap { .. } => MappedLocalTime::None,
            AmbiguousOffset::Fold { before, after } => {
                MappedLocalTime::Ambiguous(self.offset(before), self.offset(after))
            }
        }
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> ZoneOffset {
        self.offset_from_utc_datetime(&utc.and_time(chrono::NaiveTime::MIN))
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> ZoneOffset {
        // Past jiff's range (years ±9999) the nearest end's offset holds.
        let second = utc.and_utc().timestamp().clamp(
            jiff::Timestamp::MIN.as_second(),
            jiff::Timestamp::MAX.as_second(),
        );
        let at = jiff::Timestamp::from_second(second).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        self.offset(self.tz.to_offset(at))
    }
}

/// `local` as jiff's civil time, when it is within jiff's range.
fn civil(local: &NaiveDateTime) -> Option<jiff::civil::DateTime> {
    use chrono::{Datelike, Timelike};
    let year = i16::try_from(local.year()).ok()?;
    let small = |n: u32| i8::try_from(n).ok();
    jiff::civil::DateTime::new(
        year,
        small(local.month())?,
        small(local.day())?,
        small(local.hour())?,
        small(local.minute())?,
        small(local.second())?,
        // chrono keeps a leap second as nanoseconds past 10⁹: read as the
        // second it extends.
        i32::try_from(local.nanosecond() % 1_000_000_000).ok()?,
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, LocalResult};

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn local(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M").unwrap()
    }

    #[test]
    fn instants_read_in_a_zone_as_its_clocks_show_them_across_a_change() {
        let berlin = Zone::named("Europe/Berlin").unwrap();
        let at = |s| utc(s).with_timezone(&berlin).to_rfc3339();
        assert_eq!(at("2026-03-29T00:59:59Z"), "2026-03-29T01:59:59+01:00");
        assert_eq!(at("2026-03-29T01:00:00Z"), "2026-03-29T03:00:00+02:00");
        assert_eq!(at("2026-11-26T12:00:00Z"), "2026-11-26T13:00:00+01:00");
        // Far past any transition the zone's rule goes on (the POSIX footer).
        assert_eq!(at("2300-07-01T00:00:00Z"), "2300-07-01T02:00:00+02:00");
    }

    #[test]
    fn a_local_time_in_a_gap_is_none_and_in_a_fold_is_both() {
        let ny = Zone::named("America/New_York").unwrap();
        assert_eq!(
            ny.from_local_datetime(&local("2026-03-08 02:30")),
            LocalResult::None
        );
        match ny.from_local_datetime(&local("2026-11-01 01:30")) {
            LocalResult::Ambiguous(a, b) => {
                assert_eq!(a.to_rfc3339(), "2026-11-01T01:30:00-04:00");
                assert_eq!(b.to_rfc3339(), "2026-11-01T01:30:00-05:00");
            }
            other => panic!("{other:?}"),
        }
        let single = ny
            .from_local_datetime(&local("2026-11-26 09:00"))
            .single()
            .unwrap();
        assert_eq!(
            single.with_timezone(&Utc).to_rfc3339(),
            "2026-11-26T14:00:00+00:00"
        );
        assert_eq!(Zone::from_offset(single.offset()), ny);
    }

    #[test]
    fn names_outside_the_database_are_refused_and_utc_needs_none() {
        for name in ["Mars/Olympus", "../../etc/passwd", "", "Europe/Berlin\n"] {
            assert!(Zone::named(name).is_err(), "{name:?}");
        }
        assert_eq!(Zone::named("UTC").unwrap().to_string(), "UTC");
        for utc in ["Etc/UTC", "utc", "GMT", "Etc/Zulu"] {
            let zone = Zone::named(utc).unwrap();
            let summer = local("2026-07-01 12:00");
            assert_eq!(
                zone.offset_from_utc_datetime(&summer).fix(),
                Utc.fix(),
                "{utc}"
            );
            assert_eq!(zone.to_string(), utc);
        }
        let far = NaiveDate::MAX.and_time(chrono::NaiveTime::MIN);
        assert_eq!(Zone::utc().offset_from_utc_datetime(&far).fix(), Utc.fix());
        assert_eq!(
            Zone::utc().offset_from_local_datetime(&far),
            LocalResult::None
        );
    }
}
