//! `status` (docs/operating.md, "The morning after"): one look at the whole
//! setup, from the state beside the inbox and the records, with no network
//! and no secret — whether a run holds the lock now (since when, which of its
//! tasks are running), the inbox and `failed/`, how the last run ended, the
//! day's spend against the `[budget]` limits, each recurring task's next slot,
//! and whether notifications and traces get through. It stays fast over a
//! year of records: no summary is read; only while a run is going are the
//! logs' folders listed, for the run folders it has open. What cannot be read
//! is said in `problems`, never taken for "nothing".

use std::os::unix::fs::MetadataExt;

use chrono::{DateTime, Utc};

use super::recurring::{self, NextSlot};
use super::requeue::{self, Source};
use harness_config::Config;
use harness_inbox as inbox;
use harness_outputs::status::{
    FailedTasks, NextRun, OldestTask, Overview, Running, RunningTask, Sending, Waiting,
};
use harness_records::unfinished_since;
use harness_state::{Channel, Deliveries, Holder, LastRun, LockState, RunLock, Slots, SpendToday};

/// The setup as it is at `now`.
pub fn overview(cfg: &Config, now: DateTime<Utc>) -> Overview {
    let state_dir = cfg.paths.state_dir();
    let mut problems = Vec::new();
    let mut did_not_end = None;
    let running = match RunLock::state(&state_dir) {
        LockState::Free => None,
        LockState::Held { pid, holder } => Some(running(cfg, pid, holder, now)),
        LockState::Abandoned(holder) => {
            did_not_end = Some(holder);
            None
        }
        LockState::Unknown(why) => {
            problems.push(format!("the run lock: {why}"));
            None
        }
    };
    let last_run = LastRun::load(&state_dir).unwrap_or_else(|why| {
        problems.push(format!("the last run: {why}"));
        None
    });
    let deliveries = Deliveries::load(&state_dir).unwrap_or_else(|why| {
        problems.push(format!("notifications and traces: {why}"));
        Deliveries::default()
    });
    let notify = &cfg.notify;
    Overview {
        now,
        running,
        did_not_end,
        inbox: waiting(cfg, &mut problems),
        failed: failed(cfg, &mut problems),
        last_run,
        budget: spent(cfg, now, &mut problems),
        recurring: next_runs(cfg, now),
        notify: Sending {
            configured: notify.ping_url.is_some()
                || notify.on_failure_url.is_some()
                || (cfg.mail.is_some() && !notify.digest_to.is_empty()),
            record: deliveries.of(Channel::Notify).cloned(),
        },
        traces: Sending {
            configured: cfg.traces.is_some(),
            record: deliveries.of(Channel::Traces).cloned(),
        },
        problems,
    }
}

/// The holder of the lock and, when it runs tasks and noted since when,
/// the run folders it has open.
fn running(cfg: &Config, pid: u32, holder: Option<Holder>, now: DateTime<Utc>) -> Running {
    let tasks = match &holder {
        Some(h) if h.runs_tasks() => unfinished_since(&cfg.paths.logs, h.since, now)
            .into_iter()
            .map(|u| RunningTask {
                task: u.task_dir,
                run_id: u.run_dir,
            })
            .collect(),
        _ => Vec::new(),
    };
    Running {
        pid,
        command: holder.as_ref().map(|h| h.command.clone()),
        since: holder.map(|h| h.since),
        tasks,
    }
}

fn waiting(cfg: &Config, problems: &mut Vec<String>) -> Waiting {
    let (read, listed) = match inbox::listing(&cfg.paths.inbox) {
        Ok(listed) => (true, listed),
        Err(e) => {
            problems.push(format!("[paths] inbox: {e:#}"));
            (false, inbox::Entries::default())
        }
    };
    let entries = listed.tasks;
    let arrived = |path: &std::path::Path| -> Option<DateTime<Utc>> {
        let m = std::fs::symlink_metadata(path).ok()?;
        DateTime::from_timestamp(m.ctime(), u32::try_from(m.ctime_nsec()).ok()?)
    };
    let oldest = entries
        .iter()
        .map(|e| (arrived(&e.path), e))
        // A file whose time cannot be read is not the oldest.
        .min_by_key(|(at, e)| (at.is_none(), *at, e.name.clone()))
        .map(|(at, e)| OldestTask {
            task: e.name.clone(),
            since: at,
        });
    Waiting {
        read,
        count: entries.len(),
        oldest,
        never_run: listed.strays.len(),
    }
}

/// `failed/`'s files named as filed tasks (`<run_id>-NAME.md`), read as
/// `requeue` reads them; others are not counted. Nothing is followed.
fn failed(cfg: &Config, problems: &mut Vec<String>) -> FailedTasks {
    let (read, filed) = match requeue::filed_tasks(&cfg.paths, Source::Failed) {
        Ok(filed) => (true, filed),
        Err(e) => {
            problems.push(format!("[paths] failed: {e:#}"));
            (false, Vec::new())
        }
    };
    let newest = filed
        .iter()
        .max_by(|a, b| {
            harness_records::run_order(&a.run_id)
                .cmp(&harness_records::run_order(&b.run_id))
                .then(b.task.cmp(&a.task))
        })
        .map(|f| RunningTask {
            task: f.task.clone(),
            run_id: f.run_id.clone(),
        });
    FailedTasks {
        read,
        count: filed.len(),
        newest,
    }
}

/// Today's spend as the ledger beside the inbox says, when a limit is set.
fn spent(cfg: &Config, now: DateTime<Utc>, problems: &mut Vec<String>) -> Option<SpendToday> {
    if !cfg.budget.any() {
        return None;
    }
    let state_dir = cfg.paths.state_dir();
    let (spent, why) = SpendToday::in_ledger(&state_dir, cfg.budget, now, &cfg.timezone);
    problems.extend(why.map(|why| format!("the budget ledger: {why}")));
    Some(spent)
}

fn next_runs(cfg: &Config, now: DateTime<Utc>) -> Vec<NextRun> {
    let Some(tasks) = recurring::list(cfg) else {
        return Vec::new();
    };
    let state = Slots::load(&cfg.paths.state_dir());
    recurring::next_slots(cfg, &tasks, now, &state)
        .into_iter()
        .map(|u| {
            let (due_now, at, problem) = match u.next {
                Ok(NextSlot::DueNow(at)) => (true, Some(at), None),
                Ok(NextSlot::At(at)) => (false, Some(at), None),
                Err(why) => (false, None, Some(why)),
            };
            NextRun {
                task: u.task,
                due_now,
                at,
                problem,
            }
        })
        .collect()
}
