//! Walking `logs/` for its runs (docs/untrusted-input.md): through opened
//! folders, one real folder at a time, never following a link; a folder this
//! user may not read is named as such, never taken for "no runs"; a folder
//! dated more than an hour ahead of the clock is no run.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use super::Summary;
use super::capped::read_summary_in;
use super::run_id::{ahead_of_clock, run_time};
use harness_base::folder::Folder;

/// A run folder as the listing walked it, with its summary.
#[derive(Debug, Clone)]
pub struct ListedRun {
    /// `logs/<task_dir>/<run_dir>`, for messages.
    pub dir: PathBuf,
    /// The names of the folders walked (never a summary's fields).
    pub task_dir: String,
    pub run_dir: String,
    pub summary: Summary,
}

/// What `logs/` holds: the readable runs, newest first; the run folders
/// without a readable summary (a run still going, one killed before it
/// ended, or a crafted one); the folders whose run id or start lies more
/// than an hour ahead of the clock, which no run of this clock wrote
/// (planted, or the clock went back: never "the newest run");
/// what was skipped, one line each; and the folders this user may not
/// read (a permission problem, never "no runs").
#[derive(Debug, Default)]
pub struct Listing {
    pub runs: Vec<ListedRun>,
    pub incomplete: Vec<Unfinished>,
    pub ahead: Vec<PathBuf>,
    pub skipped: Vec<String>,
    pub unreadable: Vec<PathBuf>,
    /// The logs folder is there but is no folder to read (a file, a loop
    /// of links): why.
    pub broken: Option<String>,
}

impl Listing {
    pub fn summaries(&self) -> Vec<Summary> {
        self.runs.iter().map(|r| r.summary.clone()).collect()
    }

    /// The line that names a folder of [`Listing::ahead`] as no run.
    pub fn ahead_line(dir: &Path, now: DateTime<Utc>) -> String {
        format!(
            "{}: not a run: its run id or start lies more than an hour ahead of the clock ({}); planted, or the clock went back",
            dir.display(),
            now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
    }
}

/// Walks `logs/<task>/<run>/` through opened folders, one real folder at a
/// time: a link is never followed (a linked task or run folder is skipped
/// with a line saying so), and a folder renamed or swapped for a link
/// during the walk is not followed either. A missing, half-written or
/// foreign summary never stops the listing: its folder is named instead,
/// and so is one dated more than an hour after `now`.
pub fn read_summaries(logs: &Path, now: DateTime<Utc>) -> Listing {
    read_summaries_since(logs, now, None)
}

/// [`read_summaries`] of the runs that started at or after `since`: a
/// folder whose run id is earlier is passed over unread, so a year of
/// records costs a listing of each task's folder and the summaries asked
/// for (`runs --since`).
pub fn read_summaries_since(
    logs: &Path,
    now: DateTime<Utc>,
    since: Option<DateTime<Utc>>,
) -> Listing {
    match Folder::open_root(logs) {
        Ok(root) => walk(
            &root,
            logs,
            Walk {
                now,
                since,
                read: Read::Summaries,
            },
        ),
        // No logs folder yet: no run was recorded.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Listing::default(),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Listing {
            unreadable: vec![logs.to_path_buf()],
            ..Listing::default()
        },
        // Not a folder, a loop of links: said as what it is.
        Err(e) => Listing {
            broken: Some(format!("{}: {e}", logs.display())),
            ..Listing::default()
        },
    }
}

/// A folder of the records this user may not read (docs/operating.md, "Reading
/// the config, and permissions"): named as a permission problem by whoever
/// reads it, never taken for "no runs".
#[derive(Debug, thiserror::Error)]
#[error("{} cannot be read by this user (permission denied)", .0.display())]
pub struct Unreadable(pub PathBuf);

/// Why an entry the listing saw as a real folder did not open: a
/// permission problem, gone meanwhile (retention, a rename), or swapped
/// for a link meanwhile.
enum Unopened {
    Denied,
    Gone,
    Link,
}

fn unopened(e: &std::io::Error) -> Unopened {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => Unopened::Denied,
        std::io::ErrorKind::NotFound => Unopened::Gone,
        _ => Unopened::Link,
    }
}

/// [`read_summaries`] from an opened folder (`logs` names it in messages).
pub fn read_summaries_in(root: &Folder, logs: &Path, now: DateTime<Utc>) -> Listing {
    let how = Walk {
        now,
        since: None,
        read: Read::Summaries,
    };
    walk(root, logs, how)
}

/// What a walk reads of each run folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Its summary: the runs, and the folders without a readable one.
    Summaries,
    /// Nothing: only whether a summary is there, so only the folders
    /// without one are listed (`incomplete`).
    Folders,
}

/// Whether run `run_id` started at or after `since`, to the second its id
/// holds (a name that is no run id did not).
pub fn started_since(run_id: &str, since: DateTime<Utc>) -> bool {
    run_time(run_id).is_some_and(|t| t.timestamp() >= since.timestamp())
}

/// How a walk goes: `since`, when given, passes over the folders named as
/// runs that started before it (with [`Read::Folders`], every folder not
/// named as a run at all); a run folder dated more than an hour after
/// `now` is [`Listing::ahead`], never read.
struct Walk {
    now: DateTime<Utc>,
    since: Option<DateTime<Utc>>,
    read: Read,
}

/// The walk every listing is, as `how` says.
fn walk(root: &Folder, logs: &Path, how: Walk) -> Listing {
    let mut out = Listing::default();
    let listed = out.listed(root, logs);
    for (task, real) in listed {
        let task_path = logs.join(&task);
        let Some(task_folder) = out.opened(root, &task, real, &task_path) else {
            continue;
        };
        let runs = out.listed(&task_folder, &task_path);
        for (run, real) in runs {
            how.visit(&mut out, &task_folder, &task, &task_path, run, real);
        }
    }
    out.runs.sort_by(|a, b| {
        b.summary
            .started_at
            .cmp(&a.summary.started_at)
            .then_with(|| b.dir.cmp(&a.dir))
    });
    out.incomplete
        .sort_by(|a, b| (&a.task_dir, &a.run_dir).cmp(&(&b.task_dir, &b.run_dir)));
    out.ahead.sort();
    out.skipped.sort();
    out.unreadable.sort();
    out
}

impl Walk {
    /// The entry `run` of the task's folder (`real`: a real folder, not a
    /// link), added to `out` as what it is.
    fn visit(
        &self,
        out: &mut Listing,
        task_folder: &Folder,
        task: &str,
        task_path: &Path,
        run: String,
        real: bool,
    ) {
        // Named as a run before `since`: not read at all.
        let named = run_time(&run).is_some();
        let before = self.since.is_some_and(|since| !started_since(&run, since));
        if before && (named || self.read == Read::Folders) {
            return;
        }
        let dir = task_path.join(&run);
        let Some(run_folder) = out.opened(task_folder, &run, real, &dir) else {
            return;
        };
        if !is_run(&run_folder) {
            return;
        }
        if run_time(&run).is_some_and(|t| ahead_of_clock(t, self.now)) {
            out.ahead.push(dir);
            return;
        }
        let unfinished = |dir: PathBuf, run: String| Unfinished {
            dir,
            task_dir: task.to_string(),
            run_dir: run,
        };
        if self.read == Read::Folders {
            if !run_folder.has("summary.json") {
                out.incomplete.push(unfinished(dir, run));
            }
            return;
        }
        match read_summary_in(&run_folder, &dir) {
            // Runs are put in order by their start: a planted one
            // cannot be the newest by its summary either.
            Ok(summary) if ahead_of_clock(summary.started_at, self.now) => out.ahead.push(dir),
            Ok(summary) if self.since.is_some_and(|since| summary.started_at < since) => {}
            Ok(summary) => out.runs.push(ListedRun {
                dir,
                task_dir: task.to_string(),
                run_dir: run,
                summary,
            }),
            Err(why) => {
                tracing::debug!(error = %why, "unreadable summary");
                out.incomplete.push(unfinished(dir, run));
            }
        }
    }
}

/// A run folder without a summary, as a walk found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    /// `logs/<task_dir>/<run_dir>`, for messages.
    pub dir: PathBuf,
    /// The names of the folders walked: the task's folder and the run id.
    pub task_dir: String,
    pub run_dir: String,
}

/// The run folders under `logs` whose run id is at or after `since` (to
/// the second) and that have no `summary.json` yet: the tasks of a run
/// going now that started then (`status`). The listing's own walk, with no
/// file read: no link is followed, what cannot be listed is passed over,
/// and a folder dated more than an hour after `now` is no run going.
pub fn unfinished_since(logs: &Path, since: DateTime<Utc>, now: DateTime<Utc>) -> Vec<Unfinished> {
    match Folder::open_root(logs) {
        Ok(root) => {
            let how = Walk {
                now,
                since: Some(since),
                read: Read::Folders,
            };
            walk(&root, logs, how).incomplete
        }
        Err(_) => Vec::new(),
    }
}

impl Listing {
    /// The folders and links in `folder` (at `path`); none when it cannot
    /// be listed, noted as unreadable when permission is what refused it.
    fn listed(&mut self, folder: &Folder, path: &Path) -> Vec<(String, bool)> {
        folder.folders_and_links().unwrap_or_else(|e| {
            if let Unopened::Denied = unopened(&e) {
                self.unreadable.push(path.to_path_buf());
            }
            Vec::new()
        })
    }

    /// The sub-folder `name` of `parent`, when the listing saw a real one
    /// and it opens; else why not, noted.
    fn opened(&mut self, parent: &Folder, name: &str, real: bool, path: &Path) -> Option<Folder> {
        let result = if real {
            parent.sub(name).map_err(|e| unopened(&e))
        } else {
            Err(Unopened::Link)
        };
        match result {
            Ok(folder) => Some(folder),
            Err(Unopened::Denied) => {
                self.unreadable.push(path.to_path_buf());
                None
            }
            Err(Unopened::Gone) => None,
            Err(Unopened::Link) => {
                self.skipped
                    .push(format!("{}: a symbolic link, not followed", path.display()));
                None
            }
        }
    }
}

/// A run folder holds records; anything else (an eval's folders, the
/// report) is not a run. Entries are looked at, not followed.
fn is_run(folder: &Folder) -> bool {
    ["summary.json", "conversation.jsonl", "run.log"]
        .iter()
        .any(|f| folder.has(f))
}
