//! What a notification says (docs/operating.md, "Notify"): the ping's last
//! status lines and a failed run's result — `on_failure_url`'s JSON, or the
//! same facts as text (`on_failure_format`, the failure mail) or as Slack's
//! `{"text": …}` — in the harness's own words: a task's error as
//! `Summary::error_in_own_words` says it, the model's text never quoted, at
//! most 50 tasks named, then how many more — within their caps.
//!
//! Every text taken from the run is redacted first, then clipped, then its
//! control characters escaped ([`Words`]): the redactor always sees a
//! secret whole. Slack's escaping comes after, then the JSON.

use serde::Serialize;

use harness_base::text::MAX_ERROR_CHARS;
use harness_config::{FailureFormat, Redactor};
use harness_drain::{RunEnd, RunOutcome};
use harness_records::{Status, Summary};

/// `on_failure_url`'s body's cap.
const MAX_REPORT_BYTES: usize = 64 * 1024;
/// Tasks (and problems) a body names; the rest are counted.
const MAX_NAMED: usize = 50;
/// Characters of a task's name (a file name's most) or a run id.
const MAX_NAME_CHARS: usize = 255;

/// `on_failure_url`'s body.
#[derive(Debug, Serialize)]
struct FailureReport {
    exit_code: u8,
    started_at: chrono::DateTime<chrono::Utc>,
    duration_secs: f64,
    succeeded: usize,
    failed: usize,
    left_in_inbox: usize,
    setup_fault: Option<String>,
    problems: Vec<String>,
    /// Problems past the first 50.
    more_problems: usize,
    failed_tasks: Vec<FailedTask>,
    /// Tasks that did not succeed past the first 50.
    more_failed_tasks: usize,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct FailedTask {
    task: String,
    run_id: String,
    status: Status,
    stop_reason: &'static str,
    error: Option<String>,
}

/// How a body's words are made of the run's texts: each redacted, then
/// clipped, then escaped.
#[derive(Clone, Copy)]
pub(super) struct Words<'a>(pub(super) &'a Redactor);

impl Words<'_> {
    /// `text` on one line: redacted, at most `max` characters, control
    /// characters escaped.
    fn line(self, text: &str, max: usize) -> String {
        self.0.line(text, max)
    }

    /// A task's error in the harness's own words, on one line.
    fn error(self, s: &Summary) -> Option<String> {
        s.error_in_own_words()
            .map(|e| self.line(&e, MAX_ERROR_CHARS))
    }
}

/// The first lines of `text` that fit in `max` bytes, then how many more
/// were left out (a first line longer than that is cut).
pub(super) fn whole_lines(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    // Room for the count of what is left out.
    let room = max.saturating_sub(40);
    let all: Vec<&str> = text.lines().collect();
    let mut kept = String::new();
    let mut n = 0;
    while let Some(line) = all.get(n) {
        if kept.len() + line.len() + 1 > room {
            if n == 0 {
                kept.push_str(harness_base::text::prefix_bytes(line, room));
                kept.push('\n');
                n = 1;
            }
            break;
        }
        kept.push_str(line);
        kept.push('\n');
        n += 1;
    }
    kept.push_str(&format!("and {} more line(s)", all.len() - n));
    kept
}

/// The tasks that did not succeed, the first [`MAX_NAMED`] of them, and
/// how many more.
fn not_succeeded(end: &RunEnd) -> (Vec<&Summary>, usize) {
    let all: Vec<&Summary> = end
        .summaries
        .iter()
        .filter(|s| s.status != Status::Succeeded)
        .collect();
    let more = all.len().saturating_sub(MAX_NAMED);
    (all.into_iter().take(MAX_NAMED).collect(), more)
}

/// What a run said of itself as it ended, redacted: its tally's lines (or
/// why it did not get to its tasks).
pub(super) fn status_lines(end: &RunEnd, redactor: &Redactor) -> String {
    let said = match &end.result {
        Ok(RunOutcome::Finished(tally)) => {
            // A setup fault in the harness's words: the server's may quote
            // the request.
            let mut own = tally.clone();
            own.setup_fault = own
                .setup_fault
                .map(|f| harness_config::setup::in_own_words(&f).to_string());
            own.describe(end.duration)
        }
        Ok(RunOutcome::Locked { .. }) => "another run holds the lock; nothing to do".into(),
        Ok(RunOutcome::Unreachable { why, left }) => {
            format!(
                "the endpoint is unreachable, no task was touched ({left} left in the inbox): {why}"
            )
        }
        Err(e) => format!("{e:#}"),
    };
    redactor.redact(said)
}

/// What a run's end says, for a ping's body: its status lines, then a
/// line for each task that did not succeed (50 at most, then how many
/// more).
pub(super) fn last_lines(end: &RunEnd, words: Words<'_>) -> String {
    let mut lines = vec![status_lines(end, words.0)];
    let (named, more) = not_succeeded(end);
    for s in named {
        lines.push(format!(
            "{}: {} ({}): {}",
            words.line(&s.task, MAX_NAME_CHARS),
            s.status.as_str(),
            s.stop_reason.as_str(),
            words.error(s).unwrap_or_else(|| "-".into())
        ));
    }
    if more > 0 {
        lines.push(format!("and {more} more"));
    }
    lines.join("\n")
}

/// A failed run's result, as `on_failure_url` wants it (`format`), with
/// its content type.
pub(super) fn failure_body(
    format: FailureFormat,
    code: u8,
    end: &RunEnd,
    words: Words<'_>,
) -> (String, &'static str) {
    match format {
        FailureFormat::Json => (failure_report(code, end, words), "application/json"),
        FailureFormat::Text => (failure_text(code, end, words), "text/plain; charset=utf-8"),
        FailureFormat::Slack => (
            serde_json::json!({ "text": slack(&failure_text(code, end, words)) }).to_string(),
            "application/json",
        ),
    }
}

/// `text` as Slack-style webhooks read it, calling nobody: `&`, `<` and
/// `>` as the entities Slack asks for (`<!channel>` would call everyone),
/// and every `@` followed by a WORD JOINER (U+2060), which Mattermost and
/// Rocket.Chat do not read as part of a mention (`@channel`, `@all`,
/// `@here`, a user's name).
fn slack(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('@', "@\u{2060}")
}

/// The facts of a failed run's result, whole, in `words`.
fn report(code: u8, end: &RunEnd, words: Words<'_>) -> FailureReport {
    let tally = match &end.result {
        Ok(RunOutcome::Finished(t)) => Some(t),
        _ => None,
    };
    let unreached = match &end.result {
        Ok(RunOutcome::Unreachable { left, .. }) => *left,
        _ => 0,
    };
    let (named, more_failed_tasks) = not_succeeded(end);
    let problems = tally.map_or(&[][..], |t| t.problems.as_slice());
    FailureReport {
        exit_code: code,
        started_at: end.started,
        duration_secs: end.duration.as_secs_f64(),
        succeeded: tally.map_or(0, |t| t.succeeded),
        failed: tally.map_or(0, |t| t.failed),
        left_in_inbox: tally.map_or(unreached, |t| t.retry_later + t.interrupted + t.not_started),
        setup_fault: tally
            .and_then(|t| t.setup_fault.as_deref())
            .map(|f| words.line(harness_config::setup::in_own_words(f), MAX_ERROR_CHARS)),
        problems: problems
            .iter()
            .take(MAX_NAMED)
            .map(|p| words.line(p, MAX_ERROR_CHARS))
            .collect(),
        more_problems: problems.len().saturating_sub(MAX_NAMED),
        failed_tasks: named
            .into_iter()
            .map(|s| FailedTask {
                task: words.line(&s.task, MAX_NAME_CHARS),
                run_id: words.line(&s.run_id, MAX_NAME_CHARS),
                status: s.status,
                stop_reason: s.stop_reason.as_str(),
                error: words.error(s),
            })
            .collect(),
        more_failed_tasks,
        error: match &end.result {
            Err(e) => Some(words.line(&format!("{e:#}"), MAX_ERROR_CHARS)),
            Ok(RunOutcome::Unreachable { why, .. }) => Some(words.line(
                &format!("the endpoint is unreachable: {why}"),
                MAX_ERROR_CHARS,
            )),
            _ => None,
        },
    }
}

/// `on_failure_url`'s body as JSON, at most [`MAX_REPORT_BYTES`].
pub(super) fn failure_report(code: u8, end: &RunEnd, words: Words<'_>) -> String {
    let mut report = report(code, end, words);
    loop {
        let body = serde_json::to_string(&report).unwrap_or_default();
        if body.len() <= MAX_REPORT_BYTES
            || (report.failed_tasks.is_empty() && report.problems.is_empty())
        {
            return body;
        }
        // Names that long (255 bytes each) are an attack: fewer of them.
        let keep = report.failed_tasks.len() / 2;
        report.more_failed_tasks += report.failed_tasks.len() - keep;
        report.failed_tasks.truncate(keep);
        let keep = report.problems.len() / 2;
        report.more_problems += report.problems.len() - keep;
        report.problems.truncate(keep);
    }
}

/// The same facts as [`failure_report`], as lines a person reads (the
/// failure mail, `on_failure_format = "text"`), whole lines within
/// [`MAX_REPORT_BYTES`].
pub(super) fn failure_text(code: u8, end: &RunEnd, words: Words<'_>) -> String {
    let r = report(code, end, words);
    let mut lines = vec![format!(
        "agent-harness run exited {}: {} succeeded, {} failed, {} left in the inbox (started {}, {:.1} s)",
        r.exit_code,
        r.succeeded,
        r.failed,
        r.left_in_inbox,
        r.started_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        r.duration_secs
    )];
    if let Some(fault) = &r.setup_fault {
        lines.push(format!("setup fault: {fault}"));
    }
    if let Some(error) = &r.error {
        lines.push(format!("error: {error}"));
    }
    if !r.problems.is_empty() {
        lines.push("problems:".into());
        lines.extend(r.problems.iter().map(|p| format!("- {p}")));
        if r.more_problems > 0 {
            lines.push(format!("- and {} more", r.more_problems));
        }
    }
    if !r.failed_tasks.is_empty() {
        lines.push("tasks that did not succeed:".into());
        for t in &r.failed_tasks {
            lines.push(format!(
                "- {} (run {}): {} ({}): {}",
                t.task,
                t.run_id,
                t.status.as_str(),
                t.stop_reason,
                t.error.as_deref().unwrap_or("-")
            ));
        }
        if r.more_failed_tasks > 0 {
            lines.push(format!("- and {} more", r.more_failed_tasks));
        }
    }
    whole_lines(&(lines.join("\n") + "\n"), MAX_REPORT_BYTES)
}

#[cfg(test)]
mod tests {
    use harness_agent::StopReason;
    use harness_config::Secret;
    use harness_drain::Tally;

    use super::*;

    /// A run whose one task failed with `error` (stop reason `max_turns`,
    /// whose error is the harness's own).
    fn failed_run(task: &str, error: &str) -> RunEnd {
        let at = chrono::DateTime::parse_from_rfc3339("2026-04-09T06:15:00Z")
            .unwrap()
            .to_utc();
        let mut s = Summary::blank(task, "20260409T061500Z", at);
        s.status = Status::Failed;
        s.stop_reason = StopReason::MaxTurns;
        s.error = Some(error.into());
        RunEnd {
            result: Ok(RunOutcome::Finished(Tally {
                failed: 1,
                ..Tally::default()
            })),
            started: at,
            duration: std::time::Duration::from_secs(1),
            summaries: vec![s],
            ignored: None,
            servers_up: Vec::new(),
            budget: None,
        }
    }

    const SECRET: &str = "pa<ss&word-SECRET42";

    #[test]
    fn a_secret_is_redacted_before_slack_escapes_it_or_a_clip_cuts_it() {
        let redactor = Redactor::new(vec![Secret::new(SECRET)]);
        let words = Words(&redactor);
        // Whole in the error, and cut by the clip at 300 characters.
        for error in [
            format!("the tool said {SECRET} twice"),
            format!("{}{SECRET}", "x".repeat(290)),
        ] {
            let end = failed_run("t", &error);
            for format in [
                FailureFormat::Json,
                FailureFormat::Text,
                FailureFormat::Slack,
            ] {
                let (body, _) = failure_body(format, 1, &end, words);
                for part in ["SECRET", "pa&lt;ss", "pa<ss", "ss&amp;word", "ss&word"] {
                    assert!(!body.contains(part), "{format:?}: {body}");
                }
                assert!(body.contains("***"), "{format:?}: {body}");
            }
            let ping = last_lines(&end, words);
            assert!(!ping.contains("SECRET") && ping.contains("***"), "{ping}");
        }
    }

    #[test]
    fn slack_calls_nobody_and_every_format_escapes_a_name() {
        let redactor = Redactor::default();
        let words = Words(&redactor);
        let end = failed_run("@channel", "ping @here and <!everyone> & \u{1b}[2J");
        let (body, _) = failure_body(FailureFormat::Slack, 1, &end, words);
        let text = serde_json::from_str::<serde_json::Value>(&body).unwrap()["text"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            text.contains("- @\u{2060}channel (run 20260409T061500Z): failed (max_turns): ping @\u{2060}here and &lt;!everyone&gt; &amp; \\u{1b}[2J"),
            "{text}"
        );
        assert!(
            !text.contains("@channel") && !text.contains("@here"),
            "{text}"
        );
        // A name from the run is escaped in every format.
        let end = failed_run("bell\u{7}", "x");
        for format in [
            FailureFormat::Json,
            FailureFormat::Text,
            FailureFormat::Slack,
        ] {
            let (body, _) = failure_body(format, 1, &end, words);
            assert!(!body.contains('\u{7}'), "{format:?}: {body}");
            assert!(
                body.contains("bell\\u{7}") || body.contains("bell\\\\u{7}"),
                "{format:?}: {body}"
            );
        }
        assert!(failure_text(1, &end, words).contains("- bell\\u{7} (run "));
        assert!(last_lines(&end, words).contains("\nbell\\u{7}: failed (max_turns): x"));
    }
}
