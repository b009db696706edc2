//! Run records (SPEC §8): `logs/<task>/<run_id>/` with `conversation.jsonl`
//! (every request attempt, raw), `tools.jsonl` (every tool call), `run.log`
//! (a human-readable trace, thinking included) and `summary.json`.
//!
//! Each line is written with one `write` call as it happens, so a killed run
//! still leaves whole, parseable lines. Every line passes through the
//! redactor first: no secret value reaches a record, whatever produced it.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{Redactor, Secret};
use crate::endpoint::Attempt;

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Succeeded,
    Failed,
    Interrupted,
}

/// Why a task stopped (SPEC §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    FinalAnswer,
    MaxTurns,
    MaxWallSecs,
    MaxTotalTokens,
    LoopDetected,
    ContextExhausted,
    EndpointError,
    InvalidTask,
    EmptyResponse,
    Interrupted,
    /// The harness itself failed inside the task (a panic), or the process
    /// died on this task in every allowed attempt.
    InternalError,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::FinalAnswer => "final_answer",
            StopReason::MaxTurns => "max_turns",
            StopReason::MaxWallSecs => "max_wall_secs",
            StopReason::MaxTotalTokens => "max_total_tokens",
            StopReason::LoopDetected => "loop_detected",
            StopReason::ContextExhausted => "context_exhausted",
            StopReason::EndpointError => "endpoint_error",
            StopReason::InvalidTask => "invalid_task",
            StopReason::EmptyResponse => "empty_response",
            StopReason::Interrupted => "interrupted",
            StopReason::InternalError => "internal_error",
        }
    }
}

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub task: String,
    pub run_id: String,
    pub status: Status,
    pub stop_reason: StopReason,
    pub retryable: bool,
    pub attempt: u32,
    pub turns: u32,
    pub tool_calls: u32,
    pub tool_errors: u32,
    /// Calls answered "not run" because `max_calls_per_turn` or `max_writes` was spent.
    #[serde(default)]
    pub calls_over_budget: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub runpod_exec_ms: Option<u64>,
    pub runpod_delay_ms: Option<u64>,
    pub wall_ms: u64,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub final_answer: Option<String>,
    pub error: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
}

/// What the context manager did before a request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextNote {
    /// Estimated prompt tokens of the request as sent.
    pub estimated_prompt_tokens: u64,
    /// `context_tokens − max_tokens`, when the context is managed.
    pub budget: Option<u64>,
    /// Tool results whose bodies were replaced by a placeholder before this request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elided_call_ids: Vec<String>,
}

/// One line of `conversation.jsonl`.
#[derive(Debug, Clone, Serialize)]
pub struct ConversationLine<'a> {
    pub turn: u32,
    #[serde(flatten)]
    pub attempt: &'a Attempt<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<&'a ContextNote>,
}

/// One line of `tools.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolLine {
    pub turn: u32,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub result: String,
    pub is_error: bool,
    pub duration_ms: u64,
    pub original_chars: usize,
    pub returned_chars: usize,
    /// False when the call was answered without running the tool (invalid,
    /// repeated, cut off, dry-run writes are still "executed" as intents).
    pub executed: bool,
    /// The call was written as text and recovered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recovered: bool,
    /// How many times this exact call (name + arguments) has been asked for in the task.
    pub repeat: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

/// The open record files of one task run.
#[derive(Debug)]
pub struct RunRecord {
    pub dir: PathBuf,
    pub run_id: String,
    conversation: File,
    tools: File,
    log: File,
    redactor: Redactor,
}

/// The run id for a start time: `YYYYMMDDTHHMMSSZ`.
pub fn run_id_for(started: DateTime<Utc>) -> String {
    started.format("%Y%m%dT%H%M%SZ").to_string()
}

/// Creates a folder only its owner can enter (0700, whatever the umask);
/// an existing one is left as it is.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes a file only its owner can read (0600, whatever the umask).
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)
}

impl RunRecord {
    /// Creates `logs/<task>/<run_id>/` (0700; its files 0600, whatever the
    /// umask: they hold private notes); a clash gets `-2`, `-3`, ….
    pub fn create(
        logs: &Path,
        task: &str,
        started: DateTime<Utc>,
        secrets: Vec<Secret>,
    ) -> anyhow::Result<RunRecord> {
        let task_dir = logs.join(crate::inbox::fit_file_name("", task, ""));
        create_private_dir(&task_dir)
            .with_context(|| format!("creating the log folder {}", task_dir.display()))?;
        let base = run_id_for(started);
        let mut n = 1;
        let (dir, run_id) = loop {
            let run_id = if n == 1 {
                base.clone()
            } else {
                format!("{base}-{n}")
            };
            let dir = task_dir.join(&run_id);
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => break (dir, run_id),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
                Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
            }
        };
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting {}", dir.display()))?;
        let open = |name: &str| -> anyhow::Result<File> {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(dir.join(name))
                .with_context(|| format!("creating {}/{name}", dir.display()))?;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            Ok(f)
        };
        Ok(RunRecord {
            conversation: open("conversation.jsonl")?,
            tools: open("tools.jsonl")?,
            log: open("run.log")?,
            dir,
            run_id,
            redactor: Redactor::new(secrets),
        })
    }

    pub fn conversation(&mut self, line: &ConversationLine<'_>) {
        let text = json_line(line);
        write_line(
            &mut self.conversation,
            text,
            &self.redactor,
            "conversation.jsonl",
        );
    }

    pub fn tool(&mut self, line: &ToolLine) {
        let text = json_line(line);
        write_line(&mut self.tools, text, &self.redactor, "tools.jsonl");
    }

    /// Appends a timestamped entry to `run.log`; continuation lines are indented.
    pub fn log(&mut self, at: DateTime<Utc>, text: &str) {
        let stamp = at.to_rfc3339_opts(SecondsFormat::Secs, true);
        let body = text.trim_end().replace('\n', "\n    ");
        write_line(
            &mut self.log,
            format!("{stamp} {body}"),
            &self.redactor,
            "run.log",
        );
    }

    /// Writes `summary.json` (temporary file, then rename, so it is whole or absent).
    pub fn summary(&self, summary: &Summary) -> anyhow::Result<()> {
        let text = self.redactor.redact(serde_json::to_string_pretty(summary)?);
        let tmp = self.dir.join("summary.json.tmp");
        write_private(&tmp, (text + "\n").as_bytes())
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, self.dir.join("summary.json"))
            .with_context(|| format!("writing {}/summary.json", self.dir.display()))
    }
}

fn json_line<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value)
        .unwrap_or_else(|e| format!("{{\"record_error\":{:?}}}", e.to_string()))
}

fn write_line(file: &mut File, text: String, redactor: &Redactor, name: &str) {
    let mut line = redactor.redact(text);
    line.push('\n');
    if let Err(e) = file.write_all(line.as_bytes()) {
        tracing::error!(file = name, error = %e, "cannot write a run record line");
    }
}

/// What `logs/` holds: the readable summaries, newest first, and the run
/// folders without one (a run still going, or one killed before it ended).
#[derive(Debug, Default)]
pub struct Listing {
    pub summaries: Vec<Summary>,
    pub incomplete: Vec<PathBuf>,
}

/// Reads every `logs/<task>/<run_id>/summary.json`. A missing, half-written
/// or foreign file never stops the listing: its folder is reported instead.
pub fn read_summaries(logs: &Path) -> Listing {
    let mut out = Listing::default();
    let Ok(tasks) = std::fs::read_dir(logs) else {
        return out;
    };
    for task in tasks.flatten() {
        let Ok(runs) = std::fs::read_dir(task.path()) else {
            continue;
        };
        for run in runs.flatten().filter(|r| r.path().is_dir()) {
            let path = run.path().join("summary.json");
            match std::fs::read_to_string(&path).map(|t| serde_json::from_str::<Summary>(&t)) {
                Ok(Ok(s)) => out.summaries.push(s),
                Ok(Err(e)) => {
                    tracing::debug!(path = %path.display(), error = %e, "unreadable summary");
                    out.incomplete.push(run.path());
                }
                Err(_) => out.incomplete.push(run.path()),
            }
        }
    }
    out.summaries.sort_by(|a, b| {
        b.started_at
            .cmp(&a.started_at)
            .then_with(|| b.run_id.cmp(&a.run_id))
    });
    out.incomplete.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn run_ids_are_utc_start_times_and_clashes_get_a_suffix() {
        let dir = tempfile::tempdir().unwrap();
        let t = Utc.with_ymd_and_hms(2026, 4, 9, 6, 15, 0).unwrap();
        let a = RunRecord::create(dir.path(), "scan", t, vec![]).unwrap();
        let b = RunRecord::create(dir.path(), "scan", t, vec![]).unwrap();
        assert_eq!(a.run_id, "20260409T061500Z");
        assert_eq!(b.run_id, "20260409T061500Z-2");
        assert!(
            dir.path()
                .join("scan/20260409T061500Z-2/tools.jsonl")
                .exists()
        );
    }

    #[test]
    fn secrets_never_reach_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let t = Utc.with_ymd_and_hms(2026, 4, 9, 6, 15, 0).unwrap();
        let mut r =
            RunRecord::create(dir.path(), "t", t, vec![Secret::new("nwx_topsecret")]).unwrap();
        r.log(t, "token is nwx_topsecret\nsecond line");
        let text = std::fs::read_to_string(r.dir.join("run.log")).unwrap();
        assert_eq!(text, "2026-04-09T06:15:00Z token is ***\n    second line\n");
    }

    #[test]
    fn records_are_private_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let t = Utc.with_ymd_and_hms(2026, 4, 9, 6, 15, 0).unwrap();
        // SAFETY: umask only changes this process's file-creation mask.
        let old = unsafe { libc::umask(0o000) };
        let r = RunRecord::create(dir.path(), "t", t, vec![]);
        // SAFETY: as above, restoring the previous mask.
        unsafe { libc::umask(old) };
        let r = r.unwrap();
        r.summary(&Summary {
            task: "t".into(),
            run_id: r.run_id.clone(),
            status: Status::Succeeded,
            stop_reason: StopReason::FinalAnswer,
            retryable: false,
            attempt: 1,
            turns: 0,
            tool_calls: 0,
            tool_errors: 0,
            calls_over_budget: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            total_tokens: 0,
            runpod_exec_ms: None,
            runpod_delay_ms: None,
            wall_ms: 0,
            started_at: t,
            finished_at: t,
            final_answer: None,
            error: None,
            dry_run: false,
        })
        .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&r.dir), 0o700);
        assert_eq!(mode(&dir.path().join("t")), 0o700);
        for f in [
            "conversation.jsonl",
            "tools.jsonl",
            "run.log",
            "summary.json",
        ] {
            assert_eq!(mode(&r.dir.join(f)), 0o600, "{f}");
        }
    }
}
