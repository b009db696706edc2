//! What the digest's period spent (docs/operating.md, "Digest and mail"):
//! the tokens and GPU time the summaries of the runs that finished in the
//! period count — the period, never a calendar day, so a digest at 07:00
//! covers the night before midnight too; and with a daily `[budget]` limit,
//! today's standing in the ledger beside the inbox (every process's)
//! against each limit, said as today's.

use serde::Serialize;

use harness_records::ListedRun;
use harness_state::SpendToday;

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
    /// With a daily `[budget]` limit: the ledger's day so far (every
    /// process's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub today: Option<SpendToday>,
}

impl Spend {
    /// `Spent in this period: 320 tokens.`, then today's standing against
    /// each daily limit set (GPU time only when some was spent, or it has
    /// a limit).
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
            let gpu = today.gpu_seconds;
            match today.gpu_seconds_per_day {
                Some(limit) => parts.push(format!(
                    "{gpu:.1} of {limit} GPU-seconds (gpu_seconds_per_day)"
                )),
                None if gpu > 0.0 => parts.push(format!("{gpu:.1} GPU-seconds")),
                None => {}
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

/// What the runs that finished in `period` spent, and `ledger`'s day.
pub(super) fn spend(runs: &[&ListedRun], period: &Period, ledger: Option<SpendToday>) -> Spend {
    let gpu_limit = ledger.is_some_and(|s| s.gpu_seconds_per_day.is_some());
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
    Spend {
        tokens,
        gpu_seconds: (gpu_ms > 0 || gpu_limit).then(|| gpu_ms as f64 / 1000.0),
        today: ledger.filter(SpendToday::daily),
    }
}
