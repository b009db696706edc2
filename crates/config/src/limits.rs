//! `[limits]` and the floors and ceilings of every number a person sets
//! (docs/configuration.md).

use serde::Deserialize;

/// `[limits]`: the bounds every task runs within. Each has a floor and a
/// ceiling ([`bounds`]); a value outside them is a configuration error.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Model calls per task.
    pub max_turns: u32,
    /// Wall-clock seconds per task, retries and polling included.
    pub max_wall_secs: u64,
    /// Prompt + completion tokens summed over a task.
    pub max_total_tokens: u64,
    /// Every tool result is cut to this many characters, with a note.
    pub max_tool_result_chars: usize,
    /// The model's context window in tokens; 0 = ask the server or do not manage.
    pub context_tokens: u32,
    /// Tasks run at once.
    pub concurrency: usize,
    /// Runs a retryable task gets before it moves to `failed/`.
    pub max_attempts: u32,
    /// Tool calls run from one reply; the rest are answered "not run".
    pub max_calls_per_turn: u32,
    /// Write-tool calls run per task; the rest are answered "not run".
    pub max_writes: u32,
    /// A task that did not finish goes on from its records
    /// (docs/resume-replay-eval.md, "Resume").
    pub resume: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_turns: 8,
            max_wall_secs: 600,
            max_total_tokens: 60_000,
            max_tool_result_chars: 6000,
            context_tokens: 8192,
            concurrency: 1,
            max_attempts: 3,
            max_calls_per_turn: 8,
            max_writes: 5,
            resume: true,
        }
    }
}

/// Floors and ceilings of every number a person sets (docs/configuration.md),
/// as inclusive `(min, max)` pairs. The config refuses a value outside them
/// (exit 2); a task file doing so is an invalid task.
pub mod bounds {
    pub const MAX_TURNS: (u64, u64) = (1, 1000);
    pub const MAX_WALL_SECS: (u64, u64) = (1, 86_400);
    pub const MAX_TOTAL_TOKENS: (u64, u64) = (1, 1_000_000_000);
    pub const MAX_TOKENS: (u64, u64) = (1, 1_000_000);
    pub(crate) const MAX_TOOL_RESULT_CHARS: (u64, u64) = (200, 1_000_000);
    pub const CONTEXT_TOKENS: (u64, u64) = (0, 10_000_000);
    pub(crate) const CONCURRENCY: (u64, u64) = (1, 256);
    pub(crate) const MAX_ATTEMPTS: (u64, u64) = (1, 100);
    pub const MAX_CALLS_PER_TURN: (u64, u64) = (1, 64);
    pub const MAX_WRITES: (u64, u64) = (0, 1000);
    pub(crate) const TIMEOUT_SECS: (u64, u64) = (1, 3600);
    pub(crate) const POLL_INTERVAL_MS: (u64, u64) = (50, 60_000);
    /// `[tools.webfetch] max_bytes`: no page is read past what an endpoint body may hold.
    pub(crate) const WEBFETCH_MAX_BYTES: (u64, u64) = (1024, 32 * 1024 * 1024);
    /// `[retention] keep_days`: 0 keeps everything; a century at most.
    pub(crate) const KEEP_DAYS: (u64, u64) = (0, 36_500);
    pub(crate) const KEEP_RUNS: (u64, u64) = (0, 1_000_000);
    /// `[budget]` tokens, a day's or a run's: 0 is no limit.
    pub(crate) const BUDGET_TOKENS: (u64, u64) = (0, 1_000_000_000_000);
    /// `[budget] gpu_seconds_per_day`: 0 is no limit; a thousand GPUs a day at most.
    pub(crate) const BUDGET_GPU_SECONDS: (u64, u64) = (0, 86_400_000);
    /// `[traces] flush_secs`: what the end of a run may wait for the last spans.
    pub(crate) const FLUSH_SECS: (u64, u64) = (1, 300);
}

/// `Err` names `key` when `value` is outside `range`, a `(min, max)` of [`bounds`].
pub fn check_range(key: &str, value: u64, range: (u64, u64)) -> Result<(), String> {
    let (min, max) = range;
    if value < min {
        Err(format!("{key} = {value} is below its minimum, {min}"))
    } else if value > max {
        Err(format!("{key} = {value} is above its ceiling, {max}"))
    } else {
        Ok(())
    }
}

/// `Err` names `key` when `value` is `nan` or infinite.
pub fn check_finite(key: &str, value: Option<f64>) -> Result<(), String> {
    match value {
        Some(v) if !v.is_finite() => Err(format!("{key} = {v} is not a finite number")),
        _ => Ok(()),
    }
}

impl Limits {
    /// Every limit within its bounds; `Err` names the first that is not.
    pub(super) fn check(&self) -> Result<(), String> {
        let u = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        for (key, value, range) in [
            ("max_turns", u64::from(self.max_turns), bounds::MAX_TURNS),
            ("max_wall_secs", self.max_wall_secs, bounds::MAX_WALL_SECS),
            (
                "max_total_tokens",
                self.max_total_tokens,
                bounds::MAX_TOTAL_TOKENS,
            ),
            (
                "max_tool_result_chars",
                u(self.max_tool_result_chars),
                bounds::MAX_TOOL_RESULT_CHARS,
            ),
            (
                "context_tokens",
                u64::from(self.context_tokens),
                bounds::CONTEXT_TOKENS,
            ),
            ("concurrency", u(self.concurrency), bounds::CONCURRENCY),
            (
                "max_attempts",
                u64::from(self.max_attempts),
                bounds::MAX_ATTEMPTS,
            ),
            (
                "max_calls_per_turn",
                u64::from(self.max_calls_per_turn),
                bounds::MAX_CALLS_PER_TURN,
            ),
            ("max_writes", u64::from(self.max_writes), bounds::MAX_WRITES),
        ] {
            check_range(&format!("[limits] {key}"), value, range)?;
        }
        Ok(())
    }
}

/// `[retention]` (docs/operating.md, "Retention"): run folders (evals included)
/// older than `keep_days` go at the end of each run, but for the newest
/// `keep_runs` of each task; `done/` files older than `keep_days` too.
/// `keep_days = 0` keeps everything.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Retention {
    pub keep_days: u32,
    pub keep_runs: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_days: 90,
            keep_runs: 10,
        }
    }
}

impl Retention {
    pub(super) fn check(&self) -> Result<(), String> {
        check_range(
            "[retention] keep_days",
            u64::from(self.keep_days),
            bounds::KEEP_DAYS,
        )?;
        check_range(
            "[retention] keep_runs",
            u64::from(self.keep_runs),
            bounds::KEEP_RUNS,
        )
    }
}

/// `[budget]` (docs/budget-and-traces.md, "Budget"): what a calendar day (in
/// `[schedule] timezone`) or one run may spend on model requests; 0 is no
/// limit. Reaching one pauses the queue; it never fails a task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default, expecting = "a [budget] table")]
pub struct SpendLimits {
    /// Prompt + completion tokens a day.
    pub tokens_per_day: u64,
    /// RunPod `executionTime` a day; for the openai kind, the wall time of
    /// the chat requests.
    pub gpu_seconds_per_day: u64,
    /// Prompt + completion tokens one run (one process) may spend.
    pub tokens_per_run: u64,
}

impl SpendLimits {
    pub(super) fn check(&self) -> Result<(), String> {
        check_range(
            "[budget] tokens_per_day",
            self.tokens_per_day,
            bounds::BUDGET_TOKENS,
        )?;
        check_range(
            "[budget] gpu_seconds_per_day",
            self.gpu_seconds_per_day,
            bounds::BUDGET_GPU_SECONDS,
        )?;
        check_range(
            "[budget] tokens_per_run",
            self.tokens_per_run,
            bounds::BUDGET_TOKENS,
        )
    }

    /// A daily limit is set: the day's spend is kept in the ledger.
    pub fn daily(&self) -> bool {
        self.tokens_per_day > 0 || self.gpu_seconds_per_day > 0
    }

    /// Any limit is set.
    pub fn any(&self) -> bool {
        self.daily() || self.tokens_per_run > 0
    }
}
