//! The open records of one task run: the run folder made safely, each
//! event written as it happens (`conversation.jsonl`, `tools.jsonl`,
//! `run.log`), and the files written whole at the end (`task.md`,
//! `result.json`, `summary.json`).

use super::lines::{ConversationLine, IntentLine, StartLine, ToolLine};
use harness_agent::{
    Answer, Counted, Elided, ModelAttempt, Outcome, ReplyFacts, StopReason, TaskEvent,
};
use harness_base::folder::Folder;
use harness_config::{Redactor, Secret};
use harness_tools::Tool;
use harness_wire::chat::ToolCall;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;

use anyhow::Context;
use std::path::{Path, PathBuf};

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;

use super::Summary;
use super::lines::json_line;
use super::run_id::run_id_for;

/// The `run.log` line of what was elided to fit.
pub(super) fn elided_line(e: &Elided) -> String {
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
    /// `intents.jsonl`, made at the first write call.
    intents: Option<File>,
    redactor: Redactor,
    /// The run this one resumes from (docs/resume-replay-eval.md, "Resume").
    resuming: Option<String>,
    /// The first line not answered from those records was noted in `run.log`.
    live_noted: bool,
    /// Lines written since the files were last flushed to disk.
    unsynced: bool,
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
/// name is replaced, never written through ([`Folder::replace`]).
pub fn replace_private(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    Folder::open(dir)?.replace(name, bytes, 0o600)
}

impl RunRecord {
    /// The run folder's device and inode, for the attempt state: only this
    /// folder, not one put in its place, is gone on from
    /// (docs/resume-replay-eval.md, "Resume").
    pub fn identity(&self) -> std::io::Result<(u64, u64)> {
        self.folder.identity()
    }

    /// Creates `logs/<task>/<run_id>/` (0700; its files 0600, whatever the
    /// umask: they hold private notes); a clash gets `-2`, `-3`, ….
    pub fn create(
        logs: &Path,
        task: &str,
        started: DateTime<Utc>,
        secrets: Vec<Secret>,
    ) -> anyhow::Result<RunRecord> {
        if harness_inbox::check_task_name(task).is_err() {
            anyhow::bail!("{task:?} cannot name a log folder");
        }
        // Every step below `logs/` is opened, never followed through a link
        // (anyone who can write under logs/ could have put one there), and
        // every file is made inside the opened run folder.
        let task_name = harness_inbox::fit_file_name("", task, "");
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
            intents: None,
            dir,
            run_id,
            folder,
            redactor: Redactor::new(secrets),
            resuming: None,
            live_noted: false,
            unsynced: false,
        })
    }

    /// Writes `start.json` (docs/operating.md, "Records") and, when this run
    /// goes on from another's records, notes it: the lines answered from them
    /// are marked `"resumed": true`, and `run.log` says where they end.
    pub fn start(&mut self, at: DateTime<Utc>, start: &StartLine, resumed_turns: u32) {
        let text = self.redactor.redact(json_line(start));
        if let Err(e) = self
            .folder
            .replace("start.json", (text + "\n").as_bytes(), 0o600)
        {
            tracing::error!(file = "start.json", error = %e, "cannot write a run record");
        }
        if let Some(from) = &start.resumed_from {
            self.log(
                at,
                &format!(
                    "resuming from run {from}: {resumed_turns} turn(s) recorded whole there are answered from its records, no request sent and no tool run for them"
                ),
            );
            self.resuming = Some(from.clone());
        }
    }

    /// Flushes the record lines written so far to disk: called at each turn
    /// boundary, so a power cut loses at most the turn under way.
    fn sync(&mut self) {
        if !std::mem::take(&mut self.unsynced) {
            return;
        }
        for (name, file) in [
            ("conversation.jsonl", &self.conversation),
            ("tools.jsonl", &self.tools),
        ] {
            if let Err(e) = file.sync_data() {
                tracing::warn!(file = name, error = %e, "cannot flush a run record to disk");
            }
        }
    }

    /// The first answer that did not come from the resumed records: the
    /// run log says where they ended.
    fn note_live(&mut self, at: DateTime<Utc>, what: &str) {
        if let Some(from) = self.resuming.clone()
            && !std::mem::replace(&mut self.live_noted, true)
        {
            self.log(at, &format!("the records of run {from} end here; {what}"));
        }
    }

    /// Writes what one event of the task adds to the records, stamped `at`.
    pub fn record(&mut self, at: DateTime<Utc>, event: &TaskEvent<'_>) {
        match event {
            TaskEvent::Started { task, tools } => {
                let list = Tool::list(tools);
                self.log(at, &format!("task {task} started; tools: {list}"));
            }
            TaskEvent::ContextElided { elided } => self.log(at, &elided_line(elided)),
            TaskEvent::RequestSent {
                turn,
                messages,
                prompt_tokens,
                counted,
            } => {
                self.sync();
                self.log(
                at,
                &format!(
                    "turn {turn}: request with {messages} messages, {}{prompt_tokens} prompt tokens",
                    if *counted == Counted::Exact { "" } else { "~" }
                ),
            )
            }
            TaskEvent::Attempt(a) => self.attempt(at, a),
            TaskEvent::ContextExceeded { n_prompt, n_ctx } => self.log(
                at,
                &format!(
                    "the server said the prompt ({n_prompt:?} tokens) exceeds its context ({n_ctx:?}); shrinking and retrying once"
                ),
            ),
            TaskEvent::ReplyRead(r) => self.log_reply(at, r),
            TaskEvent::AskedAgain { thinking_off, note } => self.log(
                at,
                &format!(
                    "{}; asking again with a note: {note}",
                    if *thinking_off {
                        "empty reply: thinking used up max_tokens"
                    } else {
                        "empty reply"
                    }
                ),
            ),
            TaskEvent::CallClaimed { tool, note } => self.log(
                at,
                &format!(
                    "the answer says it used {tool}, but no tool has run in this task; asking again with a note: {note}"
                ),
            ),
            TaskEvent::AnswerUnfinished { what, note } => self.log(
                at,
                &format!("the answer is no answer yet: {what}; asking again with a note: {note}"),
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
            TaskEvent::WriteIntent { turn, call } => self.intent(at, *turn, call),
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
            .map(|c| harness_tools::describe_call(&c.function.name, &c.function.arguments))
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
                harness_wire::chat::MAX_CALLS_PER_REPLY
            ));
        }
        if r.held_back > 0 {
            calls.push_str(&format!(
                "\nheld back, not run: {} more call(s) written after it (of calls written as JSON, one runs a reply)",
                r.held_back
            ));
        }
        self.log(
            at,
            &format!(
                "turn {turn}: reply ({} prompt + {} completion tokens, finish {}){cut}{recovered}{calls}",
                r.usage.prompt_tokens,
                r.usage.completion_tokens,
                harness_base::text::printable(&harness_base::text::clip(r.finish_reason.unwrap_or("-"), 32)),
                cut = if r.finish_reason == Some("length") {
                    "; CUT at max_tokens"
                } else {
                    ""
                },
            ),
        );
    }

    fn attempt(&mut self, at: DateTime<Utc>, a: &ModelAttempt<'_>) {
        let mut line = ConversationLine::of(a);
        if a.attempt.recorded && self.resuming.is_some() {
            line.resumed = true;
        } else if self.resuming.is_some() {
            self.note_live(at, &format!("turn {} is asked of the model", a.turn));
        }
        self.conversation(&line);
    }

    /// Records a write call before it is sent, and flushes it to disk.
    fn intent(&mut self, at: DateTime<Utc>, turn: u32, call: &ToolCall) {
        if self.intents.is_none() {
            match self.folder.create_file("intents.jsonl", 0o600) {
                Ok(f) => self.intents = Some(f),
                Err(e) => {
                    tracing::error!(file = "intents.jsonl", error = %e, "cannot write a run record");
                    return;
                }
            }
        }
        let line = json_line(&IntentLine {
            turn,
            call_id: call.id.clone(),
            name: call.function.name.clone(),
            arguments: call.function.arguments.clone(),
            at,
        });
        if let Some(file) = &mut self.intents {
            write_line(file, line, &self.redactor, "intents.jsonl");
            if let Err(e) = file.sync_data() {
                tracing::warn!(file = "intents.jsonl", error = %e, "cannot flush a run record to disk");
            }
        }
    }

    fn log_answer(&mut self, at: DateTime<Utc>, a: &Answer) {
        let mut line = ToolLine::of(a);
        if a.recorded && self.resuming.is_some() {
            line.resumed = true;
        } else if a.executed && self.resuming.is_some() {
            self.note_live(
                at,
                &format!(
                    "call {} of turn {} has no recorded result and runs now",
                    a.call_id, a.turn
                ),
            );
        }
        self.tool(&line);
        let mark = if a.is_error { "error" } else { "ok" };
        let short = harness_base::text::clip(&a.text, 200);
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
        self.unsynced = true;
        let text = json_line(line);
        write_line(
            &mut self.conversation,
            text,
            &self.redactor,
            "conversation.jsonl",
        );
    }

    fn tool(&mut self, line: &ToolLine) {
        self.unsynced = true;
        let text = json_line(line);
        write_line(&mut self.tools, text, &self.redactor, "tools.jsonl");
    }

    /// The task file could not be read or parsed; returns the error the
    /// summary gives.
    pub fn invalid_task(
        &mut self,
        at: DateTime<Utc>,
        path: &Path,
        problem: &dyn std::fmt::Display,
    ) -> String {
        let error = format!("invalid task {}: {problem}", path.display());
        self.log(at, &error);
        error
    }

    /// The process died on this task in every allowed attempt; returns the
    /// error the summary gives.
    pub fn killed_too_often(
        &mut self,
        at: DateTime<Utc>,
        starts: u32,
        max_attempts: u32,
    ) -> String {
        let error = format!(
            "the harness started this task {starts} times and never finished it: the process was killed each time \
             (out of memory, a crash, or SIGKILL); max_attempts = {max_attempts}, so it was not run again"
        );
        self.log(at, &error);
        error
    }

    /// The harness panicked inside the task; returns the error the summary gives.
    pub fn internal_error(&mut self, at: DateTime<Utc>, panic: &str) -> String {
        let error =
            format!("the harness failed inside this task (a bug; please report it): {panic}");
        self.log(at, &error);
        error
    }

    /// A line of its own in `run.log`.
    pub fn log_line(&mut self, at: DateTime<Utc>, text: &str) {
        self.log(at, text);
    }

    /// The run's last line: how the task ended and where its file went.
    pub fn filed(&mut self, summary: &Summary, place: &str) {
        self.log(
            summary.finished_at,
            &format!(
                "{}: {} → {place}",
                summary.status.as_str(),
                summary.stop_reason.as_str()
            ),
        );
    }

    /// Appends a timestamped entry to `run.log`; continuation lines are indented.
    pub(super) fn log(&mut self, at: DateTime<Utc>, text: &str) {
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

    /// Writes `answer.md`: the final answer as text (docs/operating.md,
    /// "Records").
    pub fn answer(&self, text: &str) -> anyhow::Result<()> {
        let mut text = self.redactor.redact_str(text).into_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        self.folder
            .replace("answer.md", text.as_bytes(), 0o600)
            .with_context(|| format!("writing {}/answer.md", self.dir.display()))
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

pub(super) fn write_line(file: &mut File, text: String, redactor: &Redactor, name: &str) {
    let mut line = redactor.redact(text);
    line.push('\n');
    if let Err(e) = file.write_all(line.as_bytes()) {
        tracing::error!(file = name, error = %e, "cannot write a run record line");
    }
}
