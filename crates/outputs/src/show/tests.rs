//! Unit tests of `show`'s text, without the binary: a run as the operator
//! reads it, from a summary and what the caller found.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

use super::{Found, text};
use harness_agent::StopReason;
use harness_base::zone::Zone;
use harness_records::{FailureDetail, ListedRun, Status, Summary, ToolError};

fn at(t: &str) -> DateTime<Utc> {
    t.parse().unwrap()
}

fn listed(summary: Summary) -> ListedRun {
    ListedRun {
        dir: PathBuf::from(format!("logs/{}/{}", summary.task, summary.run_id)),
        task_dir: summary.task.clone(),
        run_dir: summary.run_id.clone(),
        summary,
    }
}

#[test]
fn a_succeeded_run_shows_its_counts_times_and_answer_and_nothing_of_a_failure() {
    let mut s = Summary::blank("weekly", "20260409T061500Z", at("2026-04-09T06:15:00Z"));
    (s.turns, s.tool_calls, s.tool_errors) = (3, 2, 1);
    (s.prompt_tokens, s.completion_tokens, s.total_tokens) = (900, 100, 1000);
    s.finished_at = at("2026-04-09T06:15:04Z");
    s.wall_ms = 4250;
    s.resumed_from = Some("20260408T061500Z".into());
    s.resumed_turns = 2;
    let found = Found {
        task_file: "tasks/done/20260409T061500Z-weekly.md".into(),
        again: Some("never shown for a success".into()),
        failure: None,
        answer: Some("Three notes.\n\n"),
    };

    let shown = text(&listed(s), &Zone::named("Europe/Berlin").unwrap(), &found);

    let expected = "\
task        weekly
run id      20260409T061500Z
status      succeeded (final_answer)
turns       3 (2 tool call(s), 1 tool error(s)), tokens 1000 (900 prompt + 100 completion)
time        started 2026-04-09T08:15:00+02:00, finished 2026-04-09T08:15:04+02:00, 4.2 s
resumed     from run 20260408T061500Z, 2 turn(s) from its records
task file   tasks/done/20260409T061500Z-weekly.md
records     logs/weekly/20260409T061500Z

answer:
Three notes.
";
    assert_eq!(shown, expected);
}

#[test]
fn a_failed_run_shows_what_went_wrong_and_what_runs_it_again_every_field_escaped() {
    let mut s = Summary::blank("t", "20260409T061500Z", at("2026-04-09T06:15:00Z"));
    s.status = Status::Failed;
    s.stop_reason = StopReason::MaxTurns;
    s.dry_run = true;
    s.error = Some("out of turns\nstatus      succeeded".into());
    s.tool_servers_down = vec!["files".into()];
    let long = "x".repeat(400);
    let failure = FailureDetail {
        last_tool_error: Some(ToolError {
            turn: 2,
            name: "webfetch\x1b]0;owned\x07".into(),
            result: format!("HTTP 404\n{long}"),
        }),
        log_tail: vec!["first".into(), "\x1b[2Jsecond".into()],
        not_loaded: vec!["tools.jsonl: line 3 is no JSON".into()],
    };
    let found = Found {
        task_file: "tasks/failed/20260409T061500Z-t.md".into(),
        again: Some("agent-harness requeue t/20260409T061500Z".into()),
        failure: Some(&failure),
        answer: None,
    };

    let shown = text(&listed(s), &Zone::utc(), &found);
    let lines: Vec<&str> = shown.lines().collect();

    assert_eq!(lines[2], "status      failed (max_turns), a dry run");
    assert_eq!(lines[3], "error       out of turns\\nstatus      succeeded");
    assert_eq!(
        lines[6],
        "not offered the MCP servers that were down: files"
    );
    let tool = lines[9];
    assert!(
        tool.starts_with("tool error  turn 2, webfetch\\u{1b}]0;owned\\u{7}: HTTP 404 "),
        "{tool}"
    );
    assert!(tool.len() < 400, "clipped to one line: {tool}");
    assert_eq!(
        lines[10..],
        [
            "again       agent-harness requeue t/20260409T061500Z",
            "not read    tools.jsonl: line 3 is no JSON",
            "",
            "run.log, its last 2 line(s):",
            "  first",
            "  \\u{1b}[2Jsecond",
            "",
            "(no answer)",
        ]
    );
}
