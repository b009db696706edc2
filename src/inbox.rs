//! The task inbox (SPEC §4): listing task files, parsing them (optional `+++`
//! TOML frontmatter, then the body that becomes the first user message),
//! moving finished tasks to `done/` or `failed/` without ever overwriting,
//! and the attempt counts of retryable tasks, kept in a state file beside the
//! inbox (never in the task file).
//!
//! Parsing is pure ([`parse_task`]) so it is tested on strings; the I/O
//! wrappers add the file-level checks (size, UTF-8).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::config::line_of;

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
}

/// A parsed task file: frontmatter plus body.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFile {
    pub frontmatter: Frontmatter,
    pub body: String,
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
pub fn parse_task(text: &str) -> Result<TaskFile, TaskProblem> {
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
            let fm: Frontmatter = toml::from_str(fm_text).map_err(|e| {
                let line = e.span().map(|s| line_of(fm_text, s.start) + 1);
                TaskProblem::new(line, format!("frontmatter: {}", e.message().trim()))
            })?;
            (fm, &text[body_start..])
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
    })
}

/// Reads and parses a task file, adding the file-level checks.
pub fn read_task(path: &Path) -> Result<TaskFile, TaskProblem> {
    let io_problem =
        |e: io::Error| TaskProblem::new(None, format!("cannot read the task file: {e}"));
    let len = std::fs::metadata(path).map_err(io_problem)?.len();
    if len > MAX_TASK_BYTES {
        return Err(TaskProblem::new(
            None,
            format!("the task file is {len} bytes; the limit is {MAX_TASK_BYTES} (1 MiB)"),
        ));
    }
    let bytes = std::fs::read(path).map_err(io_problem)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let line = line_of(
            &String::from_utf8_lossy(&e.as_bytes()[..e.utf8_error().valid_up_to()]),
            usize::MAX,
        );
        TaskProblem::new(Some(line), "the task file is not valid UTF-8")
    })?;
    parse_task(&text)
}

/// A task name must be a plain file stem: no separators, no `..`.
pub fn check_task_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.contains(['/', '\\', '\0'])
        || name.contains("..")
        || name.starts_with('.')
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

/// Lists the inbox: every `*.md` file, oldest file name first (byte order).
/// A missing inbox folder is an empty inbox.
pub fn list(inbox: &Path) -> anyhow::Result<Vec<InboxEntry>> {
    let dir = match std::fs::read_dir(inbox) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading the inbox {}", inbox.display())),
    };
    let mut entries = Vec::new();
    for item in dir {
        let item = item.with_context(|| format!("reading the inbox {}", inbox.display()))?;
        let path = item.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_suffix(".md") else {
            continue;
        };
        if stem.is_empty()
            || stem.starts_with('.')
            || !item.file_type().map(|t| t.is_file()).unwrap_or(false)
        {
            continue;
        }
        entries.push(InboxEntry {
            name: stem.to_string(),
            path,
        });
    }
    entries.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    Ok(entries)
}

/// Moves a finished task file to `dir/<run_id>-<name>.md` by atomic rename,
/// creating `dir` when missing. A clash never overwrites: `-2`, `-3`, … are
/// added. Callers hold the run lock, so nobody else writes to `dir`.
pub fn move_task(from: &Path, dir: &Path, run_id: &str, name: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let target = (1..)
        .map(|n| {
            if n == 1 {
                dir.join(format!("{run_id}-{name}.md"))
            } else {
                dir.join(format!("{run_id}-{name}-{n}.md"))
            }
        })
        .find(|p| !p.exists())
        .context("no free file name")?;
    match std::fs::rename(from, &target) {
        Ok(()) => Ok(target),
        // Different filesystems: copy under a temporary name, rename that into
        // place, then remove the original, so the target never appears half-written.
        Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
            let tmp = dir.join(format!(".{run_id}-{name}.md.tmp"));
            std::fs::copy(from, &tmp)
                .with_context(|| format!("copying {} to {}", from.display(), tmp.display()))?;
            std::fs::rename(&tmp, &target)
                .with_context(|| format!("renaming into {}", target.display()))?;
            std::fs::remove_file(from).with_context(|| format!("removing {}", from.display()))?;
            Ok(target)
        }
        Err(e) => {
            Err(e).with_context(|| format!("moving {} to {}", from.display(), target.display()))
        }
    }
}

/// Attempt counts of retryable tasks, by task name: `<state_dir>/.agent-harness-attempts.json`.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempts {
    #[serde(flatten)]
    counts: BTreeMap<String, u32>,
}

impl Attempts {
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join(".agent-harness-attempts.json")
    }

    /// Loads the counts; a missing or unreadable file counts as empty (and is logged).
    pub fn load(state_dir: &Path) -> Attempts {
        let path = Self::path(state_dir);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "attempt state unreadable; starting from zero");
                Attempts::default()
            }),
            Err(_) => Attempts::default(),
        }
    }

    /// Attempts already counted for `name` in earlier runs.
    pub fn get(&self, name: &str) -> u32 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    pub fn set(&mut self, name: &str, count: u32) {
        self.counts.insert(name.to_string(), count);
    }

    pub fn clear(&mut self, name: &str) {
        self.counts.remove(name);
    }

    /// Writes the state atomically (temporary file, then rename).
    pub fn save(&self, state_dir: &Path) -> anyhow::Result<()> {
        let path = Self::path(state_dir);
        if self.counts.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    Err(e).with_context(|| format!("removing {}", path.display()))
                }
                _ => Ok(()),
            };
        }
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("creating {}", state_dir.display()))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_body_is_the_whole_task() {
        let t = parse_task("# Title\nDo the thing.\n").unwrap();
        assert_eq!(t.frontmatter, Frontmatter::default());
        assert_eq!(t.body, "# Title\nDo the thing.\n");
    }

    #[test]
    fn frontmatter_sets_overrides_and_is_cut_from_the_body() {
        let t = parse_task(
            "+++\nmax_turns = 5\ntools = [\"webfetch\"]\nsystem_prompt = \"Be brief.\"\nenable_thinking = false\n+++\n# Scan\nGo.\n",
        )
        .unwrap();
        assert_eq!(t.frontmatter.max_turns, Some(5));
        assert_eq!(t.frontmatter.tools, Some(vec!["webfetch".to_string()]));
        assert_eq!(t.frontmatter.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(t.frontmatter.enable_thinking, Some(false));
        assert_eq!(t.body, "# Scan\nGo.\n");
    }

    #[test]
    fn windows_line_endings_and_a_bom_are_accepted() {
        let t = parse_task("\u{feff}+++\r\nmax_turns = 2\r\n+++\r\nHello\r\n").unwrap();
        assert_eq!(t.frontmatter.max_turns, Some(2));
        assert_eq!(t.body, "Hello\r\n");
    }

    #[test]
    fn an_unknown_frontmatter_key_names_its_line() {
        let e = parse_task("+++\nmax_turns = 5\nmax_turnz = 3\n+++\nbody\n").unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("max_turnz"), "{e}");
    }

    #[test]
    fn a_wrong_type_names_its_line() {
        let e = parse_task("+++\nmax_turns = \"five\"\n+++\nbody\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("invalid type"), "{e}");
    }

    #[test]
    fn unclosed_frontmatter_is_invalid() {
        let e = parse_task("+++\nmax_turns = 5\nbody without a fence\n").unwrap_err();
        assert!(e.message.contains("never closed"), "{e}");
    }

    #[test]
    fn an_empty_body_is_invalid() {
        assert!(
            parse_task("  \n\t\n")
                .unwrap_err()
                .message
                .contains("empty")
        );
        assert!(
            parse_task("+++\nmax_turns = 1\n+++\n   \n")
                .unwrap_err()
                .message
                .contains("empty")
        );
    }

    #[test]
    fn a_fence_later_in_the_file_is_just_text() {
        let t = parse_task("Intro\n+++\nnot = \"frontmatter\"\n+++\n").unwrap();
        assert_eq!(t.frontmatter, Frontmatter::default());
        assert!(t.body.starts_with("Intro"));
    }

    #[test]
    fn names_with_separators_or_dots_are_refused() {
        for bad in ["", "../x", "a/b", "a\\b", "..", ".hidden", "x..y"] {
            assert!(check_task_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_task_name("weekly-scan_2").is_ok());
    }

    #[test]
    fn files_that_are_too_big_or_not_utf8_are_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.md");
        std::fs::write(&big, vec![b'a'; (MAX_TASK_BYTES + 1) as usize]).unwrap();
        assert!(read_task(&big).unwrap_err().message.contains("1 MiB"));
        let bin = dir.path().join("bin.md");
        std::fs::write(&bin, b"line one\nbad \xff byte\n").unwrap();
        let e = read_task(&bin).unwrap_err();
        assert!(e.message.contains("UTF-8"));
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn listing_is_sorted_and_skips_other_files() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["b.md", "a.md", "c.txt", ".hidden.md", "10.md"] {
            std::fs::write(dir.path().join(n), "x").unwrap();
        }
        std::fs::create_dir(dir.path().join("d.md")).unwrap();
        let names: Vec<_> = list(dir.path())
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["10", "a", "b"]);
        assert!(list(&dir.path().join("missing")).unwrap().is_empty());
    }

    #[test]
    fn moves_never_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let done = dir.path().join("done");
        for body in ["first", "second"] {
            let src = dir.path().join("t.md");
            std::fs::write(&src, body).unwrap();
            move_task(&src, &done, "20260101T000000Z", "t").unwrap();
            assert!(!src.exists());
        }
        assert_eq!(
            std::fs::read_to_string(done.join("20260101T000000Z-t.md")).unwrap(),
            "first"
        );
        assert_eq!(
            std::fs::read_to_string(done.join("20260101T000000Z-t-2.md")).unwrap(),
            "second"
        );
    }

    #[test]
    fn attempts_round_trip_and_vanish_when_empty() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = Attempts::load(dir.path());
        assert_eq!(a.get("x"), 0);
        a.set("x", 2);
        a.save(dir.path()).unwrap();
        assert_eq!(Attempts::load(dir.path()).get("x"), 2);
        a.clear("x");
        a.save(dir.path()).unwrap();
        assert!(!Attempts::path(dir.path()).exists());
    }
}
