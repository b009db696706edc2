//! Retention (SPEC §17): run folders and `done/` files past
//! `[retention] keep_days`, by the time in their run id, removed — but the
//! newest `keep_runs` run folders of each task. `failed/` is never touched,
//! nor anything that is not named like a run.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use crate::config::Retention;
use crate::inbox;
use crate::records::{run_order, run_time};

/// What pruning removed (or, in a dry run, would remove).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    pub removed: Vec<PathBuf>,
    /// Paths that could not be removed, with why.
    pub failed: Vec<String>,
}

/// A run folder or a `done/` file, with its start time.
struct Dated {
    path: PathBuf,
    run_id: String,
    started: DateTime<Utc>,
}

/// Prunes `logs` (each `logs/<task>/<run_id>/`, `logs/eval/<run_id>/`
/// alike) and `done` as `retention` says, at `now`. Links are never
/// followed nor removed; a folder is removed whole, without following any
/// link inside it.
pub fn prune(
    logs: &Path,
    done: &Path,
    retention: &Retention,
    now: DateTime<Utc>,
    dry_run: bool,
) -> Pruned {
    let mut pruned = Pruned::default();
    if retention.keep_days == 0 {
        return pruned;
    }
    let cutoff = now - chrono::Duration::days(i64::from(retention.keep_days));
    let keep_runs = usize::try_from(retention.keep_runs).unwrap_or(usize::MAX);
    for task_dir in real_folders(logs) {
        let mut runs: Vec<Dated> = real_folders(&task_dir)
            .into_iter()
            .filter_map(|path| {
                let name = path.file_name()?.to_str()?.to_string();
                let started = run_time(&name)?;
                Some(Dated {
                    path,
                    run_id: name,
                    started,
                })
            })
            .collect();
        runs.sort_by(|a, b| run_order(&b.run_id).cmp(&run_order(&a.run_id)));
        for run in runs.into_iter().skip(keep_runs) {
            if run.started < cutoff {
                remove(&run.path, true, dry_run, &mut pruned);
            }
        }
    }
    for (path, started) in done_files(done) {
        if started < cutoff {
            remove(&path, false, dry_run, &mut pruned);
        }
    }
    pruned
}

/// The folders directly in `dir` that are folders, not links to one.
fn real_folders(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut folders: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    folders.sort();
    folders
}

/// Each `done/` file named `<run_id>-<name>.md`, with its run's start time.
fn done_files(done: &Path) -> Vec<(PathBuf, DateTime<Utc>)> {
    let Ok(entries) = std::fs::read_dir(done) else {
        return Vec::new();
    };
    let mut files: Vec<(PathBuf, DateTime<Utc>)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let (run_id, _) = inbox::filed_readings(&name).pop()?;
            Some((e.path(), run_time(&run_id)?))
        })
        .collect();
    files.sort();
    files
}

fn remove(path: &Path, folder: bool, dry_run: bool, pruned: &mut Pruned) {
    let result = match (dry_run, folder) {
        (true, _) => Ok(()),
        (false, true) => std::fs::remove_dir_all(path),
        (false, false) => std::fs::remove_file(path),
    };
    match result {
        Ok(()) => pruned.removed.push(path.to_path_buf()),
        Err(e) => pruned.failed.push(format!("{}: {e}", path.display())),
    }
}
