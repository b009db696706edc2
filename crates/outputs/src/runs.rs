//! What `runs` prints (docs/operating.md, "The morning after"): the runs
//! listed, the tasks running now first, as a table or as JSON; and how the
//! readers say a time. Values only: the command prints them.

use chrono::{DateTime, Utc};

use harness_base::text::{clip, printable, table as aligned};
use harness_base::zone::Zone;
use harness_records::{self as records, Summary, Unfinished};

/// A time as the readers print it: RFC 3339, to the second, in `zone`
/// (`Z` for UTC).
pub(crate) fn when(t: DateTime<Utc>, zone: &Zone) -> String {
    t.with_timezone(zone)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `runs --json`: the tasks running now first, each as `status:
/// "running"` with its task, run id and start (the folders' names; no
/// summary yet), then the summaries.
pub fn json(running: &[Unfinished], summaries: &[Summary]) -> Vec<serde_json::Value> {
    let going = running.iter().map(|u| {
        serde_json::json!({
            "task": u.task_dir,
            "run_id": u.run_dir,
            "status": "running",
            "started_at": records::run_time(&u.run_dir),
        })
    });
    let ended = summaries
        .iter()
        .map(|s| serde_json::to_value(s).unwrap_or_default());
    going.chain(ended).collect()
}

/// Characters of an answer's first line in the `runs` table.
const ANSWER_CHARS: usize = 40;

/// An answer's first line, clipped and escaped, for a table cell.
pub(crate) fn answer_cell(answer: Option<&str>) -> String {
    let first = answer
        .and_then(|a| a.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("-");
    printable(&clip(first, ANSWER_CHARS)).into_owned()
}

/// The `runs` table: task, run id, when it started, status, stop reason,
/// turns, tool errors, tokens, wall time, the answer's first line — and,
/// when any run listed is a recurring task's, its slot. The tasks running
/// now come first, `running`.
pub fn table(summaries: &[Summary], running: &[Unfinished], zone: &Zone) -> String {
    let slots = summaries.iter().any(|s| s.slot.is_some());
    let mut header = vec![
        "TASK",
        "RUN ID",
        "STARTED",
        "STATUS",
        "STOP REASON",
        "TURNS",
        "TOOL ERR",
        "TOKENS",
        "WALL",
    ];
    if slots {
        header.push("SLOT");
    }
    header.push("ANSWER");
    let header: Vec<String> = header.into_iter().map(String::from).collect();
    let cell = |t: &str| printable(t).into_owned();
    let going = running.iter().map(|u| {
        let mut row = vec![
            cell(&u.task_dir),
            cell(&u.run_dir),
            records::run_time(&u.run_dir).map_or_else(|| "-".into(), |t| when(t, zone)),
            "running".to_string(),
        ];
        row.resize(header.len(), "-".to_string());
        row
    });
    let ended = summaries.iter().map(|s| {
        let status = s.status.as_str().to_string();
        let mut row = vec![
            cell(&s.task),
            cell(&s.run_id),
            when(s.started_at, zone),
            match (&s.replay_of, s.dry_run) {
                (Some(_), _) => format!("{status} (replay)"),
                (None, true) => format!("{status} (dry)"),
                (None, false) => status,
            },
            s.stop_reason.as_str().to_string(),
            s.turns.to_string(),
            s.tool_errors.to_string(),
            s.total_tokens.to_string(),
            format!("{:.1}s", s.wall_ms as f64 / 1000.0),
        ];
        if slots {
            row.push(cell(s.slot.as_deref().unwrap_or("-")));
        }
        row.push(answer_cell(s.final_answer.as_deref()));
        row
    });
    let rows: Vec<Vec<String>> = going.chain(ended).collect();
    aligned(&header, &rows)
}

#[cfg(test)]
mod tests;
