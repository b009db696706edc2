//! Reading run folders back (docs/untrusted-input.md). `runs`, `report` and
//! `replay` read what anyone who can write under `logs/` could have crafted, so
//! a run folder is read like any other untrusted input:
//!
//! - a run is the folder the listing walked (`logs/<task>/<run>/`, real
//!   folders only), never a path rebuilt from its summary's fields;
//! - only regular files are opened, never through a link ([`harness_base::file`]);
//! - every file has a cap, and a record over its cap is marked, not loaded;
//! - request and response bodies stay text ([`RawValue`]) and are read into
//!   typed fields, so a record of small values cannot grow into a tree many
//!   times its size; where a tree is needed, [`harness_base::http::parse_tree`]
//!   bounds it;
//! - one bad folder is reported in one line and the others are read.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::capped::{
    MAX_CONVERSATION_BYTES, MAX_SUMMARY_BYTES, MAX_TOOLS_BYTES, Record, read_record,
    read_summary_in,
};
use super::lines::failure_of;
use super::listing::ListedRun;
use super::{Summary, ToolLine};
use harness_base::file::FileError;
use harness_base::folder::{Folder, Tail};
use harness_endpoint::{Failure, JobInfo};

/// A run folder read back: everything the report and a replay need.
#[derive(Debug, Clone)]
pub struct RecordedRun {
    /// The folder the listing walked (or the one a replay was given).
    pub dir: PathBuf,
    pub summary: Summary,
    /// `task.md` when it is a regular file (never a link's target).
    pub task_file: Option<PathBuf>,
    pub task_text: Option<String>,
    pub attempts: Vec<RecordedLine>,
    pub tools: Vec<ToolLine>,
    /// Records that were not loaded, and why (over their cap, not a
    /// regular file, unreadable): shown where they would have been.
    pub not_loaded: Vec<String>,
}

/// A `conversation.jsonl` line read back. The bodies stay text.
#[derive(Debug, Clone, Deserialize)]
pub struct RecordedLine {
    pub turn: u32,
    pub attempt: u32,
    #[serde(default)]
    pub latency_ms: u64,
    pub request: Box<RawValue>,
    #[serde(default)]
    pub http_status: Option<u16>,
    #[serde(default)]
    pub response: Option<Box<RawValue>>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub error_kind: Option<String>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
    #[serde(default)]
    pub runpod: Option<JobInfo>,
    #[serde(default)]
    pub context: Option<RecordedContext>,
    /// Answered from the records of the run it resumed
    /// (docs/resume-replay-eval.md, "Resume").
    #[serde(default)]
    pub resumed: bool,
}

impl RecordedLine {
    /// How the attempt failed; an unknown name reads as a transport failure.
    pub fn failure(&self) -> Option<Failure> {
        self.error_kind
            .as_deref()
            .map(|k| failure_of(k).unwrap_or(Failure::Transport))
    }
}

/// The `context` object of a conversation line, read back.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RecordedContext {
    #[serde(default)]
    pub context_tokens: Option<u32>,
    #[serde(default)]
    pub elided_call_ids: Vec<String>,
    /// The exact counts made before the request.
    #[serde(default)]
    pub counts: Vec<u64>,
}

/// What a recorded exchange says, read into typed fields from its text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplyView {
    pub content: Option<String>,
    pub reasoning_content: Option<String>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// The reply of a recorded response: a chat completion's, or the one inside
/// a RunPod job's `output` (an object or a list of one).
pub fn reply_view(response: Option<&RawValue>) -> ReplyView {
    #[derive(Deserialize, Default)]
    struct Chat {
        #[serde(default)]
        choices: FirstOf<Choice>,
        #[serde(default)]
        usage: Option<UsageView>,
        #[serde(default)]
        output: Option<Box<RawValue>>,
    }
    #[derive(Deserialize, Default)]
    struct Choice {
        #[serde(default)]
        message: Option<MessageView>,
    }
    #[derive(Deserialize, Default)]
    struct MessageView {
        #[serde(default, deserialize_with = "harness_base::lenient::text")]
        content: Option<String>,
        #[serde(default, deserialize_with = "harness_base::lenient::text")]
        reasoning_content: Option<String>,
    }
    #[derive(Deserialize, Default)]
    struct UsageView {
        #[serde(default, deserialize_with = "harness_base::lenient::count")]
        prompt_tokens: Option<u64>,
        #[serde(default, deserialize_with = "harness_base::lenient::count")]
        completion_tokens: Option<u64>,
    }
    let read = |raw: &RawValue| -> Chat {
        let text = raw.get();
        match text.trim_start().as_bytes().first() {
            Some(b'{') => serde_json::from_str(text).unwrap_or_default(),
            Some(b'[') => serde_json::from_str::<FirstOf<Chat>>(text)
                .ok()
                .and_then(|f| f.0)
                .unwrap_or_default(),
            _ => Chat::default(),
        }
    };
    let Some(raw) = response else {
        return ReplyView::default();
    };
    let mut chat = read(raw);
    if chat.choices.0.is_none()
        && let Some(output) = chat.output.take()
    {
        let inner = read(&output);
        chat = Chat {
            usage: inner.usage.or(chat.usage),
            ..inner
        };
    }
    let message = chat.choices.0.and_then(|c| c.message).unwrap_or_default();
    let usage = chat.usage.unwrap_or_default();
    ReplyView {
        content: message.content,
        reasoning_content: message.reasoning_content,
        prompt_tokens: usage.prompt_tokens.unwrap_or(0),
        completion_tokens: usage.completion_tokens.unwrap_or(0),
    }
}

/// The first `n` messages' text of a recorded request (unwrapped from
/// RunPod's `input`): the system prompt and the task, for the report.
pub fn request_texts(request: &RawValue, n: usize) -> Vec<Option<String>> {
    #[derive(Deserialize, Default)]
    struct Request {
        #[serde(default)]
        input: Option<Box<RawValue>>,
        #[serde(default, deserialize_with = "first_two")]
        messages: Vec<MessageText>,
    }
    #[derive(Deserialize, Default)]
    struct MessageText {
        #[serde(default, deserialize_with = "harness_base::lenient::text")]
        content: Option<String>,
    }
    fn first_two<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<MessageText>, D::Error> {
        Ok(harness_base::lenient::first(d, 2)?.items)
    }
    let mut req: Request = serde_json::from_str(request.get()).unwrap_or_default();
    if let Some(input) = req.input.take() {
        req = serde_json::from_str(input.get()).unwrap_or_default();
    }
    (0..n)
        .map(|i| req.messages.get(i).and_then(|m| m.content.clone()))
        .collect()
}

/// A list's first item, the rest parsed past.
#[derive(Default)]
struct FirstOf<T>(Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for FirstOf<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(FirstOf(
            harness_base::lenient::first(d, 1)?.items.into_iter().next(),
        ))
    }
}

/// Reads a run folder given by its path (`replay RUN_DIR`): the folder
/// itself may not be a link. `Err` when its summary cannot be read; a
/// record over its cap or of the wrong kind is named in `not_loaded`.
pub fn read_run(dir: &Path) -> Result<RecordedRun, String> {
    let folder = Folder::open(dir)
        .map_err(|e| format!("{}: not a folder, or a link to one ({e})", dir.display()))?;
    read_run_in(&folder, dir)
}

/// Reads a listed run again, from the opened logs folder down, one real
/// folder at a time: a folder renamed or linked since the listing is not
/// followed.
pub fn read_listed(logs: &Folder, run: &ListedRun) -> Result<RecordedRun, String> {
    let folder = logs
        .sub(&run.task_dir)
        .and_then(|task| task.sub(&run.run_dir))
        .map_err(|e| format!("{}: {e}", run.dir.display()))?;
    read_run_in(&folder, &run.dir)
}

/// A listed run's answer as `show` prints it (docs/operating.md, "Commands"):
/// `result.json` pretty-printed for a structured answer, else `answer.md`, else
/// the summary's `final_answer`. Read like every record: capped, never through
/// a link.
pub fn answer_of(logs: &Folder, run: &ListedRun) -> Option<String> {
    let folder = logs
        .sub(&run.task_dir)
        .and_then(|t| t.sub(&run.run_dir))
        .ok()?;
    if run.summary.schema_checked
        && let Record::Text(text) = read_record(&folder, "result.json", MAX_SUMMARY_BYTES)
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(&text)
    {
        return serde_json::to_string_pretty(&value).ok();
    }
    match read_record(&folder, "answer.md", MAX_SUMMARY_BYTES) {
        Record::Text(text) => Some(text),
        _ => run.summary.final_answer.clone(),
    }
}

/// What `show` says of a run that did not succeed (docs/operating.md, "The
/// morning after"), from its records: the last tool call that failed and
/// the last lines of its `run.log`. Read like every record — capped, never
/// through a link — and leniently: a line that is cut short or not a tool
/// line is passed over, and of `run.log` only its last [`MAX_LOG_TAIL_BYTES`]
/// are read, however long it grew.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailureDetail {
    pub last_tool_error: Option<ToolError>,
    /// At most the number of lines asked for, oldest first.
    pub log_tail: Vec<String>,
    /// Records that could not be read, and why, one line each.
    pub not_loaded: Vec<String>,
}

/// A tool call that failed, as `tools.jsonl` has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    pub turn: u32,
    pub name: String,
    /// What the model was told.
    pub result: String,
}

/// How much of the end of `run.log` [`failure_detail`] reads.
pub const MAX_LOG_TAIL_BYTES: u64 = 64 * 1024;

/// The [`FailureDetail`] of a listed run, with the last `lines` lines of
/// its `run.log`.
pub fn failure_detail(logs: &Folder, run: &ListedRun, lines: usize) -> FailureDetail {
    let mut detail = FailureDetail::default();
    let folder = match logs.sub(&run.task_dir).and_then(|t| t.sub(&run.run_dir)) {
        Ok(folder) => folder,
        Err(e) => {
            detail
                .not_loaded
                .push(format!("{}: {e}", run.dir.display()));
            return detail;
        }
    };
    match read_record(&folder, "tools.jsonl", MAX_TOOLS_BYTES) {
        Record::Text(text) => {
            detail.last_tool_error = text
                .lines()
                .rev()
                .filter_map(|l| serde_json::from_str::<ToolLine>(l).ok())
                .find(|t| t.is_error)
                .map(|t| ToolError {
                    turn: t.turn,
                    name: t.name,
                    result: t.result,
                });
        }
        Record::Absent => {}
        Record::Refused(why) => detail.not_loaded.push(why),
    }
    match folder.read_tail("run.log", MAX_LOG_TAIL_BYTES) {
        Ok(tail) => detail.log_tail = last_lines(&tail, lines),
        Err(FileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => detail.not_loaded.push(format!("run.log: {e}")),
    }
    detail
}

/// The last `n` lines of a file's tail that are not blank; when the tail
/// is not the whole file, its first line (most likely cut) is left out.
fn last_lines(tail: &Tail, n: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(&tail.bytes);
    let whole = if tail.cut {
        text.split_once('\n').map_or("", |(_, rest)| rest)
    } else {
        &text
    };
    let kept: Vec<&str> = whole.lines().filter(|l| !l.trim().is_empty()).collect();
    kept[kept.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

fn read_run_in(folder: &Folder, dir: &Path) -> Result<RecordedRun, String> {
    let summary = read_summary_in(folder, dir)?;
    let mut not_loaded = Vec::new();
    let task_text = match read_record(folder, "task.md", harness_inbox::MAX_TASK_BYTES) {
        Record::Text(text) => Some(text),
        Record::Absent => None,
        Record::Refused(why) => {
            not_loaded.push(why);
            None
        }
    };
    let task_file = task_text.as_ref().map(|_| dir.join("task.md"));
    let attempts = read_lines(
        folder,
        dir,
        "conversation.jsonl",
        MAX_CONVERSATION_BYTES,
        &mut not_loaded,
    )?;
    let tools = read_lines(folder, dir, "tools.jsonl", MAX_TOOLS_BYTES, &mut not_loaded)?;
    Ok(RecordedRun {
        dir: dir.to_path_buf(),
        summary,
        task_file,
        task_text,
        attempts,
        tools,
        not_loaded,
    })
}

/// The typed lines of a JSONL record: `Err` names the first line that is
/// not one; a file that cannot be loaded is noted and reads as empty.
fn read_lines<T: serde::de::DeserializeOwned>(
    folder: &Folder,
    dir: &Path,
    name: &str,
    cap: u64,
    not_loaded: &mut Vec<String>,
) -> Result<Vec<T>, String> {
    let text = match read_record(folder, name, cap) {
        Record::Text(text) => text,
        Record::Absent => return Ok(Vec::new()),
        Record::Refused(why) => {
            not_loaded.push(why);
            return Ok(Vec::new());
        }
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| format!("{}/{name}:{}: {e}", dir.display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_from_either_envelope_without_trees() {
        let raw = |s: &str| RawValue::from_string(s.to_string()).unwrap();
        let chat = raw(
            r#"{"choices":[{"message":{"content":"hi","reasoning_content":"hm"}},{"x":[1,2]}],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
        );
        let v = reply_view(Some(&chat));
        assert_eq!(
            (
                v.content.as_deref(),
                v.reasoning_content.as_deref(),
                v.prompt_tokens,
                v.completion_tokens
            ),
            (Some("hi"), Some("hm"), 5, 2)
        );
        let job = raw(
            r#"{"id":"j","status":"COMPLETED","output":[{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":1}}]}"#,
        );
        let v = reply_view(Some(&job));
        assert_eq!((v.content.as_deref(), v.prompt_tokens), (Some("ok"), 1));
        for odd in [
            r#""text""#,
            "null",
            "[]",
            r#"{"choices":5}"#,
            r#"{"choices":[{"message":{"content":{"a":[1]}}}]}"#,
        ] {
            assert_eq!(reply_view(Some(&raw(odd))).content, None, "{odd}");
        }
        let request = raw(
            r#"{"input":{"messages":[{"role":"system","content":"S"},{"role":"user","content":"T"},{"x":1}]}}"#,
        );
        assert_eq!(
            request_texts(&request, 2),
            [Some("S".to_string()), Some("T".to_string())]
        );
    }
}
