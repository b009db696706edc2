//! Recurring tasks (docs/tasks.md, "Recurring tasks"): files in
//! `[paths] recurring` that never move, each run when a time of its
//! `schedule` has passed since the slot it last ran for — missed slots
//! collapse into one run, a new file waits for its next scheduled time —
//! with their slots kept in a state file beside the inbox, written whole (a
//! new file, then a rename).

use std::path::Path;

use chrono::{DateTime, NaiveDate, Utc};

use super::{Slot, UsageError};
use harness_config::Config;
use harness_inbox::{self as inbox, InboxEntry, Schedule};
use harness_records::{Status, Summary};
use harness_state::{AttemptCount, RunRef, Slots, TaskSlots};

/// A recurring task to run now: for its slot, or — a file that cannot run
/// (`broken`, its version) — once, to record why as `invalid_task`.
#[derive(Debug, Clone)]
pub(super) struct Due {
    pub(super) entry: InboxEntry,
    pub(super) slot: Slot,
    pub(super) broken: Option<String>,
}

/// A recurring task file and its schedule, or why it has none that works.
#[derive(Debug, Clone)]
pub struct Recurring {
    pub entry: InboxEntry,
    pub schedule: Result<Schedule, String>,
}

/// Every recurring task file, oldest name first; `None` when the folder
/// cannot be listed (missing, or unreadable: logged), which is not the
/// same as empty — no slot is forgotten for it.
pub fn list(cfg: &Config) -> Option<Vec<Recurring>> {
    let entries = match inbox::list(&cfg.paths.recurring) {
        Ok(entries) => entries,
        Err(e) => {
            if cfg.paths.recurring.exists() {
                tracing::warn!(error = %format!("{e:#}"), "cannot read the recurring tasks");
            }
            return None;
        }
    };
    let listed = entries
        .into_iter()
        .map(|entry| {
            let schedule = inbox::read_task(&entry.path)
                .map_err(|p| p.to_string())
                .and_then(|task| match task.frontmatter.schedule {
                    Some(s) => Schedule::parse(&s),
                    None => Err(inbox::RECURRING_NEEDS_ONE.into()),
                });
            Recurring { entry, schedule }
        })
        .collect();
    Some(listed)
}

/// The tasks due at `now`, each with the slot it runs for. A task seen for
/// the first time is recorded, not run; names gone from the folder are
/// forgotten; a file without a working schedule is logged and skipped.
pub(super) fn due(
    cfg: &Config,
    tasks: &[Recurring],
    now: DateTime<Utc>,
    state: &mut Slots,
) -> Vec<Due> {
    state
        .tasks
        .retain(|name, _| tasks.iter().any(|t| &t.entry.name == name));
    state.broken.retain(|name, _| {
        tasks
            .iter()
            .any(|t| &t.entry.name == name && t.schedule.is_err())
    });
    let mut due = Vec::new();
    for task in tasks {
        let name = &task.entry.name;
        let schedule = match &task.schedule {
            Ok(s) => s,
            Err(why) => {
                let version = version_of(&task.entry.path);
                if state.broken.get(name) == Some(&version) {
                    tracing::warn!(task = %harness_base::text::printable(name), error = %why, "recurring task not run (its record says so already)");
                } else {
                    let slot = slot(cfg, now, state.last_success(name));
                    due.push(Due {
                        entry: task.entry.clone(),
                        slot,
                        broken: Some(version),
                    });
                }
                continue;
            }
        };
        let Some(seen) = state.tasks.get_mut(name) else {
            // First due at its next scheduled time after it was put there
            // (its file's time, when that is not ahead of the clock) — or,
            // when the state could not be read, after now.
            let added = if state.unreadable {
                now
            } else {
                added_at(&task.entry.path, now)
            };
            state.tasks.insert(
                name.clone(),
                TaskSlots {
                    since: added,
                    done: None,
                    pending: None,
                    attempts: 0,
                    runs: Vec::new(),
                    last_success: None,
                },
            );
            if let Some(at) = due_slot(cfg, schedule, added, None, now) {
                due.push(Due {
                    entry: task.entry.clone(),
                    slot: slot(cfg, at, None),
                    broken: None,
                });
            }
            continue;
        };
        if seen.since > now || seen.done.is_some_and(|d| d > now) {
            tracing::warn!(task = %harness_base::text::printable(name), "a recurring slot lies ahead of the clock (the clock went back): counting from now");
            seen.since = seen.since.min(now);
            seen.done = seen.done.map(|d| d.min(now));
        }
        if let Some(at) = due_slot(cfg, schedule, seen.since, seen.done, now) {
            due.push(Due {
                entry: task.entry.clone(),
                slot: slot(cfg, at, state.last_success(name)),
                broken: None,
            });
        }
    }
    due
}

/// A file's version: its modification time, to the nanosecond.
fn version_of(path: &Path) -> String {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .map(|t| DateTime::<Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
        .unwrap_or_else(|_| "unknown".into())
}

/// `run-task --recurring NAME`: the task now, whatever its slots say.
pub(super) fn now_slot(
    cfg: &Config,
    tasks: &[Recurring],
    name: &str,
    now: DateTime<Utc>,
    state: &Slots,
) -> Result<Due, UsageError> {
    let task = tasks.iter().find(|t| t.entry.name == name).ok_or_else(|| {
        let wants = format!(
            "run-task --recurring runs tasks from {}/",
            cfg.paths.recurring.display()
        );
        UsageError(inbox::whereabouts(&cfg.paths, name).say(
            &cfg.paths,
            inbox::Place::Recurring,
            &wants,
        ))
    })?;
    task.schedule
        .as_ref()
        .map_err(|why| UsageError(format!("{}: {why}", task.entry.path.display())))?;
    Ok(Due {
        entry: task.entry.clone(),
        slot: slot(cfg, now, state.last_success(name)),
        broken: None,
    })
}

/// The slot a task is due for at `now`: the latest scheduled time, when
/// it is later than `since` and than the slot `done` — and, when the
/// clocks went back and an hour's times came twice, not at the wall-clock
/// time of `done` (that slot again).
fn due_slot(
    cfg: &Config,
    schedule: &Schedule,
    since: DateTime<Utc>,
    done: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let after = done.map_or(since, |d| d.max(since));
    let wall = |t: DateTime<Utc>| t.with_timezone(&cfg.timezone).naive_local();
    schedule
        .latest(now, &cfg.timezone)
        .filter(|at| *at > after && done.is_none_or(|d| wall(d) != wall(*at)))
}

/// When a recurring file was put there: its file time, or `now` when
/// that is ahead of the clock (or unknown).
fn added_at(path: &Path, now: DateTime<Utc>) -> DateTime<Utc> {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .map(DateTime::<Utc>::from)
        .map_or(now, |t| t.min(now))
}

fn slot(cfg: &Config, at: DateTime<Utc>, last_success: Option<NaiveDate>) -> Slot {
    Slot {
        at,
        date: at.with_timezone(&cfg.timezone).date_naive(),
        last_success,
    }
}

/// Counts an attempt at `slot`, made in run `run`, before its task
/// starts (a task that kills the process still reaches `max_attempts`:
/// docs/tasks.md, "Recurring tasks"); exhausted when the slot has had them all,
/// and is given up.
pub(super) fn begin_slot(
    state: &mut Slots,
    name: &str,
    slot: &Slot,
    max_attempts: u32,
    run: RunRef,
) -> AttemptCount {
    let Some(task) = state.tasks.get_mut(name) else {
        return AttemptCount::UNCOUNTED;
    };
    if task.pending != Some(slot.at) {
        task.pending = Some(slot.at);
        task.attempts = 0;
        task.runs.clear();
    }
    let previous = task.attempts;
    let runs = task.runs.clone();
    if previous >= max_attempts {
        tracing::error!(
            task = %harness_base::text::printable(name),
            slot = %slot.at.to_rfc3339(),
            max_attempts,
            "the process was killed in every allowed attempt at this recurring slot (out of memory, a crash, or SIGKILL): the slot is given up"
        );
        task.done = Some(slot.at);
        task.pending = None;
        task.attempts = 0;
        task.runs.clear();
        return AttemptCount {
            previous,
            exhausted: true,
            runs,
        };
    }
    task.attempts += 1;
    task.runs.push(run);
    let over = task.runs.len().saturating_sub(MAX_RUNS);
    task.runs.drain(..over);
    AttemptCount {
        previous,
        exhausted: false,
        runs,
    }
}

/// Run folders kept per slot (its attempts are at most `max_attempts`,
/// but an interrupted attempt gives its count back).
const MAX_RUNS: usize = 16;

/// After a task ran for `slot` (its attempt counted): a success or a final
/// failure (a retryable one at its last attempt included) marks the slot
/// done; another retryable failure keeps it due; a run that was
/// interrupted or stopped by a setup fault gives its attempt back.
pub(crate) fn settle_slot(state: &mut Slots, name: &str, slot: &Slot, summary: &Summary) {
    let Some(task) = state.tasks.get_mut(name) else {
        return;
    };
    match (summary.status, summary.retryable) {
        (Status::Interrupted, _) => task.attempts = task.attempts.saturating_sub(1),
        (Status::Succeeded, _) | (Status::Failed, false) => {
            if summary.status == Status::Succeeded {
                task.last_success = Some(slot.date);
            }
            task.done = Some(slot.at);
            task.pending = None;
            task.attempts = 0;
            task.runs.clear();
        }
        (Status::Failed, true) => {}
    }
}

/// When a recurring task runs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextSlot {
    /// The slot at this time is due: the next run takes it.
    DueNow(DateTime<Utc>),
    /// Its next scheduled time.
    At(DateTime<Utc>),
}

/// One recurring task's next slot, or why it has none (no working
/// schedule, or one that never comes round).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upcoming {
    pub task: String,
    pub next: Result<NextSlot, String>,
}

/// When each recurring task is next due (`check`, `status`), as the slots
/// beside the inbox say.
pub fn next_slots(
    cfg: &Config,
    tasks: &[Recurring],
    now: DateTime<Utc>,
    state: &Slots,
) -> Vec<Upcoming> {
    tasks
        .iter()
        .map(|t| {
            let next = t.schedule.clone().and_then(|s| {
                let (since, done) = match state.tasks.get(&t.entry.name) {
                    Some(seen) => (seen.since, seen.done),
                    None => (added_at(&t.entry.path, now), None),
                };
                match due_slot(cfg, &s, since, done, now) {
                    Some(at) => Ok(NextSlot::DueNow(at)),
                    None => s
                        .next_after(now, &cfg.timezone)
                        .map(NextSlot::At)
                        .ok_or_else(|| "the schedule never comes round".to_string()),
                }
            });
            Upcoming {
                task: t.entry.name.clone(),
                next,
            }
        })
        .collect()
}
