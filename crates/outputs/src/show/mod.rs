//! What `show` prints of one run (docs/operating.md, "Commands"): what it
//! did, where its file went, its answer and, for a run that failed or was
//! interrupted, what went wrong and what runs it again. The records are
//! hostile input: every one-line field is escaped, the log's lines too.

use super::runs::when;
use harness_base::text::{clip, one_line, printable};
use harness_base::zone::Zone;
use harness_records::{FailureDetail, ListedRun};

/// Characters of one line of `run.log`, or of the last tool error.
const LINE_CHARS: usize = 300;

/// What `show` prints of a run besides its summary, found by the caller.
pub struct Found<'a> {
    /// Where the run's task file is now.
    pub task_file: String,
    /// What runs it again, or that nothing is needed (`None`: nothing of
    /// it can run again); shown for a run that did not succeed.
    pub again: Option<String>,
    /// The last tool error and log lines of a run that did not succeed.
    pub failure: Option<&'a FailureDetail>,
    pub answer: Option<&'a str>,
}

/// What `show` prints of a run: every one-line field escaped (a line
/// break or an escape sequence in a record forges no line), then for a
/// run that did not succeed what went wrong and what runs it again, then
/// the answer as it is.
pub fn text(run: &ListedRun, zone: &Zone, found: &Found) -> String {
    let s = &run.summary;
    let one = |field: &str| printable(field).into_owned();
    let mut lines = vec![
        format!("task        {}", one(&s.task)),
        format!("run id      {}", one(&s.run_id)),
        format!(
            "status      {} ({}){}",
            s.status.as_str(),
            s.stop_reason.as_str(),
            if s.dry_run { ", a dry run" } else { "" }
        ),
    ];
    if let Some(e) = &s.error {
        lines.push(format!("error       {}", one(e)));
    }
    lines.push(format!(
        "turns       {} ({} tool call(s), {} tool error(s)), tokens {} ({} prompt + {} completion)",
        s.turns, s.tool_calls, s.tool_errors, s.total_tokens, s.prompt_tokens, s.completion_tokens
    ));
    lines.push(format!(
        "time        started {}, finished {}, {:.1} s",
        when(s.started_at, zone),
        when(s.finished_at, zone),
        s.wall_ms as f64 / 1000.0
    ));
    if let Some(slot) = &s.slot {
        lines.push(format!("slot        {} (a recurring task)", one(slot)));
    }
    if let Some(from) = &s.resumed_from {
        lines.push(format!(
            "resumed     from run {}, {} turn(s) from its records",
            one(from),
            s.resumed_turns
        ));
    }
    if !s.tool_servers_down.is_empty() {
        lines.push(format!(
            "not offered the MCP servers that were down: {}",
            one(&s.tool_servers_down.join(", "))
        ));
    }
    lines.push(format!("task file   {}", one(&found.task_file)));
    lines.push(format!(
        "records     {}",
        one(&run.dir.display().to_string())
    ));
    if let Some(failure) = found.failure {
        lines.extend(failure_lines(found.again.as_deref(), failure));
    }
    lines.push(String::new());
    match found.answer {
        Some(a) => {
            lines.push("answer:".into());
            lines.push(a.trim_end().to_string());
        }
        None => lines.push("(no answer)".into()),
    }
    lines.join("\n") + "\n"
}

/// What `show` adds for a run that failed or was interrupted: the last
/// tool error, what runs it again, and the last lines of its `run.log`,
/// each escaped and clipped to one line.
fn failure_lines(again: Option<&str>, failure: &FailureDetail) -> Vec<String> {
    let one = |field: &str| printable(&clip(field, LINE_CHARS)).into_owned();
    let mut lines = Vec::new();
    if let Some(t) = &failure.last_tool_error {
        lines.push(format!(
            "tool error  turn {}, {}: {}",
            t.turn,
            one(&t.name),
            printable(&one_line(&t.result, LINE_CHARS))
        ));
    }
    if let Some(again) = again {
        lines.push(format!("again       {}", one(again)));
    }
    for why in &failure.not_loaded {
        lines.push(format!("not read    {}", one(why)));
    }
    if !failure.log_tail.is_empty() {
        lines.push(String::new());
        lines.push(format!(
            "run.log, its last {} line(s):",
            failure.log_tail.len()
        ));
        lines.extend(failure.log_tail.iter().map(|l| format!("  {}", one(l))));
    }
    lines
}

#[cfg(test)]
mod tests;
