//! What a notification says (docs/operating.md, "Notify"): the ping's last
//! status lines and `on_failure_url`'s JSON, in the harness's own words — a
//! task's error clipped to one line, the model's text never quoted, at most 50
//! tasks named, then how many more — within their caps.

use serde::Serialize;

use harness_agent::StopReason;
use harness_drain::{RunEnd, RunOutcome};
use harness_records::{Status, Summary};

/// `on_failure_url`'s body's cap.
const MAX_REPORT_BYTES: usize = 64 * 1024;
/// Tasks (and problems) a body names; the rest are counted.
const MAX_NAMED: usize = 50;
/// Characters of a task's error or a problem a body carries.
const MAX_ERROR_CHARS: usize = 300;

/// `on_failure_url`'s body.
#[derive(Debug, Serialize)]
struct FailureReport<'a> {
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
    failed_tasks: Vec<FailedTask<'a>>,
    /// Tasks that did not succeed past the first 50.
    more_failed_tasks: usize,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct FailedTask<'a> {
    task: &'a str,
    run_id: &'a str,
    status: Status,
    stop_reason: &'a str,
    error: Option<String>,
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
/// A task's error in the harness's own words: where it would quote the
/// model (a value off the schema, a repeated block or call, a missed
/// expectation), what happened instead; otherwise the error, one line,
/// clipped.
fn own_words(s: &Summary) -> Option<String> {
    let instead = match s.stop_reason {
        StopReason::InvalidAnswer => "the answer did not match the output schema",
        StopReason::Repetition => "a reply repeated one block until max_tokens",
        StopReason::LoopDetected => "the model kept repeating the same call",
        StopReason::ExpectationFailed => "the answer missed its [expect] checks",
        // The server's words may quote the request, and so the model.
        StopReason::EndpointError => {
            let status = s.error.as_deref().and_then(http_status);
            return Some(match status {
                Some(status) => format!(
                    "the endpoint's answer ended the task (HTTP {status}; its summary.json has the server's words)"
                ),
                None => {
                    "the endpoint's answer ended the task (its summary.json has the server's words)"
                        .into()
                }
            });
        }
        _ => return s.error.as_deref().map(one_line),
    };
    Some(format!("{instead} (its summary.json says more)"))
}

/// The status in an error's first `HTTP NNN`.
fn http_status(error: &str) -> Option<u16> {
    let at = error.find("HTTP ")? + 5;
    let digits = error.get(at..at + 3)?;
    digits.parse().ok().filter(|n| (100..600).contains(n))
}

/// `text` on one line, control characters escaped, at most
/// [`MAX_ERROR_CHARS`] characters.
fn one_line(text: &str) -> String {
    harness_base::text::clip(&harness_base::text::printable(text), MAX_ERROR_CHARS)
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

/// What a run's end says, for a ping's body: its last line, then a line
/// for each task that did not succeed (50 at most, then how many more).
pub(crate) fn last_lines(end: &RunEnd) -> String {
    let mut lines = vec![match &end.result {
        Ok(RunOutcome::Finished(tally)) => tally.describe(end.duration),
        Ok(RunOutcome::Locked { .. }) => "another run holds the lock; nothing to do".into(),
        Ok(RunOutcome::Unreachable(why)) => {
            format!("the endpoint is unreachable, no task was touched: {why}")
        }
        Err(e) => format!("{e:#}"),
    }];
    let (named, more) = not_succeeded(end);
    for s in named {
        lines.push(format!(
            "{}: {} ({}): {}",
            s.task,
            s.status.as_str(),
            s.stop_reason.as_str(),
            own_words(s).unwrap_or_else(|| "-".into())
        ));
    }
    if more > 0 {
        lines.push(format!("and {more} more"));
    }
    lines.join("\n")
}

/// `on_failure_url`'s body as JSON, at most [`MAX_REPORT_BYTES`].
pub(super) fn failure_report(code: u8, end: &RunEnd) -> String {
    let tally = match &end.result {
        Ok(RunOutcome::Finished(t)) => Some(t),
        _ => None,
    };
    let (named, more_failed_tasks) = not_succeeded(end);
    let problems = tally.map_or(&[][..], |t| t.problems.as_slice());
    let mut report = FailureReport {
        exit_code: code,
        started_at: end.started,
        duration_secs: end.duration.as_secs_f64(),
        succeeded: tally.map_or(0, |t| t.succeeded),
        failed: tally.map_or(0, |t| t.failed),
        left_in_inbox: tally.map_or(0, |t| t.retry_later + t.interrupted + t.not_started),
        setup_fault: tally.and_then(|t| t.setup_fault.as_deref()).map(one_line),
        problems: problems
            .iter()
            .take(MAX_NAMED)
            .map(|p| one_line(p))
            .collect(),
        more_problems: problems.len().saturating_sub(MAX_NAMED),
        failed_tasks: named
            .into_iter()
            .map(|s| FailedTask {
                task: &s.task,
                run_id: &s.run_id,
                status: s.status,
                stop_reason: s.stop_reason.as_str(),
                error: own_words(s),
            })
            .collect(),
        more_failed_tasks,
        error: match &end.result {
            Err(e) => Some(one_line(&format!("{e:#}"))),
            Ok(RunOutcome::Unreachable(why)) => {
                Some(one_line(&format!("the endpoint is unreachable: {why}")))
            }
            _ => None,
        },
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_errors_http_status_is_read_from_its_words() {
        assert_eq!(
            http_status("the endpoint rejected the request (HTTP 400): x"),
            Some(400)
        );
        assert_eq!(http_status("HTTP 9999"), None);
        assert_eq!(http_status("no status"), None);
    }
}
