//! `replay RUN_DIR` (docs/resume-replay-eval.md, "Replay"): the recorded run
//! again, with the current binary and config. Here: the run folder read (as
//! untrusted input), the task run once through the engine with the model's
//! replies and the tools' results answered from its records
//! (`records::answering`: never live, or live from `--from-turn`), and the
//! report. No endpoint and no tool service is contacted (before `--from-turn`,
//! when given), and nothing is written but the new run's records. Every request
//! the harness builds is compared with the recorded one, ignoring `seed`. The
//! batch of one runs as its [`BatchOptions`] ask, with write tools logged
//! intents unless `--live-writes`.

use std::io::Write;
use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use harness_agent::deps::{TaskDeps, system_clock};
use harness_config::Config;
use harness_drain::{BatchOptions, Slot, TaskEnd, run_tasks};
use harness_inbox::InboxEntry;
use harness_records::{Answered, Answers, Difference, GoLive, RecordedRun, Summary, read_run};

/// What `replay` was asked: the batch (its trace only with `--traces`),
/// and the run it replays.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub batch: BatchOptions,
    pub run_dir: PathBuf,
    /// Turns before this one come from the recording; from it on, the
    /// configured endpoint and tools answer.
    pub from_turn: Option<u32>,
    /// With `from_turn`, write tools change things (else they are dry-run).
    pub live_writes: bool,
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
                harness_base::text::printable(&why)
            );
            return ReplayEnd::Unreadable;
        }
    };
    let Some(name) = task_name(&recorded) else {
        let _ = writeln!(
            out,
            "agent-harness: not a readable run: {} is not in a folder named like a task",
            harness_base::text::printable(&opts.run_dir.display().to_string())
        );
        return ReplayEnd::Unreadable;
    };
    let Some(task_file) = recorded.task_file.clone() else {
        let _ = writeln!(
            out,
            "agent-harness: not a readable run: {} has no task.md (runs recorded before replay existed cannot be replayed)",
            harness_base::text::printable(&opts.run_dir.display().to_string())
        );
        return ReplayEnd::Unreadable;
    };
    let of = format!("{}/{}", recorded.summary.task, recorded.summary.run_id);
    let of = harness_base::text::printable(&of).into_owned();
    let answers = Answers::new(&recorded.attempts, &recorded.tools);
    let live = opts.from_turn.map_or(GoLive::Never, GoLive::FromTurn);
    let (deps, answered) = match replaying_harness(cfg, answers, live) {
        Ok(replaying) => replaying,
        Err(e) => {
            let _ = writeln!(out, "agent-harness: {e:#}");
            return ReplayEnd::Unreadable;
        }
    };
    let mode = opts.batch.replay(
        cfg,
        of.clone(),
        recorded.summary.started_at.date_naive(),
        recorded_slot(cfg, &recorded.summary),
        opts.live_writes,
    );
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
    let difference = answered.difference();
    report(out, &of, &recorded.summary, &new, difference.as_ref(), opts)
}

/// The run folder given, read as untrusted input (docs/untrusted-input.md):
/// a real folder, not a link to one ([`read_run`] refuses it), whose
/// records all loaded.
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
/// replay's records (docs/untrusted-input.md).
fn task_name(run: &RecordedRun) -> Option<String> {
    let folder = run.dir.parent()?.file_name()?.to_str()?.to_string();
    let recorded = &run.summary.task;
    let name = if harness_inbox::check_task_name(recorded).is_ok()
        && harness_inbox::fit_file_name("", recorded, "") == folder
    {
        recorded.clone()
    } else {
        folder
    };
    harness_inbox::check_task_name(&name).ok().map(|()| name)
}

/// The configured harness, with its endpoint and tools answering from the
/// recording until `live` says otherwise.
fn replaying_harness(
    cfg: &Config,
    answers: Answers,
    live: GoLive,
) -> anyhow::Result<(TaskDeps, Answered)> {
    let deps = TaskDeps::new(cfg, system_clock(), CancellationToken::new())?;
    Ok(answers.deps(&deps, live))
}

/// Prints what the replay found.
fn report(
    out: &mut dyn Write,
    of: &str,
    recorded: &Summary,
    new: &Summary,
    difference: Option<&Difference>,
    opts: &ReplayOptions,
) -> ReplayEnd {
    let _ = writeln!(
        out,
        "replay of {of} → {}",
        harness_base::text::printable(&format!("{}/{}", new.task, new.run_id))
    );
    if let Some(difference) = difference {
        let _ = write!(out, "{}", difference.in_full());
    } else if new.turns == 0 && recorded.turns > 0 {
        // A task that could not start (an MCP server down) sent nothing.
        let why = new.error.as_deref().unwrap_or("the task did not start");
        let _ = writeln!(
            out,
            "no request was sent: {}",
            harness_base::text::printable(why)
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
    if difference.is_none() && (same_stop || forked) {
        ReplayEnd::Matched
    } else {
        ReplayEnd::Differed
    }
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
