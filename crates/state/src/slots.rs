//! The recurring tasks' slots (docs/tasks.md, "Recurring tasks"), kept beside
//! the inbox in `.agent-harness-recurring.json`: for each task when it was
//! first seen, the last slot run for good, the slot its attempts are spent on,
//! and the date of its last success. Which slot is due is the engine's
//! (`drain::recurring`); this is the file, read as hostile input and written
//! whole.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use super::RunRef;
use super::files::{self, Stored};

const SLOTS_FILE: &str = ".agent-harness-recurring.json";

/// A bigger file is not read.
const MAX_BYTES: u64 = 16 << 20;

/// The slots of every recurring task, by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Slots {
    #[serde(flatten)]
    pub tasks: BTreeMap<String, TaskSlots>,
    /// The file was there but could not be read: a task it does not know
    /// is first seen now, not when its file was put there.
    #[serde(skip)]
    pub unreadable: bool,
    /// Recurring files that cannot run (unreadable, no working schedule),
    /// by name, with the version (modification time) already recorded as
    /// `invalid_task`: each version is said once, not every run. A task
    /// name never starts with a dot, so this key is no task's.
    #[serde(
        rename = ".broken",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub broken: BTreeMap<String, String>,
}

/// One recurring task's slots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSlots {
    /// When the file was first seen: no slot at or before it is due.
    pub since: DateTime<Utc>,
    /// The last slot run for good (succeeded, failed, or given up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<DateTime<Utc>>,
    /// The slot `attempts` were spent on, still due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<DateTime<Utc>>,
    #[serde(default)]
    pub attempts: u32,
    /// The runs of those attempts, oldest first: the only run folders the
    /// slot's next attempt may go on from (docs/untrusted-input.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<NaiveDate>,
}

impl Slots {
    /// The slots beside the inbox. A missing file is empty: every task is
    /// first seen now and runs at its first scheduled time after its file
    /// was put there. A file that cannot be read is empty too, with a
    /// warning, and then every task waits for its next slot — never a slot
    /// that may already be done.
    pub fn load(state_dir: &Path) -> Slots {
        let unreadable = |e: &str| {
            tracing::warn!(path = %state_dir.join(SLOTS_FILE).display(), error = %e, "recurring state unreadable; every recurring task waits for its next slot");
            Slots {
                unreadable: true,
                ..Slots::default()
            }
        };
        match files::read(state_dir, SLOTS_FILE, MAX_BYTES) {
            Stored::Absent => Slots::default(),
            Stored::Bytes(bytes) => {
                serde_json::from_slice(&bytes).unwrap_or_else(|e| unreadable(&e.to_string()))
            }
            Stored::Unreadable(why) | Stored::Foreign(why) => unreadable(&why),
        }
    }

    pub fn save(&self, state_dir: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        files::write(state_dir, SLOTS_FILE, (text + "\n").as_bytes())
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", state_dir.join(SLOTS_FILE).display()))
    }

    /// The date of `name`'s last successful slot.
    pub fn last_success(&self, name: &str) -> Option<NaiveDate> {
        self.tasks.get(name).and_then(|t| t.last_success)
    }
}
