//! What the digest's period spent (docs/operating.md, "Digest and mail"):
//! the tokens and GPU time the summaries of the runs that finished in the
//! period count — the period, never a calendar day, so a digest at 07:00
//! covers the night before midnight too; and with a daily `[budget]` limit,
//! today's standing in the ledger beside the inbox (every process's)
//! against each limit, said as today's.

use std::path::Path;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;

use harness_base::zone::Zone;
use harness_records::ListedRun;
use harness_state::{DaySpend, Found, Standing, day_of};

use super::{Period, in_period};

/// The period's spend, and today's against the daily limits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spend {
    /// Prompt + completion tokens of the runs that finished in the period.
    pub tokens: u64,
    /// Their GPU time (RunPod `executionTime`): only when some was spent,
    /// or a GPU limit is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_seconds: Option<f64>,
    /// With a daily `[budget]` limit: the ledger's day so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub today: Option<DaySpent>,
}

/// The ledger's day so far (every process's), against the daily limits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DaySpent {
    pub day: NaiveDate,
    pub tokens: u64,
    /// Only when some was spent, or a GPU limit is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_seconds_per_day: Option<u64>,
}

impl Spend {
    /// `Spent in this period: 320 tokens.`, then today's standing against
    /// each limit set.
    pub(super) fn line(&self, timezone: &str) -> String {
        let mut parts = vec![format!("{} tokens", self.tokens)];
        if let Some(gpu) = self.gpu_seconds {
            parts.push(format!("{gpu:.1} GPU-seconds"));
        }
        let mut line = format!("Spent in this period: {}.", parts.join(", "));
        if let Some(today) = &self.today {
            let mut parts = vec![match today.tokens_per_day {
                Some(limit) => format!("{} of {limit} tokens (tokens_per_day)", today.tokens),
                None => format!("{} tokens", today.tokens),
            }];
            if let Some(gpu) = today.gpu_seconds {
                parts.push(match today.gpu_seconds_per_day {
                    Some(limit) => format!("{gpu:.1} of {limit} GPU-seconds (gpu_seconds_per_day)"),
                    None => format!("{gpu:.1} GPU-seconds"),
                });
            }
            line.push_str(&format!(
                "\nToday so far ({}, {timezone}, every process): {}.",
                today.day,
                parts.join(", ")
            ));
        }
        line
    }
}

/// The day's standing at `until`, when no run has it at hand: the
/// ledger's, with a daily limit set (an unreadable or untrusted ledger is
/// nothing yet, as a run counts it).
pub fn ledger_standing(
    state_dir: &Path,
    limits: harness_config::Budget,
    until: DateTime<Utc>,
    zone: &Zone,
) -> Option<Standing> {
    if !limits.daily() {
        return None;
    }
    let day = day_of(until, zone);
    let today = match DaySpend::find(state_dir, day) {
        Found::Today(spent) => spent,
        _ => DaySpend::nothing(day),
    };
    Some(Standing { today, limits })
}

/// What the runs that finished in `period` spent, and `ledger`'s day.
pub(super) fn spend(runs: &[&ListedRun], period: &Period, ledger: Option<Standing>) -> Spend {
    let gpu_limit = ledger.is_some_and(|s| s.limits.gpu_seconds_per_day > 0);
    let shown = |gpu_ms: u64| (gpu_ms > 0 || gpu_limit).then(|| gpu_ms as f64 / 1000.0);
    let in_it = runs
        .iter()
        .map(|r| &r.summary)
        .filter(|s| in_period(s, period));
    let (tokens, gpu_ms) = in_it.fold((0u64, 0u64), |(tokens, gpu), s| {
        (
            tokens.saturating_add(s.total_tokens),
            gpu.saturating_add(s.runpod_exec_ms.unwrap_or(0)),
        )
    });
    let today = ledger.map(|standing| {
        let per_day = |n: u64| (n > 0).then_some(n);
        DaySpent {
            day: standing.today.day,
            tokens: standing.today.tokens,
            gpu_seconds: shown(standing.today.gpu_ms),
            tokens_per_day: per_day(standing.limits.tokens_per_day),
            gpu_seconds_per_day: per_day(standing.limits.gpu_seconds_per_day),
        }
    });
    Spend {
        tokens,
        gpu_seconds: shown(gpu_ms),
        today,
    }
}
