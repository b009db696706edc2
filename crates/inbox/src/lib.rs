//! The task inbox (docs/tasks.md, "Task files"): listing task files, parsing
//! them (optional `+++` TOML frontmatter, then the body that becomes the first
//! user message), moving finished tasks to `done/` or `failed/` without ever
//! overwriting. What is kept about them beside the inbox (attempt counts,
//! slots) is the `state` room's.
//!
//! Parsing is pure ([`parse_task`]) so it is tested on strings; the I/O
//! wrappers add the file-level checks (size, UTF-8).

mod compose;
mod filing;
mod schedule;
mod whereabouts;

pub use compose::with_keys;
pub use filing::{MAX_FILE_NAME, filed_as, filed_readings, fit_file_name, move_task};
pub use schedule::{ONLY_RECURRING, RECURRING_NEEDS_ONE, Schedule};
pub use whereabouts::{Place, Whereabouts, task_name_of, whereabouts};

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use harness_base::file::{self, FileError, Links};
use harness_base::text::line_of;
use harness_config::{bounds, check_finite, check_range, deserialize_toml};

/// Task files larger than this are invalid.
pub const MAX_TASK_BYTES: u64 = 1024 * 1024;

/// The optional frontmatter keys of a task file.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frontmatter {
    pub max_turns: Option<u32>,
    pub max_wall_secs: Option<u64>,
    pub max_total_tokens: Option<u64>,
    /// Allowlist of tool names; default: every configured tool.
    pub tools: Option<Vec<String>>,
    pub system_prompt: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub max_tokens: Option<u32>,
    pub enable_thinking: Option<bool>,
    pub max_calls_per_turn: Option<u32>,
    pub max_writes: Option<u32>,
    /// What the task must achieve (docs/tasks.md, "Expectations").
    pub expect: Option<Expect>,
    /// The `[agents.NAME]` profile it runs as.
    pub agent: Option<String>,
    /// A JSON Schema file its final answer must match (relative to the config's folder).
    pub output_schema: Option<PathBuf>,
    /// When a recurring task is due; only in `[paths] recurring`
    /// (docs/tasks.md, "Recurring tasks").
    pub schedule: Option<String>,
}

/// The `[expect]` table: what a task must achieve for a final answer to be
/// a success.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Each of these tools ran without error at least once.
    pub tools_called: Option<Vec<String>>,
    /// A regular expression the final answer must match.
    pub answer_matches: Option<String>,
    /// Exactly this many attachments were created (dry-run intents count).
    pub attachments: Option<u32>,
    /// The task finished within this many turns.
    pub max_turns_used: Option<u32>,
}

/// `answer_matches` compiled. The regex crate matches in time linear in the
/// text, so a hostile answer cannot make the check slow; the size limit
/// caps what a pattern may compile to.
pub fn answer_pattern(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| format!("not a valid regular expression: {e}"))
}

impl Frontmatter {
    /// Every number within the config's bounds (docs/configuration.md); `Err`
    /// is `(key, message)`.
    fn check(&self) -> Result<(), (&'static str, String)> {
        let ranges = [
            (
                "max_turns",
                self.max_turns.map(u64::from),
                bounds::MAX_TURNS,
            ),
            ("max_wall_secs", self.max_wall_secs, bounds::MAX_WALL_SECS),
            (
                "max_total_tokens",
                self.max_total_tokens,
                bounds::MAX_TOTAL_TOKENS,
            ),
            (
                "max_tokens",
                self.max_tokens.map(u64::from),
                bounds::MAX_TOKENS,
            ),
            (
                "max_calls_per_turn",
                self.max_calls_per_turn.map(u64::from),
                bounds::MAX_CALLS_PER_TURN,
            ),
            (
                "max_writes",
                self.max_writes.map(u64::from),
                bounds::MAX_WRITES,
            ),
        ];
        for (key, value, range) in ranges {
            if let Some(v) = value {
                check_range(key, v, range).map_err(|m| (key, m))?;
            }
        }
        check_finite("temperature", self.temperature).map_err(|m| ("temperature", m))?;
        if let Some(s) = &self.schedule {
            Schedule::parse(s).map_err(|m| ("schedule", m))?;
        }
        check_finite("top_p", self.top_p).map_err(|m| ("top_p", m))?;
        if let Some(p) = self
            .expect
            .as_ref()
            .and_then(|e| e.answer_matches.as_deref())
        {
            answer_pattern(p)
                .map_err(|e| ("answer_matches", format!("[expect] answer_matches is {e}")))?;
        }
        Ok(())
    }
}

/// A parsed task file: frontmatter plus body.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFile {
    pub frontmatter: Frontmatter,
    pub body: String,
    /// The whole file as read (recorded as `task.md`, so a run can be replayed).
    pub text: String,
}

/// Why a task file is invalid, with the 1-based line when one applies.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct TaskProblem {
    pub line: Option<usize>,
    pub message: String,
}

impl TaskProblem {
    pub fn new(line: Option<usize>, message: impl Into<String>) -> Self {
        TaskProblem {
            line,
            message: message.into(),
        }
    }
}

/// Parses the text of a task file.
pub(crate) fn parse_task(text: &str) -> Result<TaskFile, TaskProblem> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let is_fence = |l: &str| l.trim_end_matches(['\n', '\r']) == "+++";

    let (frontmatter, body) = match lines.next() {
        Some(first) if is_fence(first) => {
            let fm_start = first.len();
            let mut offset = fm_start;
            let mut close = None;
            for line in lines {
                if is_fence(line) {
                    close = Some((offset, offset + line.len()));
                    break;
                }
                offset += line.len();
            }
            let Some((fm_end, body_start)) = close else {
                return Err(TaskProblem::new(
                    Some(1),
                    "frontmatter opened with `+++` is never closed by a second `+++` line",
                ));
            };
            let fm_text = &text[fm_start..fm_end];
            // Lines of the file: the frontmatter starts on line 2.
            let fm: Frontmatter = deserialize_toml(fm_text).map_err(|(line, message)| {
                TaskProblem::new(line.map(|l| l + 1), format!("frontmatter: {message}"))
            })?;
            fm.check().map_err(|(key, message)| {
                TaskProblem::new(
                    key_line(fm_text, key).map(|l| l + 1),
                    format!("frontmatter: {message}"),
                )
            })?;
            (fm, &text[body_start..])
        }
        Some(first) if yaml_frontmatter(first, lines) => {
            return Err(TaskProblem::new(
                Some(1),
                "frontmatter must be TOML between two +++ lines (this file opens YAML frontmatter with ---); \
                 write `key = value` lines between `+++` lines",
            ));
        }
        _ => (Frontmatter::default(), text),
    };
    if body.trim().is_empty() {
        return Err(TaskProblem::new(
            None,
            "the task body is empty: write the instructions for the model below the frontmatter",
        ));
    }
    Ok(TaskFile {
        frontmatter,
        body: body.to_string(),
        text: text.to_string(),
    })
}

/// A file that opens with `---`, closes with a second `---` line and holds
/// `key: value` lines between: frontmatter in the wrong format, which would
/// otherwise reach the model as part of the prompt (docs/tasks.md,
/// "Task files").
fn yaml_frontmatter<'a>(first: &str, rest: impl Iterator<Item = &'a str>) -> bool {
    let is_rule = |l: &str| l.trim_end_matches(['\n', '\r']).trim_end() == "---";
    if !is_rule(first) {
        return false;
    }
    let mut keys = 0;
    for line in rest {
        if is_rule(line) {
            return keys > 0;
        }
        // `key: value` or `key:` alone: not `http://…` or `10:30`.
        let pair = line.split_once(':').filter(|(k, rest)| {
            let k = k.trim_end();
            !k.is_empty()
                && !k.starts_with(char::is_whitespace)
                && k.chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-'))
                && rest.chars().next().is_none_or(char::is_whitespace)
        });
        if pair.is_some() {
            keys += 1;
        }
    }
    false
}

/// The 1-based line of `key = …` in TOML text, when it is on a line of its own.
fn key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

/// Reads and parses a task file, adding the file-level checks. The file is
/// opened without following a symbolic link and must be a regular file: a
/// link's target, a FIFO or a device is never read.
pub fn read_task(path: &Path) -> Result<TaskFile, TaskProblem> {
    let bytes = file::read_regular(path, MAX_TASK_BYTES, Links::Refuse).map_err(|e| {
        let why = match e {
            FileError::Io(e) => format!("cannot read the task file: {e}"),
            FileError::NotRegular(_) => e.to_string(),
            FileError::TooLarge { len, .. } => {
                format!("the task file is {len} bytes; the limit is {MAX_TASK_BYTES} (1 MiB)")
            }
            FileError::Grew { .. } => format!(
                "the task file grew past the limit of {MAX_TASK_BYTES} bytes (1 MiB) while it was read"
            ),
        };
        TaskProblem::new(None, why)
    })?;
    task_from_bytes(bytes)
}

/// A task file's bytes read as one: UTF-8, then [`parse_task`].
pub fn task_from_bytes(bytes: Vec<u8>) -> Result<TaskFile, TaskProblem> {
    let text = String::from_utf8(bytes).map_err(|e| {
        let line = line_of(
            &String::from_utf8_lossy(&e.as_bytes()[..e.utf8_error().valid_up_to()]),
            usize::MAX,
        );
        TaskProblem::new(Some(line), "the task file is not valid UTF-8")
    })?;
    parse_task(&text)
}

/// Names no task may have: the harness keeps its own files in
/// `logs/report/` (the HTML report) and `logs/eval/` (evals), where a
/// task's runs would be (docs/tasks.md, "Task files").
pub const RESERVED_TASK_NAMES: [(&str, &str); 2] = [
    ("report", "the HTML report (`agent-harness report`)"),
    ("eval", "the evals (`agent-harness eval`)"),
];

/// Why `name` is reserved, when it is: the message an inbox entry, a
/// `submit`, a `run-task` or an `exec --name` of that name is refused with.
pub fn reserved_task_name(name: &str) -> Option<String> {
    RESERVED_TASK_NAMES
        .iter()
        .find(|(reserved, _)| *reserved == name)
        .map(|(reserved, what)| {
            format!(
                "task name {reserved:?} is reserved: logs/{reserved}/ holds {what}, so its runs would mix with it; rename the task file"
            )
        })
}

/// Why the inbox entry `path` will never run, when it is for a reserved
/// name (`report.md`); `None` for the other entries that never run.
pub fn reserved_entry(path: &Path) -> Option<String> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".md")?;
    reserved_task_name(stem)
}

/// A task name must be a plain file stem: no separators, no `..`, and
/// not one of [`RESERVED_TASK_NAMES`].
pub fn check_task_name(name: &str) -> Result<(), String> {
    if let Some(why) = reserved_task_name(name) {
        return Err(why);
    }
    if name.is_empty()
        || name.contains(['/', '\\', '\0'])
        || name.contains("..")
        || name.starts_with('.')
        || name.chars().any(char::is_control)
    {
        return Err(format!(
            "task name {name:?} is refused: give the inbox file name without `.md`, with no path separators or `..`"
        ));
    }
    Ok(())
}

/// One `*.md` entry of the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    /// The file name without `.md`.
    pub name: String,
    pub path: PathBuf,
}

/// The inbox read once: its tasks and the entries that will never run.
#[derive(Debug, Default)]
pub struct Entries {
    /// Every `*.md` entry but folders, oldest file name first (byte order).
    /// Symbolic links, FIFOs and other non-regular entries are listed too,
    /// so that they are filed as invalid instead of lingering.
    pub tasks: Vec<InboxEntry>,
    /// The entries left out, which will never run (`notes.txt`, `TASK.MD`,
    /// a folder named `x.md`), sorted: `check` warns about each.
    pub strays: Vec<PathBuf>,
}

/// Reads the inbox once. A missing inbox is an error
/// (`drain::folders::check_inbox` says which key).
pub fn listing(inbox: &Path) -> anyhow::Result<Entries> {
    let mut listing = Entries::default();
    for entry in read_inbox(inbox)? {
        match entry {
            Ok(task) => listing.tasks.push(task),
            Err(stray) => listing.strays.push(stray),
        }
    }
    (listing.tasks).sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    listing.strays.sort();
    Ok(listing)
}

/// The inbox's tasks ([`Entries::tasks`]).
pub fn list(inbox: &Path) -> anyhow::Result<Vec<InboxEntry>> {
    Ok(listing(inbox)?.tasks)
}

/// Each inbox entry: a task (`Ok`) or a path that is none (`Err`).
fn read_inbox(inbox: &Path) -> anyhow::Result<Vec<Result<InboxEntry, PathBuf>>> {
    let context = || format!("reading the inbox {}", inbox.display());
    let mut entries = Vec::new();
    for item in std::fs::read_dir(inbox).with_context(context)? {
        let item = item.with_context(context)?;
        let file_name = item.file_name();
        let name = file_name.to_string_lossy();
        // A hidden entry (an editor's swap file, a file being placed by
        // `submit`) is neither a task nor a stray.
        if name.starts_with('.') {
            continue;
        }
        // A name no task may have (`..`, a control character) never runs:
        // it is a stray, said as one, not a task that cannot be recorded.
        let task = name.strip_suffix(".md").filter(|stem| {
            check_task_name(stem).is_ok() && !item.file_type().is_ok_and(|t| t.is_dir())
        });
        entries.push(match task {
            Some(stem) => Ok(InboxEntry {
                name: stem.to_string(),
                path: item.path(),
            }),
            None => Err(item.path()),
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests;
