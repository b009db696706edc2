//! Unit tests of `runs`' listing: the table and the JSON, without the binary.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

use super::{answer_cell, json, table, when};
use harness_base::zone::Zone;
use harness_records::{Status, Summary, Unfinished};

fn at(t: &str) -> DateTime<Utc> {
    t.parse().unwrap()
}

fn going(task: &str, run_id: &str) -> Unfinished {
    Unfinished {
        dir: PathBuf::from(format!("logs/{task}/{run_id}")),
        task_dir: task.into(),
        run_dir: run_id.into(),
    }
}

#[test]
fn the_table_lists_the_runs_going_now_first_and_a_slot_only_when_one_has_one() {
    let mut done = Summary::blank("weekly", "20260409T061500Z", at("2026-04-09T06:15:00Z"));
    done.status = Status::Succeeded;
    done.final_answer = Some("\n  First line.\nSecond.".into());
    let running = [going("slow", "20260409T070000Z")];
    let zone = Zone::utc();

    let text = table(std::slice::from_ref(&done), &running, &zone);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("TASK") && !lines[0].contains("SLOT"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("slow") && lines[1].contains(" running "),
        "{text}"
    );
    assert!(lines[1].contains("2026-04-09T07:00:00Z"), "{text}");
    assert!(
        lines[2].starts_with("weekly") && lines[2].ends_with("First line."),
        "{text}"
    );

    done.slot = Some("2026-04-09T06:00:00+00:00".into());
    done.dry_run = true;
    let text = table(&[done], &[], &zone);
    assert!(text.lines().next().unwrap().contains("SLOT"), "{text}");
    assert!(text.contains("succeeded (dry)"), "{text}");
}

#[test]
fn an_answer_cell_is_the_first_line_clipped_and_escaped() {
    assert_eq!(answer_cell(None), "-");
    assert_eq!(answer_cell(Some("\n\n  ")), "-");
    let cell = answer_cell(Some(&format!("{}\u{1b}[2J", "x".repeat(60))));
    assert!(
        cell.chars().count() <= 41 && cell.starts_with("xxxx"),
        "{cell}"
    );
    assert_eq!(answer_cell(Some("a\u{1b}[2Jb")), "a\\u{1b}[2Jb");
}

#[test]
fn the_json_says_the_runs_going_now_first_then_each_summary() {
    let done = Summary::blank("weekly", "20260409T061500Z", at("2026-04-09T06:15:00Z"));
    let listed = json(&[going("slow", "20260409T070000Z")], &[done]);
    assert_eq!(listed.len(), 2);
    assert_eq!(
        listed[0],
        serde_json::json!({"task": "slow", "run_id": "20260409T070000Z", "status": "running", "started_at": "2026-04-09T07:00:00Z"})
    );
    let summary: Summary = serde_json::from_value(listed[1].clone()).unwrap();
    assert_eq!(summary.run_id, "20260409T061500Z");
}

#[test]
fn a_time_is_said_to_the_second_in_the_zone() {
    let t = at("2026-04-09T06:15:00.750Z");
    assert_eq!(when(t, &Zone::utc()), "2026-04-09T06:15:00Z");
    let berlin = Zone::named("Europe/Berlin").unwrap();
    assert_eq!(when(t, &berlin), "2026-04-09T08:15:00+02:00");
}
