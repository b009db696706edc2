//! What `status` shows (docs/operating.md, "The morning after"): the
//! setup at one moment as a value ([`Overview`], which `drain::overview`
//! finds and `status --json` writes) and as lines of `label  text`. Times
//! are in the zone given; every name a file or a record gives is escaped.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::runs::when;
use harness_base::text::{printable, shell_operand};
use harness_base::zone::Zone;
use harness_state::{Delivery, Holder, LastRun, SpendToday};

/// Where a line's text starts, after its label.
const LABEL: usize = 12;

/// The whole setup at one moment, as `status` prints it (and `--json` writes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub now: DateTime<Utc>,
    /// A process holding the run lock now; `None`: no run is going.
    pub running: Option<Running>,
    /// No run is going, but the last holder of the lock ended without
    /// letting go of it (killed): who it was and since when.
    pub did_not_end: Option<Holder>,
    pub inbox: Waiting,
    pub failed: FailedTasks,
    /// How the last `run` or `run-task` ended; `None` when none is recorded.
    pub last_run: Option<LastRun>,
    /// The day's spend against the limits; `None` when `[budget]` sets none.
    pub budget: Option<SpendToday>,
    pub recurring: Vec<NextRun>,
    pub notify: Sending,
    pub traces: Sending,
    /// What could not be read, one line each.
    pub problems: Vec<String>,
}

/// The process holding the lock, and what its note says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Running {
    pub pid: u32,
    /// Its command (`run`, `run-task`, `requeue`, `rerun`, `prune`) and
    /// since when; `None` when it wrote no note of its own (not yet, or
    /// it could not).
    pub command: Option<String>,
    pub since: Option<DateTime<Utc>>,
    /// The tasks it is running: its run folders without a summary yet.
    pub tasks: Vec<RunningTask>,
}

/// A task a run going now is running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningTask {
    pub task: String,
    pub run_id: String,
}

/// The inbox: its tasks, the one waiting longest (by when its file arrived),
/// and the entries there that will never run (`check` names them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    /// The inbox could be listed (else why is among the problems).
    pub read: bool,
    pub count: usize,
    pub oldest: Option<OldestTask>,
    pub never_run: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OldestTask {
    pub task: String,
    /// When its file arrived: its last status change (ctime), which a
    /// move, a copy or a write into the inbox sets — a move or `cp -p`
    /// keeps an old mtime.
    pub since: Option<DateTime<Utc>>,
}

/// `failed/`: its filed tasks, and the newest (by its run id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedTasks {
    /// `failed/` could be listed (else why is among the problems, and the
    /// count is no count).
    pub read: bool,
    pub count: usize,
    pub newest: Option<RunningTask>,
}

/// A recurring task's next slot, or why it has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextRun {
    pub task: String,
    /// The slot is due now: the next run takes it.
    pub due_now: bool,
    /// The slot's time (due now) or the next scheduled time.
    pub at: Option<DateTime<Utc>>,
    /// Why it has no slot (no working schedule, one that never comes round).
    pub problem: Option<String>,
}

/// A channel a run sends on: whether the config sets it, and how its
/// sending has gone (the record beside the inbox; `None` before it sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sending {
    pub configured: bool,
    pub record: Option<Delivery>,
}

/// The overview as lines of `label  text`.
pub fn text(seen: &Overview, zone: &Zone) -> String {
    let mut lines: Vec<(&str, Vec<String>)> = vec![
        (
            "running",
            running(seen.running.as_ref(), seen.did_not_end.as_ref(), zone),
        ),
        ("inbox", vec![inbox(&seen.inbox, zone)]),
        ("failed/", vec![failed(&seen.failed)]),
        ("last run", last_run(seen.last_run.as_ref(), zone)),
        ("budget", vec![spend(seen.budget.as_ref())]),
        ("recurring", recurring(&seen.recurring, zone)),
    ];
    lines.push(("notify", vec![sending(&seen.notify, "[notify]", zone)]));
    lines.push(("traces", vec![sending(&seen.traces, "[traces]", zone)]));
    let mut text = String::new();
    for (label, parts) in lines {
        for (n, part) in parts.iter().enumerate() {
            let label = if n == 0 { label } else { "" };
            text.push_str(&format!("{label:LABEL$}{part}\n"));
        }
    }
    text
}

fn running(running: Option<&Running>, did_not_end: Option<&Holder>, zone: &Zone) -> Vec<String> {
    let Some(r) = running else {
        return vec![match did_not_end {
            None => "no run holds the lock".into(),
            // Its note was never emptied: it ended without letting go.
            Some(h) => format!(
                "none; the {} started at {} (pid {}) did not end: killed (SIGKILL, out of memory, the machine stopped)?{} The journal says more (journalctl -u agent-harness)",
                printable(&h.command),
                when(h.since, zone),
                h.pid,
                if h.runs_tasks() {
                    " Its tasks stay in the inbox for the next run."
                } else {
                    ""
                }
            ),
        }];
    };
    let who = match (&r.command, r.since) {
        (Some(command), Some(since)) => format!(
            "{} since {} (pid {})",
            printable(command),
            when(since, zone),
            r.pid
        ),
        _ => format!(
            "process {} holds the lock (it did not say what or since when)",
            r.pid
        ),
    };
    let tasks: Vec<String> = r
        .tasks
        .iter()
        .map(|t| format!("{} ({})", printable(&t.task), printable(&t.run_id)))
        .collect();
    match tasks.is_empty() {
        true => vec![who],
        false => vec![format!("{who}: {}", tasks.join(", "))],
    }
}

fn inbox(waiting: &Waiting, zone: &Zone) -> String {
    let tasks = match &waiting.oldest {
        None if !waiting.read => "not read (see the line on stderr)".into(),
        None => "empty".into(),
        Some(oldest) => format!(
            "{} task(s); the oldest, {}, waiting since {}",
            waiting.count,
            printable(&oldest.task),
            oldest
                .since
                .map_or_else(|| "a time unknown".into(), |t| when(t, zone))
        ),
    };
    match waiting.never_run {
        0 => tasks,
        n => {
            format!("{tasks}; {n} entry(ies) that will never run (agent-harness check names them)")
        }
    }
}

fn failed(failed: &FailedTasks) -> String {
    match &failed.newest {
        None if !failed.read => "not read (see the line on stderr)".into(),
        None => "empty".into(),
        Some(newest) => format!(
            "{} task(s); the newest {} (run {}): agent-harness show {}",
            failed.count,
            printable(&newest.task),
            printable(&newest.run_id),
            printable(&shell_operand(&format!(
                "{}/{}",
                newest.task, newest.run_id
            )))
        ),
    }
}

fn last_run(last: Option<&LastRun>, zone: &Zone) -> Vec<String> {
    let Some(r) = last else {
        return vec!["none recorded beside the inbox".into()];
    };
    let left = r.retry_later + r.interrupted + r.not_started;
    let took = (r.finished - r.started).num_milliseconds().max(0) as f64 / 1000.0;
    let mut lines = vec![format!(
        "{}, started {}, {took:.1} s, exit {}: {} succeeded, {} failed, {left} left in the inbox",
        printable(&r.command),
        when(r.started, zone),
        r.exit_code,
        r.succeeded,
        r.failed
    )];
    if let Some(note) = &r.note {
        lines.push(printable(note).into_owned());
    }
    lines
}

fn spend(spent: Option<&SpendToday>) -> String {
    let Some(s) = spent else {
        return "no [budget] limits".into();
    };
    let mut parts = Vec::new();
    if let Some(limit) = s.tokens_per_day {
        parts.push(format!("{} of {limit} tokens", s.tokens));
    }
    if let Some(limit) = s.gpu_seconds_per_day {
        parts.push(format!("{:.1} of {limit} GPU-seconds", s.gpu_seconds));
    }
    let mut line = match parts.is_empty() {
        true => format!("{}: no daily limit", s.day),
        false => format!("{}: {}", s.day, parts.join(", ")),
    };
    if let Some(limit) = s.tokens_per_run {
        line.push_str(&format!("; at most {limit} tokens a run"));
    }
    line
}

fn recurring(tasks: &[NextRun], zone: &Zone) -> Vec<String> {
    if tasks.is_empty() {
        return vec!["none".into()];
    }
    tasks
        .iter()
        .map(|t| {
            let name = printable(&t.task);
            match (&t.problem, t.at) {
                (Some(why), _) => format!("{name}: no slot: {}", printable(why)),
                (None, Some(at)) if t.due_now => {
                    format!(
                        "{name}: due now (slot {}): the next run takes it",
                        when(at, zone)
                    )
                }
                (None, Some(at)) => format!("{name}: next {}", when(at, zone)),
                (None, None) => format!("{name}: no slot"),
            }
        })
        .collect()
}

fn sending(channel: &Sending, key: &str, zone: &Zone) -> String {
    let configured = if channel.configured {
        ""
    } else {
        " (not set in the config now)"
    };
    match &channel.record {
        None if channel.configured => "nothing sent yet".into(),
        None => format!("{key} is not set"),
        Some(d) if d.failures == 0 => format!(
            "ok: the last went out {}{configured}",
            d.last_success
                .map_or_else(|| "at a time unknown".into(), |t| when(t, zone))
        ),
        Some(d) => {
            let since = match d.last_success {
                Some(t) => format!("since the last success, {}", when(t, zone)),
                None => "and none got through yet".into(),
            };
            let last = d
                .last_failure
                .map_or_else(String::new, |t| format!("; the last at {}", when(t, zone)));
            let error = d
                .last_error
                .as_deref()
                .map_or_else(String::new, |e| format!(": {}", printable(e)));
            format!("{} failure(s) {since}{last}{error}{configured}", d.failures)
        }
    }
}

#[cfg(test)]
mod tests;
