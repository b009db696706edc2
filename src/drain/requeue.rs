//! `requeue` (SPEC §17): a failed task back into the inbox, under the run
//! lock, its attempt count reset, never over a task already there.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::lock::RunLock;
use super::{UsageError, folders};
use crate::config::Config;
use crate::inbox::{self, Attempts};
use crate::records::{run_order, run_time};

/// Which failed tasks go back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The newest failed file of this task.
    Name(String),
    /// Every failed file of the run that started at this run id.
    RunId(String),
    /// The newest failed file of every task.
    AllFailed,
}

impl Target {
    /// `requeue ARG`: a run id (`YYYYMMDDTHHMMSSZ`, perhaps `-N`) or a task name.
    pub fn of(arg: &str) -> Target {
        if run_time(arg).is_some() {
            Target::RunId(arg.to_string())
        } else {
            Target::Name(arg.to_string())
        }
    }
}

/// One file moved back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub task: String,
    pub from: PathBuf,
    pub to: PathBuf,
}

/// What `requeue` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequeueOutcome {
    /// A run holds the lock: nothing moved.
    Locked,
    Done {
        moved: Vec<Move>,
        /// Tasks left in `failed/` because the inbox holds one of that name.
        refused: Vec<String>,
        /// Files whose name was shortened to fit: the task's name is not
        /// in it, so they are left for the operator to move.
        shortened: Vec<PathBuf>,
        /// The move that failed, which stopped the rest (the moves before it stand).
        error: Option<String>,
    },
}

/// A file of `failed/`, read.
#[derive(Debug, Clone)]
struct Filed {
    path: PathBuf,
    run_id: String,
    task: String,
}

/// Moves the failed files `target` names back into the inbox. Naming
/// nothing that is in `failed/` is a [`UsageError`].
pub fn requeue(cfg: &Config, target: &Target) -> anyhow::Result<RequeueOutcome> {
    folders::check_inbox(&cfg.paths.inbox).map_err(UsageError)?;
    let state_dir = cfg.paths.state_dir();
    let Some(_lock) = RunLock::try_acquire(&state_dir)? else {
        return Ok(RequeueOutcome::Locked);
    };
    let chosen = choose(failed_files(cfg)?, target);
    if chosen.is_empty() {
        return Err(UsageError(format!(
            "nothing in {} matches {}",
            cfg.paths.failed.display(),
            match target {
                Target::Name(n) => format!("task {n:?}"),
                Target::RunId(r) => format!("run id {r}"),
                Target::AllFailed => "--all-failed (it is empty)".into(),
            }
        ))
        .into());
    }
    let mut attempts = Attempts::load(&state_dir);
    let (mut moved, mut refused, mut error) = (Vec::new(), Vec::new(), None);
    let mut short = Vec::new();
    for f in chosen {
        if shortened(&f) {
            short.push(f.path);
            continue;
        }
        let to = cfg.paths.inbox.join(format!("{}.md", f.task));
        match move_without_replacing(&f.path, &to) {
            Ok(true) => {
                attempts.clear(&f.task);
                moved.push(Move {
                    task: f.task,
                    from: f.path,
                    to,
                });
            }
            Ok(false) => refused.push(f.task),
            Err(e) => {
                error = Some(format!("{e:#}"));
                break;
            }
        }
    }
    attempts.save(&state_dir)?;
    Ok(RequeueOutcome::Done {
        moved,
        refused,
        shortened: short,
        error,
    })
}

/// Every `*.md` of `failed/` that reads as `<run_id>-<name>.md`; of two
/// readings, the one whose run folder exists.
fn failed_files(cfg: &Config) -> anyhow::Result<Vec<Filed>> {
    let dir = &cfg.paths.failed;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut filed = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let readings = inbox::filed_readings(&file_name);
        let reading = readings
            .iter()
            .find(|(run_id, task)| cfg.paths.logs.join(task).join(run_id).is_dir())
            .or(readings.last());
        if let Some((run_id, task)) = reading
            && inbox::check_task_name(task).is_ok()
        {
            filed.push(Filed {
                path: entry.path(),
                run_id: run_id.clone(),
                task: task.clone(),
            });
        }
    }
    Ok(filed)
}

/// The files `target` names: for a name (and for every name, with
/// `--all-failed`) only its newest.
fn choose(mut filed: Vec<Filed>, target: &Target) -> Vec<Filed> {
    filed.retain(|f| match target {
        Target::Name(n) => &f.task == n,
        Target::RunId(r) => &f.run_id == r,
        Target::AllFailed => true,
    });
    if matches!(target, Target::RunId(_)) {
        filed.sort_by(|a, b| a.task.cmp(&b.task));
        return filed;
    }
    filed.sort_by(|a, b| {
        a.task
            .cmp(&b.task)
            .then(run_order(&b.run_id).cmp(&run_order(&a.run_id)))
    });
    filed.dedup_by(|later, first| later.task == first.task);
    filed
}

/// A file name [`inbox::fit_file_name`] shortened (`…~1a2b3c4d.md` at the
/// length limit): the task's own name is not in it, so it is not guessed.
fn shortened(f: &Filed) -> bool {
    let file_len = f.path.file_name().map_or(0, |n| n.len());
    let tagged = f.task.len() > 9
        && f.task.as_bytes()[f.task.len() - 9] == b'~'
        && f.task[f.task.len() - 8..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit());
    tagged && file_len + 8 >= inbox::MAX_FILE_NAME
}

/// Renames `from` to `to` unless `to` exists (`RENAME_NOREPLACE`: no gap
/// between the check and the move). `Ok(false)`: `to` exists.
fn move_without_replacing(from: &Path, to: &Path) -> anyhow::Result<bool> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) => Ok(false),
        Err(e) => Err(std::io::Error::from(e))
            .with_context(|| format!("moving {} to {}", from.display(), to.display())),
    }
}
