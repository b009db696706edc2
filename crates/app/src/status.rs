//! `status [--json] [--utc]` (docs/operating.md, "The morning after"): the
//! setup on one screen, as `drain::overview` finds it, with no network and
//! no secret: a run going now, the inbox, `failed/`, the last run, today's
//! spend, the recurring slots, notifications and traces. Times are in
//! `[schedule] timezone` (`--utc`: UTC; the JSON's are UTC); every name a
//! file or a record gives is printed escaped. What could not be read is said
//! on stderr, and the exit code is 1.

use std::io::Write;

use super::exit;
use super::logs::zone_of;
use harness_agent::deps::system_clock;
use harness_base::text::{printable, printable_json, shell_operand};
use harness_base::zone::Zone;
use harness_config::Config;
use harness_display::Progress;
use harness_drain::{FailedTasks, NextRun, Overview, Running, Sending, Waiting, overview};
use harness_outputs::runs::when;
use harness_state::{Holder, LastRun, SpendToday};

/// Where a line's text starts, after its label.
const LABEL: usize = 12;

/// `status`: prints the overview; exit 0, or 1 when something could not be read.
pub(super) fn status_command(cfg: &Config, json: bool, utc: bool, progress: &Progress) -> u8 {
    let seen = overview(cfg, (system_clock())());
    let mut out = progress.stdout();
    let written = if json {
        serde_json::to_string_pretty(&seen)
            .map_err(std::io::Error::other)
            .and_then(|s| writeln!(out, "{}", printable_json(&s)))
    } else {
        write!(out, "{}", text(&seen, &zone_of(cfg, utc)))
    }
    .and_then(|()| out.flush());
    for problem in &seen.problems {
        progress.eprintln(&format!(
            "agent-harness: status: cannot read {}",
            printable(problem)
        ));
    }
    match written {
        Ok(()) | Err(_) if !seen.problems.is_empty() => exit::FAILED,
        Ok(()) => exit::OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e}"));
            exit::FAILED
        }
    }
}

/// The overview as lines of `label  text`.
fn text(seen: &Overview, zone: &Zone) -> String {
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
