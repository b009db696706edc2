//! `requeue` and `rerun` (docs/operating.md, "Commands"): a filed task back
//! into the inbox — from `failed/` (`requeue`) or from `done/` (`rerun`) —
//! under the run lock, its attempt count reset, never over a task already
//! there.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Utc};

use super::{UsageError, folders};
use harness_base::folder::EntryKind;
use harness_config::{Config, Paths};
use harness_inbox as inbox;
use harness_records::{run_order, run_time};
use harness_state::{Attempts, Holder, RunLock, task_folder};

/// The folder a filed task goes back from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `failed/`, by `requeue`.
    Failed,
    /// `done/`, by `rerun`.
    Done,
}

impl Source {
    /// The command that takes tasks from it.
    pub fn command(self) -> &'static str {
        match self {
            Source::Failed => "requeue",
            Source::Done => "rerun",
        }
    }

    /// Its folder among `paths`.
    pub fn dir(self, paths: &Paths) -> &Path {
        match self {
            Source::Failed => &paths.failed,
            Source::Done => &paths.done,
        }
    }

    fn place(self) -> inbox::Place {
        match self {
            Source::Failed => inbox::Place::Failed,
            Source::Done => inbox::Place::Done,
        }
    }
}

/// Which filed tasks go back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The newest filed file of this task.
    Name(String),
    /// Every filed file of the run that started at this run id.
    RunId(String),
    /// The newest filed file of every task.
    AllFailed,
}

impl Target {
    /// `requeue ARG` or `rerun ARG`: a run id (`YYYYMMDDTHHMMSSZ`, perhaps
    /// `-N`) or a task name.
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

/// What `requeue` or `rerun` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequeueOutcome {
    /// A run holds the lock: nothing moved.
    Locked,
    Done {
        moved: Vec<Move>,
        /// Tasks left where they were because the inbox holds one of that name.
        refused: Vec<String>,
        /// Files whose name was shortened to fit: the task's name is not
        /// in it, so they are left for the operator to move.
        shortened: Vec<PathBuf>,
        /// Files of the folder the target names that are not a filed task's
        /// name (`<run_id>-NAME.md`, NAME a task name), left where they are.
        unnamed: Vec<PathBuf>,
        /// The move that failed, which stopped the rest (the moves before it stand).
        error: Option<String>,
    },
}

/// A file of `failed/` or `done/`, read.
#[derive(Debug, Clone)]
pub(crate) struct Filed {
    pub(crate) path: PathBuf,
    /// Its name as the folder holds it: bytes, not always UTF-8.
    file: OsString,
    pub(crate) run_id: String,
    /// Its task's name as text (a byte that is no character read as U+FFFD).
    pub(crate) task: String,
    /// The name it had in the inbox: its own name's bytes after `<run_id>-`.
    inbox_name: OsString,
}

/// Moves the failed files `target` names back into the inbox (`requeue`;
/// `now` is when its lock is noted as taken). Naming nothing that is in
/// `failed/` is a [`UsageError`].
pub fn requeue(
    cfg: &Config,
    target: &Target,
    now: DateTime<Utc>,
) -> anyhow::Result<RequeueOutcome> {
    back_to_inbox(cfg, Source::Failed, target, now)
}

/// Moves the files of `done/` that `target` names back into the inbox
/// (`rerun`), as [`requeue`] does from `failed/`.
pub fn rerun(cfg: &Config, target: &Target, now: DateTime<Utc>) -> anyhow::Result<RequeueOutcome> {
    back_to_inbox(cfg, Source::Done, target, now)
}

fn back_to_inbox(
    cfg: &Config,
    source: Source,
    target: &Target,
    now: DateTime<Utc>,
) -> anyhow::Result<RequeueOutcome> {
    folders::check_inbox(&cfg.paths.inbox).map_err(UsageError)?;
    let state_dir = cfg.paths.state_dir();
    let Some(lock) = RunLock::try_acquire(&state_dir)? else {
        return Ok(RequeueOutcome::Locked);
    };
    lock.note(&Holder {
        pid: std::process::id(),
        command: source.command().into(),
        since: now,
    });
    let (chosen, unnamed) = chosen(cfg, source, target)?;
    let mut attempts = Attempts::load(&state_dir);
    let from_dir = source.dir(&cfg.paths);
    let (from, inbox) = (
        task_folder(&cfg.paths, from_dir)
            .with_context(|| format!("opening {}", from_dir.display()))?,
        task_folder(&cfg.paths, &cfg.paths.inbox)
            .with_context(|| format!("opening {}", cfg.paths.inbox.display()))?,
    );
    let (mut moved, mut refused, mut error) = (Vec::new(), Vec::new(), None);
    let mut short = Vec::new();
    for f in chosen {
        if shortened(&f) {
            short.push(f.path);
            continue;
        }
        let to = cfg.paths.inbox.join(&f.inbox_name);
        match from.move_to(&f.file, &inbox, &f.inbox_name) {
            Ok(()) => {
                attempts.clear(&f.task);
                moved.push(Move {
                    task: f.task,
                    from: f.path,
                    to,
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => refused.push(f.task),
            Err(e) => {
                error = Some(format!(
                    "moving {} to {}: {e}",
                    f.path.display(),
                    to.display()
                ));
                break;
            }
        }
    }
    attempts.save(&state_dir)?;
    Ok(RequeueOutcome::Done {
        moved,
        refused,
        shortened: short,
        unnamed,
        error,
    })
}

/// The files of the folder `source` that `target` names, and those there
/// it names that are no filed task's; naming nothing is a [`UsageError`].
fn chosen(
    cfg: &Config,
    source: Source,
    target: &Target,
) -> anyhow::Result<(Vec<Filed>, Vec<PathBuf>)> {
    let (filed, unnamed) = filed_files(&cfg.paths, source)?;
    let chosen = choose(filed, target);
    // A name that makes no task is said, not skipped: only `--all-failed`
    // names every file (a name or run id typed names none of them).
    let unnamed = match target {
        Target::AllFailed => unnamed,
        Target::RunId(r) => unnamed
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.as_bytes().starts_with(r.as_bytes()))
            })
            .collect(),
        Target::Name(_) => Vec::new(),
    };
    if let (Target::Name(n), true) = (target, chosen.is_empty()) {
        return Err(not_there(cfg, source, n).into());
    }
    if chosen.is_empty() && unnamed.is_empty() {
        return Err(UsageError(format!(
            "nothing in {} matches {}",
            source.dir(&cfg.paths).display(),
            match target {
                Target::Name(n) => format!("task {n:?}"),
                Target::RunId(r) => format!("run id {r}"),
                Target::AllFailed => "--all-failed (it is empty)".into(),
            }
        ))
        .into());
    }
    Ok((chosen, unnamed))
}

/// Task `name` is not in the folder `source`: where it is instead, or the
/// names near it.
fn not_there(cfg: &Config, source: Source, name: &str) -> UsageError {
    let wants = format!(
        "{} takes tasks from {}/",
        source.command(),
        source.dir(&cfg.paths).display()
    );
    UsageError(inbox::whereabouts(&cfg.paths, name).say(&cfg.paths, source.place(), &wants))
}

/// The files of the folder `source` that are filed tasks, read as
/// `requeue` and `rerun` read them (`status` counts them so); the others
/// are left out.
pub(crate) fn filed_tasks(paths: &Paths, source: Source) -> anyhow::Result<Vec<Filed>> {
    Ok(filed_files(paths, source)?.0)
}

/// The files of `failed/` or `done/` as one listing read them (none when
/// the folder could not be listed), for many asks of [`word_among`].
pub(crate) fn listed(paths: &Paths, source: Source) -> Vec<Filed> {
    filed_tasks(paths, source).unwrap_or_default()
}

/// What `requeue WORD` (`rerun WORD` for `done/`) takes to move the filed
/// file `file` back, among the files `filed` of one listing of its
/// folder: `(WORD, others)`, WORD the task's name when the file is the
/// newest of that name there (the one the name moves), else its run id,
/// which moves `others` too (the run's other tasks filed there). `None`
/// when no word moves it: not a filed task's name, or one shortened to
/// fit.
pub(crate) fn word_among(filed: &[Filed], file: &Path) -> Option<(String, Vec<String>)> {
    let this = filed.iter().find(|f| f.path == file)?;
    if shortened(this) {
        return None;
    }
    // Only the files of its task, or of its run, are copied to choose from.
    let those = |keep: &dyn Fn(&Filed) -> bool| -> Vec<Filed> {
        filed.iter().filter(|f| keep(f)).cloned().collect()
    };
    let by_name = choose(
        those(&|f| f.task == this.task),
        &Target::Name(this.task.clone()),
    );
    // A name that prints escaped (`\u{2028}`) would name no task pasted
    // back: the run id names the file instead.
    let prints_as_it_is = !this.task.chars().any(harness_base::text::unsafe_char);
    if by_name.first().is_some_and(|f| f.path == file)
        && run_time(&this.task).is_none()
        && prints_as_it_is
    {
        return Some((this.task.clone(), Vec::new()));
    }
    let others = choose(
        those(&|f| f.run_id == this.run_id),
        &Target::RunId(this.run_id.clone()),
    )
    .into_iter()
    .filter(|f| f.path != file)
    .map(|f| f.task)
    .collect();
    Some((this.run_id.clone(), others))
}

/// Every `*.md` of the folder `source` that reads as `<run_id>-<name>.md`
/// (of two readings, the one whose run folder exists), and the other files
/// there, which name no task. Nothing is followed.
fn filed_files(paths: &Paths, source: Source) -> anyhow::Result<(Vec<Filed>, Vec<PathBuf>)> {
    let dir = source.dir(paths);
    let folder = match task_folder(paths, dir) {
        Ok(folder) => folder,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let entries = folder
        .entries()
        .with_context(|| format!("reading {}", dir.display()))?;
    let (mut filed, mut unnamed) = (Vec::new(), Vec::new());
    for entry in entries.into_iter().filter(|e| e.kind != EntryKind::Folder) {
        let lossy = entry.name.to_string_lossy().into_owned();
        let readings = inbox::filed_readings(&lossy);
        let reading = readings
            .iter()
            .find(|(run_id, task)| paths.logs.join(task).join(run_id).is_dir())
            .or(readings.last());
        // The run id is ASCII, so the bytes after `<run_id>-` are the
        // task's own file name, whatever they are.
        match reading.filter(|(_, task)| !task.starts_with('.')) {
            Some((run_id, task)) => filed.push(Filed {
                path: dir.join(&entry.name),
                inbox_name: OsStr::from_bytes(&entry.name.as_bytes()[run_id.len() + 1..])
                    .to_os_string(),
                file: entry.name,
                run_id: run_id.clone(),
                task: task.clone(),
            }),
            None => unnamed.push(dir.join(&entry.name)),
        }
    }
    Ok((filed, unnamed))
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
