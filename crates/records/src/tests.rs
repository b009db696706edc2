//! Unit tests of `records`.

use super::*;
use chrono::TimeZone;
use harness_config::Secret;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

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
    let mut r = RunRecord::create(dir.path(), "t", t, vec![Secret::new("nwx_topsecret")]).unwrap();
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
    r.summary(&Summary::blank("t", &r.run_id, t)).unwrap();
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

/// One source per name: every stop reason, status, tool and failure kind
/// is written in the records by the name its derived `as_str` gives, and
/// reads back from it.
#[test]
fn the_derived_names_are_the_names_in_the_records() {
    use strum::IntoEnumIterator;
    let serde_name = |v: serde_json::Value| v.as_str().unwrap().to_string();
    for r in harness_agent::StopReason::iter() {
        assert_eq!(serde_name(serde_json::to_value(r).unwrap()), r.as_str());
    }
    for s in Status::iter() {
        assert_eq!(serde_name(serde_json::to_value(s).unwrap()), s.as_str());
        assert_eq!(
            s.as_str().parse::<Status>(),
            Ok(s),
            "read back from its name"
        );
    }
    let tools: Vec<harness_tools::ToolName> = harness_tools::ToolName::iter().collect();
    assert_eq!(tools, harness_tools::ToolName::ALL, "ALL lists every tool");
    for t in tools {
        assert_eq!(serde_name(serde_json::to_value(t).unwrap()), t.as_str());
        assert_eq!(harness_tools::ToolName::parse(t.as_str()), Some(t));
    }
    for f in harness_endpoint::Failure::iter() {
        assert_eq!(lines::failure_of(lines::failure_name(f)), Some(f));
    }
    assert_eq!(
        lines::failure_name(harness_endpoint::Failure::NotJson),
        "not_json"
    );
    assert_eq!(
        harness_agent::StopReason::ToolServerUnavailable.as_str(),
        "tool_server_unavailable"
    );
}

/// Writes `logs/<task>/<run_id>/` with a summary started at its run id's
/// time, or (`None`) with records only, as a run still going leaves it.
fn plant(logs: &Path, task: &str, run_id: &str, summary: Option<Status>) {
    let dir = logs.join(task).join(run_id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.log"), "started\n").unwrap();
    if let Some(status) = summary {
        let at = run_time(run_id).unwrap();
        let s = Summary {
            status,
            ..Summary::blank(task, run_id, at)
        };
        std::fs::write(dir.join("summary.json"), serde_json::to_string(&s).unwrap()).unwrap();
    }
}

#[test]
fn a_listing_since_a_time_reads_no_earlier_run_and_skips_what_started_before() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path();
    plant(logs, "a", "20260401T080000Z", Some(Status::Succeeded));
    plant(logs, "a", "20260403T080000Z", Some(Status::Failed));
    plant(logs, "b", "20260402T235959Z", Some(Status::Succeeded));
    // Named before `since`: never opened, so even garbage is no matter.
    let old = logs.join("b/20260301T000000Z");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("summary.json"), "garbage").unwrap();
    let now = Utc.with_ymd_and_hms(2026, 4, 9, 0, 0, 0).unwrap();
    let since = Utc.with_ymd_and_hms(2026, 4, 2, 23, 59, 59).unwrap();
    let listing = read_summaries_since(logs, now, Some(since));
    let ids: Vec<&str> = listing.runs.iter().map(|r| r.run_dir.as_str()).collect();
    assert_eq!(ids, ["20260403T080000Z", "20260402T235959Z"]);
    assert!(listing.incomplete.is_empty(), "{:?}", listing.incomplete);
    let incomplete = read_summaries(logs, now).incomplete;
    assert_eq!(
        incomplete,
        [Unfinished {
            dir: old,
            task_dir: "b".into(),
            run_dir: "20260301T000000Z".into()
        }]
    );
}

#[test]
fn the_unfinished_runs_since_a_time_are_found_by_their_folders_alone() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path();
    plant(logs, "a", "20260409T061500Z", None);
    plant(logs, "b", "20260409T061500Z", Some(Status::Succeeded));
    plant(logs, "c", "20260409T061459Z", None);
    plant(logs, "d", "20260409T061502Z-2", None);
    // Not a run folder (no records), and a link to one: neither counts.
    std::fs::create_dir_all(logs.join("e/20260409T061600Z")).unwrap();
    std::os::unix::fs::symlink(logs.join("a"), logs.join("f")).unwrap();
    // Planted far ahead of the clock: no run of this clock, so not one
    // going now (nor one an hour ahead, within the slack, is left out).
    plant(logs, "g", "20991231T000000Z", None);
    plant(logs, "h", "20260409T071500Z", None);
    let since =
        Utc.with_ymd_and_hms(2026, 4, 9, 6, 15, 0).unwrap() + chrono::Duration::milliseconds(400);
    let now = Utc.with_ymd_and_hms(2026, 4, 9, 6, 20, 0).unwrap();
    let found: Vec<(String, String)> = unfinished_since(logs, since, now)
        .into_iter()
        .map(|u| (u.task_dir, u.run_dir))
        .collect();
    assert_eq!(
        found,
        [
            ("a".to_string(), "20260409T061500Z".to_string()),
            ("d".to_string(), "20260409T061502Z-2".to_string()),
            ("h".to_string(), "20260409T071500Z".to_string())
        ]
    );
    assert!(unfinished_since(&logs.join("absent"), since, now).is_empty());
}

#[test]
fn a_failure_is_told_by_its_last_tool_error_and_the_tail_of_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path();
    plant(logs, "t", "20260409T061500Z", Some(Status::Failed));
    let run_dir = logs.join("t/20260409T061500Z");
    let tool = |turn: u32, is_error: bool, result: &str| {
        serde_json::json!({
            "turn": turn, "call_id": "c", "name": "webfetch", "arguments": "{}",
            "result": result, "is_error": is_error, "duration_ms": 1,
            "original_chars": 1, "returned_chars": 1, "executed": true, "repeat": 1
        })
        .to_string()
    };
    let tools = [
        tool(1, true, "HTTP 404"),
        tool(2, true, "HTTP 500"),
        "not a line".to_string(),
        tool(3, false, "fine"),
        "{\"turn\": 4, \"cut".to_string(),
    ]
    .join("\n");
    std::fs::write(run_dir.join("tools.jsonl"), tools).unwrap();
    let log: String = (1..=30).map(|n| format!("line {n}\n\n")).collect();
    std::fs::write(run_dir.join("run.log"), log).unwrap();
    let root = harness_base::folder::Folder::open(logs).unwrap();
    let now = Utc.with_ymd_and_hms(2026, 4, 10, 0, 0, 0).unwrap();
    let listing = read_summaries(logs, now);
    let detail = failure_detail(&root, &listing.runs[0], 3);
    assert_eq!(
        detail.last_tool_error,
        Some(ToolError {
            turn: 2,
            name: "webfetch".into(),
            result: "HTTP 500".into()
        })
    );
    assert_eq!(detail.log_tail, ["line 28", "line 29", "line 30"]);
    assert!(detail.not_loaded.is_empty());

    // A log exactly as long as the tail read is whole: its first line stays.
    let first = "first line\n";
    let exact = format!(
        "{first}{}\nlast\n",
        "x".repeat(MAX_LOG_TAIL_BYTES as usize - first.len() - "\nlast\n".len())
    );
    assert_eq!(exact.len() as u64, MAX_LOG_TAIL_BYTES);
    std::fs::write(run_dir.join("run.log"), exact).unwrap();
    let tail = failure_detail(&root, &listing.runs[0], 10).log_tail;
    assert_eq!(tail.first().map(String::as_str), Some("first line"));
    assert_eq!(tail.len(), 3);
    // A log longer than the tail read: its cut first line is left out.
    let long = format!("{}\nlast\n", "x".repeat(MAX_LOG_TAIL_BYTES as usize * 2));
    std::fs::write(run_dir.join("run.log"), long).unwrap();
    assert_eq!(
        failure_detail(&root, &listing.runs[0], 10).log_tail,
        ["last"]
    );
    // A FIFO where tools.jsonl goes is said, not waited on.
    std::fs::remove_file(run_dir.join("tools.jsonl")).unwrap();
    let fifo = std::ffi::CString::new(
        run_dir
            .join("tools.jsonl")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    // SAFETY: a NUL-terminated path, valid for the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let detail = failure_detail(&root, &listing.runs[0], 10);
    assert_eq!(detail.last_tool_error, None);
    assert_eq!(detail.not_loaded.len(), 1, "{:?}", detail.not_loaded);
}
