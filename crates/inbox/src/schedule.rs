//! When a recurring task is due (docs/tasks.md, "Recurring tasks"): its
//! `schedule`, a five-field cron expression or `@hourly`, `@daily`,
//! `@weekly`, `@monthly`, read by a maintained parser (croner) in the
//! `[schedule] timezone`.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use harness_base::zone::Zone;

/// A parsed `schedule`.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: croner::Cron,
}

const NICKNAMES: &[&str] = &["@hourly", "@daily", "@weekly", "@monthly"];

/// The rule where a schedule belongs, in the words every place says it.
pub const RECURRING_NEEDS_ONE: &str = "frontmatter: schedule: a recurring task needs one";
pub const ONLY_RECURRING: &str =
    "frontmatter: schedule: only a recurring task (in [paths] recurring) has a schedule";

impl Schedule {
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = text.trim();
        let shape_ok = if text.starts_with('@') {
            NICKNAMES.iter().any(|n| n.eq_ignore_ascii_case(text))
        } else {
            text.split_whitespace().count() == 5
        };
        if !shape_ok {
            return Err(format!(
                "schedule = {text:?}: expected five cron fields (minute hour day-of-month month day-of-week) or one of {}",
                NICKNAMES.join(", ")
            ));
        }
        let cron = croner::Cron::from_str(text).map_err(|e| format!("schedule = {text:?}: {e}"))?;
        Ok(Schedule { cron })
    }

    /// The latest scheduled time at or before `now`, as a clock in `tz`
    /// reads the schedule.
    pub fn latest(&self, now: DateTime<Utc>, tz: &Zone) -> Option<DateTime<Utc>> {
        self.cron
            .find_previous_occurrence(&now.with_timezone(tz), true)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    /// The first scheduled time after `t`.
    pub fn next_after(&self, t: DateTime<Utc>, tz: &Zone) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&t.with_timezone(tz), false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}
