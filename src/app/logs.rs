//! `runs` and `report`: both read only the logs folder (SPEC §21: as
//! hostile input), so neither needs the config's secrets.

use std::io::Write;
use std::path::Path;

use super::cli::Command;
use super::exit;
use crate::records::{self, read_summaries};

/// `runs` or `report`: both read only the logs folder.
pub(super) fn logs_command(logs: &Path, command: &Command) -> u8 {
    match command {
        Command::Report { out, task, limit } => {
            let opts = crate::records::report::ReportOptions {
                out: out.clone().unwrap_or_else(|| logs.join("report")),
                task: task.clone(),
                limit: *limit,
            };
            let mut warn = |line: String| eprintln!("agent-harness: {line}");
            match crate::records::report::write(logs, &opts, &mut warn) {
                Ok(written) => {
                    let shown = std::fs::canonicalize(&written.index).unwrap_or(written.index);
                    let evals = match written.evals {
                        0 => String::new(),
                        n => format!(" and {n} eval(s)"),
                    };
                    println!(
                        "report of {} run(s){evals}: file://{}",
                        written.runs,
                        shown.display()
                    );
                    exit::OK
                }
                Err(e) => {
                    eprintln!("agent-harness: {e:#}");
                    exit::FAILED
                }
            }
        }
        _ => runs_command(logs, command),
    }
}

fn runs_command(logs: &Path, command: &Command) -> u8 {
    let Command::Runs { task, limit, json } = command else {
        return exit::USAGE;
    };
    let listing = read_summaries(logs);
    let mut summaries = listing.summaries();
    let mut incomplete = listing.incomplete;
    if let Some(t) = task {
        summaries.retain(|s| &s.task == t);
        incomplete.retain(|dir| dir.parent().and_then(Path::file_name) == Some(t.as_ref()));
    }
    if !incomplete.is_empty() {
        let dirs: Vec<String> = incomplete.iter().map(|d| d.display().to_string()).collect();
        eprintln!(
            "agent-harness: {} run folder(s) without a readable summary.json (still running, killed mid-run, or not a run): {}",
            dirs.len(),
            crate::base::text::printable(&dirs.join(", "))
        );
    }
    for why in &listing.skipped {
        eprintln!(
            "agent-harness: skipped {}",
            crate::base::text::printable(why)
        );
    }
    summaries.truncate(*limit);
    let mut out = std::io::stdout().lock();
    let written = if *json {
        serde_json::to_string_pretty(&summaries)
            .map_err(std::io::Error::other)
            .and_then(|s| writeln!(out, "{s}"))
    } else {
        write!(out, "{}", runs_table(&summaries))
    };
    match written {
        Ok(()) => exit::OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            eprintln!("agent-harness: {e}");
            exit::FAILED
        }
    }
}

/// The `runs` table: task, run id, status, stop reason, turns, tokens, wall time.
pub fn runs_table(summaries: &[records::Summary]) -> String {
    let header: Vec<String> = [
        "TASK",
        "RUN ID",
        "STATUS",
        "STOP REASON",
        "TURNS",
        "TOOL ERR",
        "TOKENS",
        "WALL",
    ]
    .map(String::from)
    .to_vec();
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            let status = s.status.as_str().to_string();
            let cell = |t: &str| crate::base::text::printable(t).into_owned();
            vec![
                cell(&s.task),
                cell(&s.run_id),
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
            ]
        })
        .collect();
    let mut out = crate::base::text::table(&header, &rows);
    if rows.is_empty() {
        out.push_str("(no runs recorded)\n");
    }
    out
}
