//! `replay RUN_DIR` (SPEC §13): the recorded run again, with the current
//! binary and config, the model's replies taken from `conversation.jsonl`
//! and the tools' results from `tools.jsonl`. No endpoint and no tool
//! service is contacted (before `--from-turn`, when given), and nothing is
//! written but the new run's records. Every request the harness builds is
//! compared with the recorded one, ignoring `seed`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::deps::{TaskDeps, system_clock};
use crate::config::Config;
use crate::drain::{Mode, Slot, TaskEnd, run_tasks};
use crate::endpoint::recorded::{Mismatch, Recording};
use crate::inbox::InboxEntry;
use crate::records::{
    RecordedRun, Summary, read_run, recorded_attempt, recorded_counts, recorded_results,
    recorded_window,
};
use crate::tools::RecordedResults;

/// The most lines of diff printed; the rest are counted.
const MAX_DIFF_LINES: usize = 200;
/// Each printed line of diff is cut to this many characters.
const MAX_DIFF_LINE_CHARS: usize = 1000;

/// What `replay` was asked.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub run_dir: PathBuf,
    /// Turns before this one come from the recording; from it on, the
    /// configured endpoint and tools answer.
    pub from_turn: Option<u32>,
    /// With `from_turn`, write tools change things (else they are dry-run).
    pub live_writes: bool,
    /// `--traces`: the replayed task's trace goes to `[traces] endpoint`.
    pub traces: Option<crate::traces::Traces>,
}

/// How a replay ended; the app gives each its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayEnd {
    /// Every request matched, and the run stopped for the recorded reason
    /// (or, forked with `--from-turn`, the replayed turns matched).
    Matched,
    /// A request or the stop reason differed.
    Differed,
    /// RUN_DIR is not a readable run.
    Unreadable,
    /// The replayed task's records could not be written.
    NotRecorded,
}

/// Replays a run and reports what it found on `out`.
pub async fn replay(cfg: &Config, opts: &ReplayOptions, out: &mut dyn Write) -> ReplayEnd {
    let recorded = match read_recorded(&opts.run_dir) {
        Ok(r) => r,
        Err(why) => {
            let _ = writeln!(
                out,
                "agent-harness: not a readable run: {}",
                crate::base::text::printable(&why)
            );
            return ReplayEnd::Unreadable;
        }
    };
    let Some(name) = task_name(&recorded) else {
        let _ = writeln!(
            out,
            "agent-harness: not a readable run: {} is not in a folder named like a task",
            crate::base::text::printable(&opts.run_dir.display().to_string())
        );
        return ReplayEnd::Unreadable;
    };
    let Some(task_file) = recorded.task_file.clone() else {
        let _ = writeln!(
            out,
            "agent-harness: not a readable run: {} has no task.md (runs recorded before replay existed cannot be replayed)",
            crate::base::text::printable(&opts.run_dir.display().to_string())
        );
        return ReplayEnd::Unreadable;
    };
    let of = format!("{}/{}", recorded.summary.task, recorded.summary.run_id);
    let of = crate::base::text::printable(&of).into_owned();
    let recording = Recording::new(
        recorded.attempts.iter().map(recorded_attempt).collect(),
        recorded_counts(&recorded.attempts),
        opts.from_turn,
        recorded_window(&recorded.attempts),
    );
    let deps = match replaying_harness(cfg, &recorded, recording.clone(), opts.from_turn) {
        Ok(deps) => deps,
        Err(e) => {
            let _ = writeln!(out, "agent-harness: {e:#}");
            return ReplayEnd::Unreadable;
        }
    };
    let mode = Mode {
        dry_run: !opts.live_writes,
        replay_of: Some(of.clone()),
        today: Some(recorded.summary.started_at.date_naive()),
        slot: recorded_slot(cfg, &recorded.summary),
        traces: opts.traces.clone(),
        ..Mode::new(cfg, crate::display::Progress::hidden())
    };
    let entry = InboxEntry {
        name,
        path: task_file,
    };
    let ends = run_tasks(cfg, &deps, vec![entry], &mode, 1).await;
    deps.shutdown().await;
    let Some(TaskEnd::Filed(new)) = ends.into_iter().next() else {
        let _ = writeln!(
            out,
            "replay of {of}: the replayed task could not be recorded"
        );
        return ReplayEnd::NotRecorded;
    };
    let mismatches = std::mem::take(&mut crate::base::sync::lock(&recording).mismatches);
    report(out, &of, &recorded.summary, &new, &mismatches, opts)
}

/// The run folder given, read as untrusted input (SPEC §21): a real
/// folder, not a link to one ([`read_run`] refuses it), whose records all
/// loaded.
fn read_recorded(dir: &std::path::Path) -> Result<RecordedRun, String> {
    let run = read_run(dir)?;
    match run.not_loaded.first() {
        Some(why) => Err(format!("{}: {why}", dir.display())),
        None => Ok(run),
    }
}

/// The name the replayed task runs under: the recorded one when it is a
/// task name and the folder it was found in was made from it, else the
/// name of that folder. A summary's `"task": "../../X"` never places the
/// replay's records (SPEC §21).
fn task_name(run: &RecordedRun) -> Option<String> {
    let folder = run.dir.parent()?.file_name()?.to_str()?.to_string();
    let recorded = &run.summary.task;
    let name = if crate::inbox::check_task_name(recorded).is_ok()
        && crate::inbox::fit_file_name("", recorded, "") == folder
    {
        recorded.clone()
    } else {
        folder
    };
    crate::inbox::check_task_name(&name).ok().map(|()| name)
}

/// The configured harness, with its endpoint and tools answering from the recording.
fn replaying_harness(
    cfg: &Config,
    run: &RecordedRun,
    recording: Arc<std::sync::Mutex<Recording>>,
    from_turn: Option<u32>,
) -> anyhow::Result<TaskDeps> {
    let deps = TaskDeps::new(cfg, system_clock(), CancellationToken::new())?;
    let results = RecordedResults {
        results: recorded_results(&run.tools),
        live_from_turn: from_turn,
        missing_run_live: false,
    };
    Ok(deps.answering_from(recording, results))
}

/// Prints what the replay found.
fn report(
    out: &mut dyn Write,
    of: &str,
    recorded: &Summary,
    new: &Summary,
    mismatches: &[Mismatch],
    opts: &ReplayOptions,
) -> ReplayEnd {
    let _ = writeln!(
        out,
        "replay of {of} → {}",
        crate::base::text::printable(&format!("{}/{}", new.task, new.run_id))
    );
    if let Some(first) = mismatches.first() {
        let _ = writeln!(
            out,
            "turn {}: the request differs from the recorded one{}",
            first.turn,
            if mismatches.len() > 1 {
                format!(
                    " ({} difference(s) in all; the first is shown)",
                    mismatches.len()
                )
            } else {
                String::new()
            }
        );
        let _ = write!(out, "{}", describe(first));
    } else if new.turns == 0 && recorded.turns > 0 {
        // A task that could not start (an MCP server down) sent nothing.
        let why = new.error.as_deref().unwrap_or("the task did not start");
        let _ = writeln!(
            out,
            "no request was sent: {}",
            crate::base::text::printable(why)
        );
    } else {
        let _ = writeln!(out, "every request matched the recording");
    }
    let same_stop = new.stop_reason == recorded.stop_reason;
    let _ = writeln!(
        out,
        "stop reason: recorded {}, replayed {}{}",
        recorded.stop_reason.as_str(),
        new.stop_reason.as_str(),
        if same_stop { "" } else { " (different)" }
    );
    let forked = opts.from_turn.is_some();
    if mismatches.is_empty() && (same_stop || forked) {
        ReplayEnd::Matched
    } else {
        ReplayEnd::Differed
    }
}

/// A mismatch in words: a unified diff of the two pretty-printed bodies.
fn describe(m: &Mismatch) -> String {
    match (&m.recorded, &m.sent) {
        (Some(recorded), Some(sent)) => {
            let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default() + "\n";
            let (a, b) = (pretty(recorded), pretty(sent));
            // Myers' diff is quadratic on crafted input: past the deadline
            // it settles for a coarser (still correct) diff.
            let diff = similar::TextDiff::configure()
                .timeout(Duration::from_secs(2))
                .diff_lines(&a, &b)
                .unified_diff()
                .context_radius(3)
                .header("recorded", "replayed")
                .to_string();
            capped(&diff, MAX_DIFF_LINES)
        }
        _ => format!("{}\n", crate::base::text::printable(&m.note)),
    }
}

/// The first `max` lines of `text`, each fit for a terminal, and a line
/// saying how many were left out.
fn capped(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut left_out = 0usize;
    for (i, line) in text.lines().enumerate() {
        if i < max {
            // A line of a recorded body can be megabytes long.
            out.push_str(&crate::base::text::printable(&crate::base::text::clip(
                line,
                MAX_DIFF_LINE_CHARS,
            )));
            out.push('\n');
        } else {
            left_out += 1;
        }
    }
    if left_out > 0 {
        out.push_str(&format!(
            "… {left_out} more line(s) of diff left out (the first {max} are shown)\n"
        ));
    }
    out
}

/// A recurring run's slot, as its summary recorded it: the same body again.
fn recorded_slot(cfg: &Config, s: &Summary) -> Option<Slot> {
    if !s.recurring {
        return None;
    }
    let at = s
        .slot
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or(s.started_at, |t| t.with_timezone(&chrono::Utc));
    Some(Slot {
        at,
        date: at.with_timezone(&cfg.timezone).date_naive(),
        last_success: s.last_success,
    })
}
