//! Names as people type them (README, Commands): `NAME` or `NAME.md`, and
//! for a name a command cannot find, where that task is (the inbox,
//! `done/`, `failed/`, the recurring folder, or only the logs) or the
//! nearest names that are — the one line `run-task`, `show`, `requeue` and
//! `runs --task` print for it. Only folder listings are read, never a
//! file's contents, and nothing is followed.

use std::collections::BTreeSet;
use std::path::Path;

use harness_config::Paths;

use super::{check_task_name, filed_readings, fit_file_name, list};

/// A task name as typed: one trailing `.md` stripped (`example.md` →
/// `example`).
pub fn task_name_of(typed: &str) -> &str {
    typed.strip_suffix(".md").unwrap_or(typed)
}

/// A folder a task can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Inbox,
    Done,
    Failed,
    Recurring,
    /// Its runs' folder in `[paths] logs`.
    Logs,
}

/// Where a task of one name is, and the names near it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whereabouts {
    pub name: String,
    /// The folders holding it, in [`Place`] order.
    pub places: Vec<Place>,
    /// The nearest names anywhere (by edit distance, then name), at most three.
    pub near: Vec<String>,
}

/// Where task `name` is, and which names in the inbox, `done/`,
/// `failed/`, the recurring folder and the logs are near it.
pub fn whereabouts(paths: &Paths, name: &str) -> Whereabouts {
    let mut places = Vec::new();
    let mut names = BTreeSet::new();
    for (place, found) in [
        (Place::Inbox, listed(&paths.inbox)),
        (Place::Done, filed(&paths.done)),
        (Place::Failed, filed(&paths.failed)),
        (Place::Recurring, listed(&paths.recurring)),
        (Place::Logs, logged(&paths.logs)),
    ] {
        if found.contains(name) {
            places.push(place);
        }
        names.extend(found);
    }
    Whereabouts {
        name: name.to_string(),
        places,
        near: nearest(name, &names),
    }
}

impl Whereabouts {
    /// The line a command prints for a name it did not find where it
    /// looked (`looked`): where the task is instead, then `wants` (what the
    /// command takes: "requeue takes tasks from tasks/failed/"); or, when
    /// it is nowhere, the nearest names.
    pub fn say(&self, paths: &Paths, looked: Place, wants: &str) -> String {
        let name = &self.name;
        let elsewhere: Vec<String> = self
            .places
            .iter()
            .filter(|p| **p != looked)
            .map(|p| describe(paths, *p, self.places.len() == 1))
            .collect();
        if !elsewhere.is_empty() {
            return format!("{name} is {}; {wants}", elsewhere.join(" and "));
        }
        // Where the command looked has the name but not what it wants
        // there (a task's folder in the logs with no run in it).
        if self.places.contains(&looked) {
            return format!("{name}: {wants}");
        }
        let nowhere = format!(
            "no task {name:?} in the inbox, done/, failed/, the recurring folder or the logs"
        );
        match self.near.split_first() {
            Some((first, [])) => {
                format!("{nowhere}; did you mean {name} → {first}?")
            }
            Some((first, rest)) => format!(
                "{nowhere}; did you mean {name} → {first} (or {})?",
                rest.join(", ")
            ),
            None => format!("{nowhere}; {wants}"),
        }
    }
}

/// Where a place is, said for the operator: its folder and what being
/// there means.
fn describe(paths: &Paths, place: Place, only: bool) -> String {
    let dir = |p: &Path| format!("{}/", p.display());
    match place {
        Place::Inbox => format!("in the inbox {} (waiting to run)", dir(&paths.inbox)),
        Place::Done => format!("in {} (it succeeded)", dir(&paths.done)),
        Place::Failed => format!("in {} (it failed)", dir(&paths.failed)),
        Place::Recurring => format!(
            "a recurring task in {} (run-task --recurring runs it)",
            dir(&paths.recurring)
        ),
        Place::Logs if only => format!(
            "only in {} (runs are recorded; its file is gone: pruned, moved by hand, or run by exec)",
            dir(&paths.logs)
        ),
        Place::Logs => format!("recorded in {}", dir(&paths.logs)),
    }
}

/// The task names of a folder of `NAME.md` files (none when it cannot be read).
fn listed(dir: &Path) -> BTreeSet<String> {
    list(dir)
        .map(|entries| entries.into_iter().map(|e| e.name).collect())
        .unwrap_or_default()
}

/// The task names of `done/` or `failed/` (`<run_id>-NAME.md`), every reading.
fn filed(dir: &Path) -> BTreeSet<String> {
    file_names(dir)
        .iter()
        .flat_map(|f| filed_readings(f))
        .map(|(_, task)| task)
        .filter(|task| check_task_name(task).is_ok())
        .collect()
}

/// The task names the logs folder has a folder for (one per task, named
/// as [`fit_file_name`] fits it).
fn logged(dir: &Path) -> BTreeSet<String> {
    let Ok(items) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    items
        .take(MAX_NAMES)
        .filter_map(Result::ok)
        .filter(|i| i.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|i| i.file_name().into_string().ok())
        .filter(|n| check_task_name(n).is_ok() && fit_file_name("", n, "") == *n)
        .collect()
}

/// The UTF-8 names in a folder, at most [`MAX_NAMES`].
fn file_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|items| {
            items
                .take(MAX_NAMES)
                .filter_map(Result::ok)
                .filter_map(|i| i.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The most entries of one folder read for a hint: a folder anyone can
/// fill costs a wrong name no more than this.
const MAX_NAMES: usize = 100_000;

/// The names within a small edit distance of `name` (a transposition is
/// one edit; case is ignored), nearest first, at most three.
pub(crate) fn nearest(name: &str, names: &BTreeSet<String>) -> Vec<String> {
    let len = name.chars().count();
    let most = match len {
        0..=3 => 1,
        4..=7 => 2,
        _ => 3,
    };
    let lower = name.to_lowercase();
    let mut near: Vec<(usize, &String)> = names
        .iter()
        .filter(|n| n.as_str() != name)
        // No fewer edits than the lengths differ: most names are never compared.
        .filter(|n| n.chars().count().abs_diff(len) <= most)
        .map(|n| (strsim::osa_distance(&lower, &n.to_lowercase()), n))
        .filter(|(d, _)| *d <= most)
        .collect();
    near.sort();
    near.into_iter().take(3).map(|(_, n)| n.clone()).collect()
}
