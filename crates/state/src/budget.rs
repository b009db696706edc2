//! The budget (docs/budget-and-traces.md, "Budget"): spend's one home — the
//! `[budget]` limits, what was spent against them, the ledger, and the check.
//! It is asked and charged at one seam: the endpoint it meters asks
//! [`Budget::check`] before every live attempt and [`Budget::spend`]s each as
//! it ends (its GPU time, an answered one's tokens with it); the drain asks the
//! same check before a task starts, and keeps the ledger for a run's length
//! ([`Budget::keep_ledger`], [`Budget::flush`]). One is shared by every task of
//! a run, so with `--concurrency N` the tasks in flight draw on one ledger and
//! overshoot by at most one request each. The day is the calendar day in
//! `[schedule] timezone`; the day's spend is kept beside the inbox
//! ([`DaySpend`]) from a run's start, and read there again before every
//! request, so processes spending at the same time (`run`, `exec`, `eval`)
//! overshoot a daily limit by at most one request each too.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};

use super::spend::move_aside;
use super::{Added, DaySpend, Found, SPEND_FILE, Wait};
use harness_base::zone::Zone;
use harness_config::{self as config, Config};

/// What a look at the ledger found: none there, the day's spend (or an
/// earlier day's), or one that cannot be read or trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Looked {
    Missing,
    Read,
    Lost,
}

/// The limits of a run and what it has spent against them.
pub struct Budget {
    limits: config::SpendLimits,
    tz: Zone,
    /// The run's clock (`TaskDeps::clock`).
    clock: Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>,
    state: Mutex<Spending>,
}

struct Spending {
    /// What the day has spent as far as this process knows: the ledger's
    /// sum when it was last added to (never less than its own count).
    today: DaySpend,
    /// This process's tokens and GPU time not yet added to the ledger.
    pending: (u64, u64),
    /// Tokens this process spent (for `tokens_per_run`).
    run_tokens: u64,
    /// Where the day's spend is kept, from the run's start; `None` after
    /// it could not be written (the run goes on counting in memory).
    ledger: Option<PathBuf>,
    /// The ledger was read (once a run).
    kept: bool,
    /// An unreadable ledger was warned about, an untrusted one reported
    /// (each once a run).
    warned: bool,
    distrusted: bool,
    /// What the run must report: the ledger could not be written, or one
    /// that was not trusted was replaced (each said once).
    problems: Vec<String>,
    /// The first limit reached, as it was said.
    refused: Option<String>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Today's spend against the `[budget]` limits: the one read-out of it,
/// for the metrics, `status` and the digest (as JSON: `day`, `tokens`,
/// `gpu_seconds`, and each limit that is set).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpendToday {
    /// The calendar day in `[schedule] timezone`.
    pub day: NaiveDate,
    pub tokens: u64,
    pub gpu_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_seconds_per_day: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_run: Option<u64>,
}

impl SpendToday {
    pub fn of(today: DaySpend, limits: config::SpendLimits) -> SpendToday {
        let set = |n: u64| (n > 0).then_some(n);
        SpendToday {
            day: today.day,
            tokens: today.tokens,
            gpu_seconds: today.gpu_ms as f64 / 1000.0,
            tokens_per_day: set(limits.tokens_per_day),
            gpu_seconds_per_day: set(limits.gpu_seconds_per_day),
            tokens_per_run: set(limits.tokens_per_run),
        }
    }

    /// The day of `now` as the ledger in `state_dir` says, for a process
    /// that keeps none (`status`, `digest`); one that cannot be read or
    /// trusted counts nothing yet, as a run counts it, and says why.
    pub fn in_ledger(
        state_dir: &Path,
        limits: config::SpendLimits,
        now: DateTime<Utc>,
        zone: &Zone,
    ) -> (SpendToday, Option<String>) {
        let day = day_of(now, zone);
        let (today, why) = match DaySpend::read(state_dir, day) {
            Ok(today) => (today, None),
            Err(why) => (DaySpend::nothing(day), Some(why)),
        };
        (SpendToday::of(today, limits), why)
    }

    /// A daily limit is set.
    pub fn daily(&self) -> bool {
        self.tokens_per_day.is_some() || self.gpu_seconds_per_day.is_some()
    }
}

impl Budget {
    pub fn new(cfg: &Config, clock: Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>) -> Budget {
        let today = day_of(clock(), &cfg.timezone);
        Budget {
            limits: cfg.budget,
            tz: cfg.timezone.clone(),
            clock,
            state: Mutex::new(Spending {
                today: DaySpend::nothing(today),
                pending: (0, 0),
                run_tokens: 0,
                ledger: None,
                kept: false,
                warned: false,
                distrusted: false,
                problems: Vec::new(),
                refused: None,
            }),
        }
    }

    /// From now on the day's spend is read from, and added to, the ledger
    /// in `state_dir` (once; later calls change nothing). Without a daily
    /// limit there is nothing to keep. What no process can keep the spend
    /// in, at the ledger's name or its lock's, is moved aside first
    /// ([`move_aside`], each a problem of the run). `true` when the day's
    /// spend so far is not known from the ledger — something was moved
    /// aside, or the ledger could not be read or trusted —: the caller
    /// rebuilds it from the run records ([`Budget::rebuilt`]) before the
    /// first request.
    pub fn keep_ledger(&self, state_dir: &Path) -> bool {
        let mut s = self.lock();
        if !self.limits.daily() || s.kept {
            return false;
        }
        self.roll(&mut s);
        let moved = move_aside(state_dir, (self.clock)());
        for line in &moved {
            tracing::warn!("{line}");
            s.problems.push(line.clone());
        }
        s.ledger = Some(state_dir.to_path_buf());
        s.kept = true;
        self.save(&mut s, Wait::No);
        let looked = self.refresh(&mut s);
        if looked == Looked::Missing {
            tracing::warn!(path = %state_dir.join(SPEND_FILE).display(), "no budget ledger yet; today's spend counts from 0");
        }
        !moved.is_empty() || looked == Looked::Lost
    }

    /// The day's spend as the run records say it (`spent`), where the
    /// ledger lost it: counted from then on, and kept in the ledger —
    /// never lowering what is counted already.
    pub fn rebuilt(&self, spent: DaySpend) {
        let mut s = self.lock();
        self.roll(&mut s);
        if spent.day != s.today.day {
            return;
        }
        let more = (
            spent.tokens.saturating_sub(s.today.tokens),
            spent.gpu_ms.saturating_sub(s.today.gpu_ms),
        );
        s.pending.0 = s.pending.0.saturating_add(more.0);
        s.pending.1 = s.pending.1.saturating_add(more.1);
        s.today.tokens = s.today.tokens.max(spent.tokens);
        s.today.gpu_ms = s.today.gpu_ms.max(spent.gpu_ms);
        self.save(&mut s, Wait::Briefly);
    }

    /// What the day spent, as the ledger says now (another process may
    /// have added to it) plus this process's pending spend — never less
    /// than this process already counted; and what the look found.
    fn refresh(&self, s: &mut Spending) -> Looked {
        let Some(dir) = s.ledger.clone() else {
            return Looked::Missing;
        };
        let found = DaySpend::find(&dir, s.today.day);
        let looked = match found {
            Found::Absent => Looked::Missing,
            Found::Today(_) | Found::Earlier => Looked::Read,
            Found::Unreadable(_) | Found::Distrusted(_) => Looked::Lost,
        };
        let kept = match found {
            Found::Today(spent) => spent,
            Found::Absent | Found::Earlier => DaySpend::nothing(s.today.day),
            found @ Found::Unreadable(_) => {
                self.say(s, &dir, &found);
                DaySpend::nothing(s.today.day)
            }
            // Replaced at once, by what this process has pending (nothing,
            // at its first look), so a run that spends nothing leaves a
            // ledger it trusts.
            found @ Found::Distrusted(_) => {
                self.say(s, &dir, &found);
                let pending = DaySpend {
                    day: s.today.day,
                    tokens: s.pending.0,
                    gpu_ms: s.pending.1,
                };
                if let Ok(Some(_)) = DaySpend::add(&dir, pending, Wait::No) {
                    s.pending = (0, 0);
                }
                DaySpend::nothing(s.today.day)
            }
        };
        s.today.tokens = s.today.tokens.max(kept.tokens.saturating_add(s.pending.0));
        s.today.gpu_ms = s.today.gpu_ms.max(kept.gpu_ms.saturating_add(s.pending.1));
        looked
    }

    /// A ledger that cannot be read is warned about once; one that is not
    /// trusted is a problem of the run, said once.
    fn say(&self, s: &mut Spending, dir: &Path, found: &Found) {
        let path = dir.join(SPEND_FILE);
        match found {
            Found::Unreadable(why) if !s.warned => {
                s.warned = true;
                tracing::warn!(path = %path.display(), error = %why, "budget ledger unreadable; today's spend counts from 0");
            }
            Found::Distrusted(why) if !s.distrusted => {
                s.distrusted = true;
                let problem = format!(
                    "the budget ledger {} is not trusted ({why}); today's spend counts from this process's own, which replaces it",
                    path.display()
                );
                tracing::warn!("{problem}");
                s.problems.push(problem);
            }
            _ => {}
        }
    }

    /// `Err` names the limit reached, what was spent and when it resets:
    /// no model request may start (the endpoint asks before each live
    /// attempt), and no task (the drain asks before each). The ledger is
    /// read first: what other processes spent counts.
    pub fn check(&self) -> Result<(), String> {
        if !self.limits.any() {
            return Ok(());
        }
        let mut s = self.lock();
        self.roll(&mut s);
        // What this process spent goes in first, waiting a little for a
        // holder adding its own (processes finish requests together).
        self.save(&mut s, Wait::Briefly);
        self.refresh(&mut s);
        let verdict = self.verdict(&s);
        if let Err(why) = &verdict
            && s.refused.is_none()
        {
            s.refused = Some(why.clone());
        }
        verdict
    }

    /// The first limit this process met, as it was said then.
    pub fn refused(&self) -> Option<String> {
        self.lock().refused.clone()
    }

    fn verdict(&self, s: &Spending) -> Result<(), String> {
        let l = &self.limits;
        if l.tokens_per_run > 0 && s.run_tokens >= l.tokens_per_run {
            return Err(format!(
                "[budget] tokens_per_run = {} reached ({} tokens spent in this run); it resets when the next run starts",
                l.tokens_per_run, s.run_tokens
            ));
        }
        let resets = || self.day_start(s.today.day + Duration::days(1)).to_rfc3339();
        if l.tokens_per_day > 0 && s.today.tokens >= l.tokens_per_day {
            return Err(format!(
                "[budget] tokens_per_day = {} reached ({} tokens spent on {}); it resets at {}",
                l.tokens_per_day,
                s.today.tokens,
                s.today.day,
                resets()
            ));
        }
        if l.gpu_seconds_per_day > 0 && s.today.gpu_ms >= l.gpu_seconds_per_day.saturating_mul(1000)
        {
            return Err(format!(
                "[budget] gpu_seconds_per_day = {} reached ({:.1} GPU-seconds spent on {}); it resets at {}",
                l.gpu_seconds_per_day,
                s.today.gpu_ms as f64 / 1000.0,
                s.today.day,
                resets()
            ));
        }
        Ok(())
    }

    /// Adds what one model request spent and keeps it in the ledger (the
    /// endpoint, as each live attempt ends).
    pub fn spend(&self, tokens: u64, gpu_ms: u64) {
        if !self.limits.any() {
            return;
        }
        let mut s = self.lock();
        self.roll(&mut s);
        s.run_tokens = s.run_tokens.saturating_add(tokens);
        s.today.tokens = s.today.tokens.saturating_add(tokens);
        s.today.gpu_ms = s.today.gpu_ms.saturating_add(gpu_ms);
        s.pending.0 = s.pending.0.saturating_add(tokens);
        s.pending.1 = s.pending.1.saturating_add(gpu_ms);
        self.save(&mut s, Wait::No);
    }

    /// Adds what is still pending to the ledger, waiting a little for its
    /// lock if another process holds it (the end of a run).
    pub fn flush(&self) {
        let mut s = self.lock();
        self.save(&mut s, Wait::Long);
    }

    /// Adds the pending spend to the ledger. A lock held elsewhere leaves
    /// it pending unless `wait`; a ledger that cannot be written is said
    /// once, and the run goes on from its own count.
    fn save(&self, s: &mut Spending, wait: Wait) {
        let Some(dir) = s.ledger.clone() else {
            return;
        };
        if s.pending == (0, 0) {
            return;
        }
        let pending = DaySpend {
            day: s.today.day,
            tokens: s.pending.0,
            gpu_ms: s.pending.1,
        };
        match DaySpend::add(&dir, pending, wait) {
            // What every process spent today: never less than this one's count.
            Ok(Some(Added { sum, replaced })) => {
                if let Some(found) = replaced {
                    self.say(s, &dir, &found);
                }
                s.pending = (0, 0);
                s.today.tokens = s.today.tokens.max(sum.tokens);
                s.today.gpu_ms = s.today.gpu_ms.max(sum.gpu_ms);
            }
            Ok(None) => {}
            Err(e) => {
                let why = format!(
                    "the budget ledger {} cannot be written ({e}); this run keeps its limits from its own count",
                    dir.join(SPEND_FILE).display()
                );
                tracing::warn!("{why}");
                s.problems.push(why);
                s.ledger = None;
            }
        }
    }

    /// Today's spend and the limits.
    pub fn spend_today(&self) -> SpendToday {
        let mut s = self.lock();
        self.roll(&mut s);
        SpendToday::of(s.today, self.limits)
    }

    /// What the run reports about the ledger: it could not be written,
    /// or one that was not trusted was replaced.
    pub fn problems(&self) -> Vec<String> {
        self.lock().problems.clone()
    }

    /// A new day starts from nothing; a clock that went back to an
    /// earlier day changes nothing.
    fn roll(&self, s: &mut Spending) {
        let today = day_of((self.clock)(), &self.tz);
        if today > s.today.day {
            self.save(s, Wait::No);
            s.today = DaySpend::nothing(today);
            s.pending = (0, 0);
        }
    }

    /// The first instant of `day` in the time zone (midnight, or the end
    /// of a gap that swallowed it).
    fn day_start(&self, day: NaiveDate) -> DateTime<Zone> {
        (0..24)
            .find_map(|h| {
                let t = day.and_hms_opt(h, 0, 0)?;
                self.tz.from_local_datetime(&t).earliest()
            })
            .unwrap_or_else(|| {
                self.tz
                    .from_utc_datetime(&day.and_time(chrono::NaiveTime::MIN))
            })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Spending> {
        harness_base::sync::lock(&self.state)
    }
}

/// The calendar day of `t` in `tz`.
pub fn day_of(t: DateTime<Utc>, tz: &Zone) -> NaiveDate {
    t.with_timezone(tz).date_naive()
}

#[cfg(test)]
mod tests;
