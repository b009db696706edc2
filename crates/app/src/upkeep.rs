//! The folders' upkeep: `requeue` (a failed task back into the inbox),
//! `rerun` (one that succeeded, to run again) and `prune` (what
//! `[retention]` lets go), and what the operator is told.

use std::io::Write;

use super::exit;
use harness_agent::deps::system_clock;
use harness_config::Config;
use harness_display::Progress;
use harness_drain::requeue::{RequeueOutcome, Source, Target, requeue, rerun};
use harness_outputs::retention::prune;
use harness_state::{Holder, RunLock};

/// `requeue NAME|RUN_ID|--all-failed`: prints each move; exit 1 when a task
/// was left in `failed/` because the inbox holds one of its name, 75 when a
/// run holds the lock, 2 when nothing in `failed/` matches. `rerun` the
/// same, from `done/`.
pub(super) fn requeue_command(
    cfg: &Config,
    target: Option<&str>,
    all_failed: bool,
    progress: &Progress,
) -> u8 {
    let target = match target {
        Some(arg) if !all_failed => Target::of(arg),
        _ => Target::AllFailed,
    };
    let now = (system_clock())();
    told(cfg, Source::Failed, requeue(cfg, &target, now), progress)
}

/// `rerun NAME|RUN_ID`: as `requeue`, from `done/`.
pub(super) fn rerun_command(cfg: &Config, target: &str, progress: &Progress) -> u8 {
    let now = (system_clock())();
    told(
        cfg,
        Source::Done,
        rerun(cfg, &Target::of(target), now),
        progress,
    )
}

/// What `requeue` or `rerun` did, told: each move on stdout, what stayed
/// on stderr; the exit code.
fn told(
    cfg: &Config,
    source: Source,
    outcome: anyhow::Result<RequeueOutcome>,
    progress: &Progress,
) -> u8 {
    match outcome {
        Ok(RequeueOutcome::Locked) => {
            progress.eprintln(&format!(
                "agent-harness: another run holds the lock {}; nothing was moved: try again when it ends",
                RunLock::path(&cfg.paths.state_dir()).display()
            ));
            exit::TEMPFAIL
        }
        Ok(RequeueOutcome::Done {
            moved,
            refused,
            shortened,
            unnamed,
            error,
        }) => {
            let mut out = progress.stdout();
            for m in &moved {
                // A reader that went away does not undo a move.
                let _ = writeln!(
                    out,
                    "{} → {}",
                    harness_base::text::printable(&m.from.display().to_string()),
                    harness_base::text::printable(&m.to.display().to_string())
                );
            }
            for path in &shortened {
                progress.eprintln(&format!(
                    "agent-harness: {}: its name was shortened to fit 255 bytes and does not hold the task's: move it into the inbox by hand, under the name its run's summary.json gives",
                    harness_base::text::printable(&path.display().to_string())
                ));
            }
            for path in &unnamed {
                progress.eprintln(&format!(
                    "agent-harness: {}: not named like a filed task (<run_id>-NAME.md); it stays where it is",
                    harness_base::text::printable(&path.display().to_string())
                ));
            }
            if let Some(e) = &error {
                progress.eprintln(&format!(
                    "agent-harness: {}",
                    harness_base::text::printable(e)
                ));
            }
            for task in &refused {
                progress.eprintln(&format!(
                    "agent-harness: {}.md is already in the inbox; task {task:?} stays in {}",
                    harness_base::text::printable(task),
                    source.dir(&cfg.paths).display()
                ));
            }
            if refused.is_empty() && shortened.is_empty() && unnamed.is_empty() && error.is_none() {
                exit::OK
            } else {
                exit::FAILED
            }
        }
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {}", lock_problem(&e)));
            exit::run_error(&e)
        }
    }
}

/// `prune [--dry-run]`: under the lock, prints each path removed (or, with
/// `--dry-run`, that would be); exit 1 when one could not be removed, 75
/// when a run holds the lock.
pub(super) fn prune_command(cfg: &Config, dry_run: bool, progress: &Progress) -> u8 {
    let state_dir = cfg.paths.state_dir();
    let _lock = match RunLock::try_acquire(&state_dir) {
        Ok(Some(lock)) => {
            lock.note(&Holder {
                pid: std::process::id(),
                command: "prune".into(),
                since: (system_clock())(),
            });
            lock
        }
        Ok(None) => {
            progress.eprintln(&format!(
                "agent-harness: another run holds the lock {}; nothing was removed",
                RunLock::path(&state_dir).display()
            ));
            return exit::TEMPFAIL;
        }
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {}", lock_problem(&e)));
            return exit::FAILED;
        }
    };
    let pruned = prune(&cfg.paths, &cfg.retention, (system_clock())(), dry_run);
    let verb = if dry_run { "would remove" } else { "removed" };
    let mut out = progress.stdout();
    for path in &pruned.removed {
        let _ = writeln!(
            out,
            "{verb} {}",
            harness_base::text::printable(&path.display().to_string())
        );
    }
    for why in &pruned.failed {
        progress.eprintln(&format!("agent-harness: {why}"));
    }
    if let Some(why) = &pruned.skipped {
        progress.eprintln(&format!("agent-harness: {why}"));
    }
    if pruned.failed.is_empty() && pruned.skipped.is_none() {
        exit::OK
    } else {
        exit::FAILED
    }
}

/// An error of `requeue` or `prune`, with what to do when it is this
/// user's permission that failed (the folders are the service user's).
fn lock_problem(e: &anyhow::Error) -> String {
    let denied = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
    });
    if denied {
        format!(
            "{e:#}; run it as the user that owns the folders (sudo -u <that user> agent-harness …)"
        )
    } else {
        format!("{e:#}")
    }
}
