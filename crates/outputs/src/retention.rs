//! Retention (docs/operating.md, "Retention"): run folders and `done/` files
//! past `[retention] keep_days`, by the time in their run id, removed — but the
//! newest `keep_runs` run folders of each task. `failed/` is never touched, nor
//! anything that is not named like a run.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use harness_base::folder::{EntryKind, Folder};
use harness_config::Retention;
use harness_inbox as inbox;
use harness_records::{ahead_of_clock, run_order, run_time};

/// What pruning removed (or, in a dry run, would remove).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    pub removed: Vec<PathBuf>,
    /// Paths that could not be removed, with why.
    pub failed: Vec<String>,
    /// Why nothing was removed at all (a clock behind the records).
    pub skipped: Option<String>,
}

/// A run folder or a `done/` file, with its start time.
struct Dated {
    /// The task folder it is in (`None`: a `done/` file).
    task: Option<String>,
    name: String,
    started: DateTime<Utc>,
}

/// Prunes `logs` (each `logs/<task>/<run_id>/`, `logs/eval/<run_id>/`
/// alike) and `done` as `retention` says, at `now`. Below `logs` nothing
/// is followed: each folder is opened, and removed through the opened
/// parent, whatever is renamed meanwhile. `done` is left alone when it is
/// the `failed` folder or the inbox. When a run id lies ahead of `now`,
/// the clock is wrong, and nothing is removed.
pub fn prune(
    paths: &harness_config::Paths,
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
    let root = match Folder::open_root(&paths.logs) {
        Ok(root) => Some(root),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            pruned
                .failed
                .push(unopened("[paths] logs", &paths.logs, &e));
            None
        }
    };
    let mut old = Vec::new();
    let mut newest: Option<DateTime<Utc>> = None;
    for (task, mut runs) in root.as_ref().map(task_runs).unwrap_or_default() {
        runs.sort_by(|a, b| run_order(&b.name).cmp(&run_order(&a.name)));
        newest = newest.max(runs.first().map(|r| r.started));
        old.extend(
            runs.into_iter()
                .skip(keep_runs)
                .filter(|r| r.started < cutoff)
                .map(|r| Dated {
                    task: Some(task.clone()),
                    ..r
                }),
        );
    }
    let separate = [&paths.failed, &paths.inbox]
        .iter()
        .all(|other| !same_folder(&paths.done, other));
    let done_folder = match separate.then(|| harness_state::task_folder(paths, &paths.done)) {
        Some(Ok(folder)) => Some(folder),
        Some(Err(e)) if e.kind() != std::io::ErrorKind::NotFound => {
            pruned
                .failed
                .push(unopened("[paths] done", &paths.done, &e));
            None
        }
        _ => None,
    };
    let done = done_folder.as_ref().map(done_files).unwrap_or_default();
    for d in done {
        newest = newest.max(Some(d.started));
        if d.started < cutoff {
            old.push(d);
        }
    }
    // A clock that went back would otherwise make every record look old.
    if let Some(t) = newest.filter(|t| ahead_of_clock(*t, now)) {
        pruned.skipped = Some(format!(
            "a run id ({}) lies ahead of the clock ({}): the clock is not trusted to prune, nothing was removed",
            t.to_rfc3339(),
            now.to_rfc3339()
        ));
        return pruned;
    }
    for d in old {
        remove(
            paths,
            root.as_ref(),
            done_folder.as_ref(),
            &d,
            dry_run,
            &mut pruned,
        );
    }
    pruned
}

/// Each real task folder under `logs` with its run folders (named by a
/// run id); links are neither listed nor followed.
fn task_runs(root: &Folder) -> Vec<(String, Vec<Dated>)> {
    let mut tasks: Vec<(String, Vec<Dated>)> = Vec::new();
    for (task, is_folder) in root.folders_and_links().unwrap_or_default() {
        let Some(folder) = is_folder.then(|| root.sub(&task).ok()).flatten() else {
            continue;
        };
        let runs = folder
            .folders_and_links()
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, is_folder)| *is_folder)
            .filter_map(|(name, _)| {
                Some(Dated {
                    task: None,
                    started: run_time(&name)?,
                    name,
                })
            })
            .collect();
        tasks.push((task, runs));
    }
    tasks.sort_by(|a, b| a.0.cmp(&b.0));
    tasks
}

/// Each `done/` file named `<run_id>-<name>.md`, with its run's start
/// time; nothing in it is followed.
fn done_files(done: &Folder) -> Vec<Dated> {
    let mut files: Vec<Dated> = done
        .entries()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.kind != EntryKind::Folder)
        .filter_map(|e| {
            let name = e.name.into_string().ok()?;
            let (run_id, _) = inbox::filed_readings(&name).pop()?;
            Some(Dated {
                task: None,
                started: run_time(&run_id)?,
                name,
            })
        })
        .collect();
    files.sort_by(|a, b| a.name.cmp(&b.name));
    files
}

/// Why a folder retention walks could not be opened, naming its key.
fn unopened(key: &str, path: &Path, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => format!(
            "{key}: {} cannot be read by this user (permission denied); run it as the user that owns it",
            path.display()
        ),
        _ => format!("{key}: {}: {e}", path.display()),
    }
}

fn same_folder(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn remove(
    paths: &harness_config::Paths,
    logs: Option<&Folder>,
    done: Option<&Folder>,
    d: &Dated,
    dry_run: bool,
    pruned: &mut Pruned,
) {
    let (path, result) = match (&d.task, logs, done) {
        (Some(task), Some(logs), _) => (
            paths.logs.join(task).join(&d.name),
            if dry_run {
                Ok(())
            } else {
                logs.sub(task).and_then(|t| t.remove_tree(&d.name))
            },
        ),
        (None, _, Some(done)) => (
            paths.done.join(&d.name),
            if dry_run {
                Ok(())
            } else {
                done.remove_file(d.name.as_ref())
            },
        ),
        _ => return,
    };
    match result {
        Ok(()) => pruned.removed.push(path),
        Err(e) => pruned
            .failed
            .push(format!("cannot remove {}: {e}", path.display())),
    }
}
