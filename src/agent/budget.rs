//! The budget (SPEC §23): asked before every model request whether a
//! limit is reached, told what every reply spent. One is shared by every
//! task of a run, so with `--concurrency N` the tasks in flight draw on
//! one ledger and overshoot by at most one request each. The day is the
//! calendar day in `[schedule] timezone`; the day's spend is kept beside
//! the inbox ([`DaySpend`]) from a run's first task on.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};

use crate::base::zone::Zone;
use crate::config::{self, Config};
use crate::inbox::{DaySpend, SPEND_FILE};

/// The limits of a run and what it has spent against them.
pub struct Budget {
    limits: config::Budget,
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
    /// Where the day's spend is kept, from the first task on; `None` after
    /// it could not be written (the run goes on counting in memory).
    ledger: Option<PathBuf>,
    /// The ledger was read (once a run).
    kept: bool,
    /// Why the ledger could not be written, the first time.
    unsaved: Option<String>,
    /// The first limit reached, as it was said.
    refused: Option<String>,
}

/// Today's spend against each limit, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    pub today: DaySpend,
    pub limits: config::Budget,
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
                unsaved: None,
                refused: None,
            }),
        }
    }

    /// From now on the day's spend is read from, and added to, the ledger
    /// in `state_dir` (once; later calls change nothing). Without a daily
    /// limit there is nothing to keep.
    pub fn keep_ledger(&self, state_dir: &Path) {
        let mut s = self.lock();
        if !self.limits.daily() || s.kept {
            return;
        }
        self.roll(&mut s);
        let kept = DaySpend::load(state_dir, s.today.day);
        s.today.tokens = kept.tokens.saturating_add(s.pending.0);
        s.today.gpu_ms = kept.gpu_ms.saturating_add(s.pending.1);
        s.ledger = Some(state_dir.to_path_buf());
        s.kept = true;
        self.save(&mut s, false);
    }

    /// `Err` names the limit reached, what was spent and when it resets:
    /// no model request may start.
    pub fn check(&self) -> Result<(), String> {
        if !self.limits.any() {
            return Ok(());
        }
        let mut s = self.lock();
        self.roll(&mut s);
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

    /// Adds what one model request spent and keeps it in the ledger.
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
        self.save(&mut s, false);
    }

    /// Adds what is still pending to the ledger, waiting a little for its
    /// lock if another process holds it (the end of a run).
    pub fn flush(&self) {
        let mut s = self.lock();
        self.save(&mut s, true);
    }

    /// Adds the pending spend to the ledger. A lock held elsewhere leaves
    /// it pending unless `wait`; a ledger that cannot be written is said
    /// once, and the run goes on from its own count.
    fn save(&self, s: &mut Spending, wait: bool) {
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
            Ok(Some(sum)) => {
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
                s.unsaved = Some(why);
                s.ledger = None;
            }
        }
    }

    /// Today's spend and the limits.
    pub fn standing(&self) -> Standing {
        let mut s = self.lock();
        self.roll(&mut s);
        Standing {
            today: s.today,
            limits: self.limits,
        }
    }

    /// The ledger could not be written: a problem the run reports.
    pub fn problem(&self) -> Option<String> {
        self.lock().unsaved.clone()
    }

    /// A new day starts from nothing; a clock that went back to an
    /// earlier day changes nothing.
    fn roll(&self, s: &mut Spending) {
        let today = day_of((self.clock)(), &self.tz);
        if today > s.today.day {
            self.save(s, false);
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
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The calendar day of `t` in `tz`.
pub fn day_of(t: DateTime<Utc>, tz: &Zone) -> NaiveDate {
    t.with_timezone(tz).date_naive()
}

#[cfg(test)]
mod tests;
