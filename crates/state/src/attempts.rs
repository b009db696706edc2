//! Attempt counts beside the inbox (docs/operating.md, "Endpoints and retries";
//! docs/resume-replay-eval.md, "Resume"): for each inbox task, the attempts
//! counted, the run folders of those attempts since it last settled — by name
//! and by what they are on disk — and the task file they were made of. Those
//! run folders, and no others, are what the task may resume from: a run folder
//! planted in `logs/`, or put in the place of one of them, is never gone on
//! from; a task file placed after the attempt (another file under the same
//! name) starts fresh, its count too.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::files::{self, Stored};

/// The file's name in the folder holding the inbox.
pub const ATTEMPTS_FILE: &str = ".agent-harness-attempts.json";

/// A bigger file is not read: a few hundred tasks fit in a few KiB.
const MAX_BYTES: u64 = 4 << 20;

/// Run folders kept per task: a task interrupted again and again keeps
/// the newest (resume goes on from the newest with a whole turn).
const MAX_RUNS: usize = 16;

/// Attempt counts and unsettled runs, by task name.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempts {
    #[serde(flatten)]
    tasks: BTreeMap<String, Tried>,
}

/// One task's attempts since it last settled.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "OnDisk")]
pub struct Tried {
    pub attempts: u32,
    /// The runs of its attempts, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunRef>,
    /// The task file those attempts were made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileRef>,
}

/// A run folder an attempt wrote: its run id, and its device and inode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRef {
    pub id: String,
    pub dev: u64,
    pub ino: u64,
}

/// A file as it is on disk: another file put under its name is not it.
/// Its inode may be one a removed file had, so its change time (in ns)
/// tells them apart too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    pub dev: u64,
    pub ino: u64,
    pub changed: i64,
}

impl FileRef {
    /// The file at `path` itself (a link is not followed).
    pub fn of(path: &Path) -> Option<FileRef> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(FileRef {
            dev: m.dev(),
            ino: m.ino(),
            changed: m
                .ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(m.ctime_nsec()),
        })
    }
}

/// What the file holds for a task: an older version wrote the count alone.
#[derive(Deserialize)]
#[serde(untagged)]
enum OnDisk {
    Count(u32),
    Tried {
        attempts: u32,
        #[serde(default)]
        runs: Vec<RunRef>,
        #[serde(default)]
        file: Option<FileRef>,
    },
}

impl From<OnDisk> for Tried {
    fn from(s: OnDisk) -> Tried {
        match s {
            OnDisk::Count(attempts) => Tried {
                attempts,
                ..Tried::default()
            },
            OnDisk::Tried {
                attempts,
                runs,
                file,
            } => Tried {
                attempts,
                // What another hand wrote is no folder name until checked.
                runs: runs.into_iter().filter(|r| is_run_id(&r.id)).collect(),
                file,
            },
        }
    }
}

/// A run id as the records name one (`YYYYMMDDTHHMMSSZ`, perhaps `-N`):
/// digits, `T`, `Z` and `-`, never a path.
fn is_run_id(s: &str) -> bool {
    (16..=24).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit() || b"TZ-".contains(&b))
}

impl Attempts {
    /// The counts beside the inbox in `state_dir`; a missing file is
    /// empty, and so — with a warning — is one that cannot be read.
    pub fn load(state_dir: &Path) -> Attempts {
        let unreadable = |why: &str| {
            tracing::warn!(path = %state_dir.join(ATTEMPTS_FILE).display(), error = %why, "attempt counts unreadable; every task's attempts count from zero and none resumes");
            Attempts::default()
        };
        match files::read(state_dir, ATTEMPTS_FILE, MAX_BYTES) {
            Stored::Absent => Attempts::default(),
            Stored::Bytes(bytes) => {
                serde_json::from_slice(&bytes).unwrap_or_else(|e| unreadable(&e.to_string()))
            }
            Stored::Unreadable(why) | Stored::Foreign(why) => unreadable(&why),
        }
    }

    /// Attempts already counted for `name` in earlier runs.
    pub fn get(&self, name: &str) -> u32 {
        self.tasks.get(name).map_or(0, |t| t.attempts)
    }

    /// The runs of `name`'s attempts since it last settled, oldest first.
    pub fn runs(&self, name: &str) -> &[RunRef] {
        self.tasks.get(name).map_or(&[], |t| t.runs.as_slice())
    }

    /// The entry of `name`, when its attempts were made of `file`: the
    /// entry of another file under the same name (placed after them) is
    /// forgotten first, so that file starts fresh.
    pub fn of_file(&mut self, name: &str, file: Option<FileRef>) -> Option<&Tried> {
        if self
            .tasks
            .get(name)
            .is_some_and(|t| t.file.is_some() && t.file != file)
        {
            self.tasks.remove(name);
        }
        self.tasks.get(name)
    }

    /// Counts an attempt of `name`, made of `file` in run `run`.
    pub fn begin(&mut self, name: &str, run: RunRef, file: Option<FileRef>) {
        let tried = self.tasks.entry(name.to_string()).or_default();
        tried.attempts = tried.attempts.saturating_add(1);
        tried.runs.push(run);
        tried.file = file.or(tried.file);
        let over = tried.runs.len().saturating_sub(MAX_RUNS);
        tried.runs.drain(..over);
    }

    /// Sets `name`'s count (an interrupted attempt given back), keeping
    /// its runs to resume from.
    pub fn set(&mut self, name: &str, attempts: u32) {
        self.tasks.entry(name.to_string()).or_default().attempts = attempts;
    }

    /// Forgets `name`: it settled, or it is gone.
    pub fn clear(&mut self, name: &str) {
        self.tasks.remove(name);
    }

    /// Keeps the tasks `keep` accepts; says whether any went.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) -> bool {
        let before = self.tasks.len();
        self.tasks.retain(|name, _| keep(name));
        self.tasks.len() != before
    }

    /// Writes the counts whole beside the inbox in `state_dir`; with none
    /// left, the file goes.
    pub fn save(&self, state_dir: &Path) -> anyhow::Result<()> {
        let path = || state_dir.join(ATTEMPTS_FILE).display().to_string();
        if self.tasks.is_empty() {
            return files::remove(state_dir, ATTEMPTS_FILE)
                .with_context(|| format!("removing {}", path()));
        }
        let bytes = serde_json::to_vec_pretty(self)?;
        files::write(state_dir, ATTEMPTS_FILE, &bytes)
            .with_context(|| format!("writing {}", path()))
    }
}

/// A task's attempt: counted before it starts, so a task that kills the
/// process still uses its attempts up (docs/untrusted-input.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptCount {
    /// Attempts counted in earlier runs.
    pub previous: u32,
    /// The process died on this task in every allowed attempt: not run again.
    pub exhausted: bool,
    /// The runs of the attempts before this one since the task (or its
    /// slot) last settled, oldest first: the only run folders it may go on
    /// from (docs/resume-replay-eval.md, "Resume").
    pub runs: Vec<RunRef>,
}

impl AttemptCount {
    pub const UNCOUNTED: AttemptCount = AttemptCount {
        previous: 0,
        exhausted: false,
        runs: Vec::new(),
    };

    /// This run's attempt number, as the summary says it.
    pub fn number(&self) -> u32 {
        if self.exhausted {
            self.previous
        } else {
            self.previous.saturating_add(1)
        }
    }
}
