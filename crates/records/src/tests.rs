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
