//! Run records (SPEC §8): `logs/<task>/<run_id>/` with `conversation.jsonl`
//! (every request attempt, raw), `tools.jsonl` (every tool call), `run.log`
//! (a human-readable trace, thinking included) and `summary.json`.
//!
//! Each line is written with one `write` call as it happens, so a killed run
//! still leaves whole, parseable lines. Every line passes through the
//! redactor first: no secret value reaches a record, whatever produced it.

pub mod metrics;
pub mod report;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::expect::Verdict;
use crate::agent::{
    Answer, AttemptFailure, Counted, Elided, ModelAttempt, Outcome, ReplyFacts, StopReason,
    TaskEvent,
};
use crate::base::file::Folder;
use crate::config::{Redactor, Secret};
use crate::tools::ToolName;

mod read;
pub use read::*;

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Succeeded,
    Failed,
    Interrupted,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Interrupted => "interrupted",
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
    /// One verdict per `[expect]` key, for a task that has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expectations: Option<Vec<Verdict>>,
    /// `<task>/<run_id>` of the recorded run this one replays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
    /// The final answer was checked against an output schema (and `result.json` written).
    #[serde(default)]
    pub schema_checked: bool,
    /// The `[agents.NAME]` profile the task ran as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// One line of `conversation.jsonl`: one HTTP attempt of a model call.
#[derive(Debug, Clone, Serialize)]
pub struct ConversationLine<'a> {
    pub turn: u32,
    pub attempt: u32,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub latency_ms: u64,
    /// The body sent (for RunPod, the `{"input": …}` envelope).
    pub request: &'a Value,
    pub http_status: Option<u16>,
    /// The raw response body: JSON when it parsed, else a string.
    pub response: Option<&'a crate::base::http::RawBody>,
    pub error: Option<&'a str>,
    /// The reply's `finish_reason`: `length` marks a reply cut at `max_tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<&'a str>,
    /// How the attempt failed: `transport`, `status`, `job_failed`,
    /// `job_ended`, `bad_body`, `too_large`, `wall_clock`, `interrupted`,
    /// `not_recorded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runpod: Option<JobLine<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextLine<'a>>,
}

/// The `runpod` object of a conversation line.
#[derive(Debug, Clone, Serialize)]
pub struct JobLine<'a> {
    pub job_id: Option<&'a str>,
    pub status: Option<&'a str>,
    #[serde(rename = "delayTime")]
    pub delay_time: Option<u64>,
    #[serde(rename = "executionTime")]
    pub execution_time: Option<u64>,
    /// Status polls made after `/runsync` returned a pending job.
    pub polls: u32,
}

/// The `context` object of a conversation line.
#[derive(Debug, Clone, Serialize)]
pub struct ContextLine<'a> {
    /// The context window managed (`[limits] context_tokens`, or the server's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u32>,
    /// Prompt tokens of the request as sent, as `counted` says.
    pub prompt_tokens: u64,
    /// `exact` (the server's template and tokenizer) or `estimated`.
    pub counted: &'static str,
    /// The harness's own estimate, before any count.
    pub estimated_prompt_tokens: u64,
    /// Every exact count made before this request (several when eliding
    /// took more than one round).
    #[serde(skip_serializing_if = "<[u64]>::is_empty")]
    pub counts: &'a [u64],
    /// `context_tokens − max_tokens`, when the context is managed.
    pub budget: Option<u64>,
    /// Tool results whose bodies were replaced by a placeholder before this request.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub elided_call_ids: &'a [String],
    /// Assistant turns whose replayed thinking was dropped before this request.
    #[serde(skip_serializing_if = "is_zero")]
    pub elided_reasoning: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The `run.log` line of what was elided to fit.
fn elided_line(e: &Elided) -> String {
    let mut parts = Vec::new();
    if e.reasoning > 0 {
        parts.push(format!("the thinking of {} turn(s)", e.reasoning));
    }
    if !e.call_ids.is_empty() {
        parts.push(format!(
            "the bodies of {} old tool result(s) to fit: {}",
            e.call_ids.len(),
            e.call_ids.join(", ")
        ));
    }
    format!("context: removed {}", parts.join(" and "))
}

/// The record's name for how a prompt was counted.
pub fn counted_name(c: Counted) -> &'static str {
    match c {
        Counted::Exact => "exact",
        Counted::Estimated => "estimated",
    }
}

impl<'a> ConversationLine<'a> {
    pub fn of(a: &'a ModelAttempt<'a>) -> Self {
        ConversationLine {
            turn: a.turn,
            attempt: a.attempt,
            started_at: a.started_at,
            finished_at: a.finished_at,
            latency_ms: a.latency_ms,
            request: a.request,
            http_status: a.http_status,
            response: a.response,
            error: a.error.as_deref(),
            finish_reason: a.finish_reason,
            error_kind: a.failure.map(failure_name),
            retry_after_ms: a.retry_after_ms,
            runpod: a.job.map(|j| JobLine {
                job_id: j.id,
                status: j.status,
                delay_time: j.delay_ms,
                execution_time: j.execution_ms,
                polls: j.polls,
            }),
            context: a.context.map(|c| ContextLine {
                context_tokens: c.window,
                prompt_tokens: c.prompt_tokens,
                counted: counted_name(c.counted),
                estimated_prompt_tokens: c.estimated_prompt_tokens,
                counts: &c.counts,
                budget: c.budget,
                elided_call_ids: &c.elided.call_ids,
                elided_reasoning: c.elided.reasoning,
            }),
        }
    }
}

/// The names of [`AttemptFailure`] in `conversation.jsonl`'s `error_kind`.
const FAILURE_NAMES: &[(AttemptFailure, &str)] = &[
    (AttemptFailure::Transport, "transport"),
    (AttemptFailure::Status, "status"),
    (AttemptFailure::JobFailed, "job_failed"),
    (AttemptFailure::JobEnded, "job_ended"),
    (AttemptFailure::BadBody, "bad_body"),
    (AttemptFailure::TooLarge, "too_large"),
    (AttemptFailure::WallClock, "wall_clock"),
    (AttemptFailure::Interrupted, "interrupted"),
    (AttemptFailure::NotRecorded, "not_recorded"),
];

fn failure_name(f: AttemptFailure) -> &'static str {
    FAILURE_NAMES
        .iter()
        .find(|(k, _)| *k == f)
        .map_or("unknown", |(_, n)| n)
}

fn failure_of(name: &str) -> Option<AttemptFailure> {
    FAILURE_NAMES
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(k, _)| *k)
}

/// One line of `tools.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolLine {
    pub turn: u32,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    /// The result as the model got it.
    pub result: String,
    pub is_error: bool,
    pub duration_ms: u64,
    pub original_chars: usize,
    pub returned_chars: usize,
    /// False when the call was answered without running the tool (invalid,
    /// repeated, cut off, over a budget; dry-run writes are still "executed" as intents).
    pub executed: bool,
    /// The call was written as text and recovered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recovered: bool,
    /// How many times this exact call (name + arguments) has been asked for in the task.
    pub repeat: u32,
    /// Kept as text when read back: a crafted record cannot grow into a tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<serde_json::value::RawValue>>,
}

impl ToolLine {
    pub fn of(a: &Answer) -> Self {
        ToolLine {
            turn: a.turn,
            call_id: a.call_id.clone(),
            name: a.name.clone(),
            arguments: a.arguments.clone(),
            result: a.text.clone(),
            is_error: a.is_error,
            duration_ms: a.duration_ms,
            original_chars: a.original_chars,
            returned_chars: a.returned_chars,
            executed: a.executed,
            recovered: a.recovered,
            repeat: a.repeat,
            detail: a
                .detail
                .as_ref()
                .and_then(|d| serde_json::value::to_raw_value(d).ok()),
        }
    }
}

/// The open record files of one task run.
#[derive(Debug)]
pub struct RunRecord {
    pub dir: PathBuf,
    pub run_id: String,
    /// The run folder, opened: every later write lands in it.
    folder: Folder,
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

/// Replaces `dir/name` with `bytes`, readable by its owner only (0600):
/// through a new temporary file and a rename, so a link planted at the
/// name is replaced, never written through ([`crate::base::file::replace`]).
pub fn replace_private(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    crate::base::file::replace(dir, name, bytes, 0o600)
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
        if crate::inbox::check_task_name(task).is_err() {
            anyhow::bail!("{task:?} cannot name a log folder");
        }
        // Every step below `logs/` is opened, never followed through a link
        // (anyone who can write under logs/ could have put one there), and
        // every file is made inside the opened run folder.
        let task_name = crate::inbox::fit_file_name("", task, "");
        let task_dir = logs.join(&task_name);
        create_private_dir(logs).with_context(|| format!("creating {}", logs.display()))?;
        let task_folder = Folder::open_root(logs)
            .and_then(|root| root.sub_or_create(&task_name, 0o700))
            .with_context(|| {
                format!(
                    "opening the log folder {} (a symbolic link there is not followed)",
                    task_dir.display()
                )
            })?;
        let base = run_id_for(started);
        let mut n = 1;
        let (dir, run_id, folder) = loop {
            let run_id = if n == 1 {
                base.clone()
            } else {
                format!("{base}-{n}")
            };
            let dir = task_dir.join(&run_id);
            match task_folder.create_sub(&run_id, 0o700) {
                Ok(folder) => break (dir, run_id, folder),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
                Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
            }
        };
        let open = |name: &str| -> anyhow::Result<File> {
            // The folder is new: a file already there was planted.
            folder
                .create_file(name, 0o600)
                .with_context(|| format!("creating {}/{name}", dir.display()))
        };
        Ok(RunRecord {
            conversation: open("conversation.jsonl")?,
            tools: open("tools.jsonl")?,
            log: open("run.log")?,
            dir,
            run_id,
            folder,
            redactor: Redactor::new(secrets),
        })
    }

    /// Writes what one event of the task adds to the records, stamped `at`.
    pub fn record(&mut self, at: DateTime<Utc>, event: &TaskEvent<'_>) {
        match event {
            TaskEvent::Started { task, tools } => {
                let list = ToolName::list(tools);
                self.log(at, &format!("task {task} started; tools: {list}"));
            }
            TaskEvent::ContextElided { elided } => self.log(at, &elided_line(elided)),
            TaskEvent::RequestSent {
                turn,
                messages,
                prompt_tokens,
                counted,
            } => self.log(
                at,
                &format!(
                    "turn {turn}: request with {messages} messages, {}{prompt_tokens} prompt tokens",
                    if *counted == Counted::Exact { "" } else { "~" }
                ),
            ),
            TaskEvent::Attempt(a) => self.conversation(&ConversationLine::of(a)),
            TaskEvent::ContextExceeded { n_prompt, n_ctx } => self.log(
                at,
                &format!(
                    "the server said the prompt ({n_prompt:?} tokens) exceeds its context ({n_ctx:?}); shrinking and retrying once"
                ),
            ),
            TaskEvent::ReplyRead(r) => self.log_reply(at, r),
            TaskEvent::AskedAgain { thinking_off } => self.log(
                at,
                if *thinking_off {
                    "empty reply: thinking used up max_tokens; asking again with thinking off"
                } else {
                    "empty reply; asking again"
                },
            ),
            TaskEvent::AnswerCut => self.log(
                at,
                "the answer was CUT at max_tokens (finish_reason length); asking once more for the complete answer, shorter, with thinking off",
            ),
            TaskEvent::AnswerRejected { errors } => self.log(
                at,
                &format!(
                    "the answer does not match the output schema:\n- {}\nasking once more, with the schema as response_format and no tools",
                    errors.join("\n- ")
                ),
            ),
            TaskEvent::ToolAnswered(a) => self.log_answer(at, a),
            TaskEvent::Stopped(outcome) => self.log_stop(at, outcome),
        }
    }

    fn log_reply(&mut self, at: DateTime<Utc>, r: &ReplyFacts<'_>) {
        let turn = r.turn;
        if let Some(t) = r.thinking {
            self.log(at, &format!("turn {turn}: thinking:\n{t}"));
        }
        let calls: Vec<String> = r
            .calls
            .iter()
            .map(|c| crate::tools::describe_call(&c.function.name, &c.function.arguments))
            .collect();
        let recovered = if r.recovered {
            "; tool calls recovered from text"
        } else {
            ""
        };
        let mut calls = if calls.is_empty() {
            String::new()
        } else {
            format!("; calls:\n{}", calls.join("\n"))
        };
        if r.unread_calls > 0 {
            calls.push_str(&format!(
                "\n{} more calls past the {} a reply may hold were not read",
                r.unread_calls,
                crate::wire::chat::MAX_CALLS_PER_REPLY
            ));
        }
        self.log(
            at,
            &format!(
                "turn {turn}: reply ({} prompt + {} completion tokens, finish {}){cut}{recovered}{calls}",
                r.usage.prompt_tokens,
                r.usage.completion_tokens,
                crate::base::text::printable(&crate::base::text::clip(r.finish_reason.unwrap_or("-"), 32)),
                cut = if r.finish_reason == Some("length") {
                    "; CUT at max_tokens"
                } else {
                    ""
                },
            ),
        );
    }

    fn log_answer(&mut self, at: DateTime<Utc>, a: &Answer) {
        self.tool(&ToolLine::of(a));
        let mark = if a.is_error { "error" } else { "ok" };
        let short = crate::base::text::clip(&a.text, 200);
        self.log(
            at,
            &format!("tool {} [{}] {mark}: {short}", a.name, a.call_id),
        );
    }

    fn log_stop(&mut self, at: DateTime<Utc>, o: &Outcome) {
        if let (StopReason::FinalAnswer, Some(answer)) = (o.stop, &o.final_answer) {
            self.log(at, &format!("final answer:\n{answer}"));
        }
        if let Some(e) = &o.error {
            self.log(at, &format!("stopped: {}: {e}", o.stop.as_str()));
        }
    }

    fn conversation(&mut self, line: &ConversationLine<'_>) {
        let text = json_line(line);
        write_line(
            &mut self.conversation,
            text,
            &self.redactor,
            "conversation.jsonl",
        );
    }

    fn tool(&mut self, line: &ToolLine) {
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

    /// Keeps the task file as it was read (`task.md`), so the run can be replayed.
    pub fn task_file(&self, text: &str) {
        let text = self.redactor.redact_str(text);
        if let Err(e) = self.folder.replace("task.md", text.as_bytes(), 0o600) {
            tracing::error!(file = "task.md", error = %e, "cannot write a run record");
        }
    }

    /// Writes `result.json`: a final answer that matched its output schema.
    pub fn result(&self, value: &Value) -> anyhow::Result<()> {
        let text = self.redactor.redact(serde_json::to_string_pretty(value)?);
        self.folder
            .replace("result.json", (text + "\n").as_bytes(), 0o600)
            .with_context(|| format!("writing {}/result.json", self.dir.display()))
    }

    /// Writes `summary.json` (a new temporary file, then a rename, so it is
    /// whole or absent and never written through a link).
    pub fn summary(&self, summary: &Summary) -> anyhow::Result<()> {
        let text = self.redactor.redact(serde_json::to_string_pretty(summary)?);
        self.folder
            .replace("summary.json", (text + "\n").as_bytes(), 0o600)
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use std::os::unix::fs::PermissionsExt;

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
            expectations: None,
            replay_of: None,
            schema_checked: false,
            agent: None,
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
