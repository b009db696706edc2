//! The Prometheus textfile (SPEC §14): after each `run`, what it did, for
//! node_exporter's textfile collector. Gauges of the last run, named and
//! documented by Prometheus conventions; written to a temporary file and
//! renamed, so the collector never reads half a file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::records::Summary;

/// What one run did.
#[derive(Debug, Clone)]
pub struct RunFacts<'a> {
    pub started: DateTime<Utc>,
    pub duration: Duration,
    pub exit_code: u8,
    pub summaries: &'a [Summary],
}

/// The text format (version 0.0.4) for `facts`.
pub fn render(facts: &RunFacts<'_>) -> String {
    let mut by_end: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for s in facts.summaries {
        *by_end
            .entry((s.status.as_str(), s.stop_reason.as_str()))
            .or_insert(0) += 1;
    }
    let sum = |f: fn(&Summary) -> u64| {
        facts
            .summaries
            .iter()
            .map(f)
            .fold(0u64, u64::saturating_add)
    };
    let mut out = String::new();
    gauge_head(
        &mut out,
        "agent_harness_last_run_tasks",
        "Tasks the last run ended, by status and stop reason.",
    );
    for ((status, reason), n) in &by_end {
        let _ = writeln!(
            out,
            "agent_harness_last_run_tasks{{status=\"{status}\",stop_reason=\"{reason}\"}} {n}"
        );
    }
    gauge_head(
        &mut out,
        "agent_harness_last_run_tokens",
        "Tokens the last run's tasks used, prompt and completion.",
    );
    let _ = writeln!(
        out,
        "agent_harness_last_run_tokens{{kind=\"prompt\"}} {}",
        sum(|s| s.prompt_tokens)
    );
    let _ = writeln!(
        out,
        "agent_harness_last_run_tokens{{kind=\"completion\"}} {}",
        sum(|s| s.completion_tokens)
    );
    let seconds = |ms: u64| ms as f64 / 1000.0;
    for (name, help, value) in [
        (
            "agent_harness_last_run_task_seconds",
            "Wall-clock seconds the last run's tasks took, summed.",
            seconds(sum(|s| s.wall_ms)),
        ),
        (
            "agent_harness_last_run_start_time_seconds",
            "When the last run started, in seconds since the Unix epoch.",
            facts.started.timestamp_millis() as f64 / 1000.0,
        ),
        (
            "agent_harness_last_run_duration_seconds",
            "How long the last run took, in seconds.",
            facts.duration.as_secs_f64(),
        ),
        (
            "agent_harness_last_run_exit_code",
            "The last run's exit code: 0 all succeeded, 1 a task failed, 75 some left for later.",
            f64::from(facts.exit_code),
        ),
    ] {
        gauge_head(&mut out, name, help);
        let _ = writeln!(out, "{name} {value}");
    }
    out
}

fn gauge_head(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
}

/// Writes the textfile atomically: a temporary file beside it, then a rename.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::StopReason;
    use crate::records::Status;
    use chrono::TimeZone;

    fn summary(status: Status, stop: StopReason, tokens: (u64, u64), wall_ms: u64) -> Summary {
        let t = Utc.with_ymd_and_hms(2026, 4, 9, 6, 15, 0).unwrap();
        Summary {
            task: "t".into(),
            run_id: "r".into(),
            status,
            stop_reason: stop,
            retryable: false,
            attempt: 1,
            turns: 1,
            tool_calls: 0,
            tool_errors: 0,
            calls_over_budget: 0,
            prompt_tokens: tokens.0,
            completion_tokens: tokens.1,
            total_tokens: tokens.0 + tokens.1,
            runpod_exec_ms: None,
            runpod_delay_ms: None,
            wall_ms,
            started_at: t,
            finished_at: t,
            final_answer: None,
            error: None,
            dry_run: false,
            expectations: None,
            replay_of: None,
            schema_checked: false,
            agent: None,
        }
    }

    #[test]
    fn every_figure_is_there_under_its_help_and_type() {
        let summaries = [
            summary(Status::Succeeded, StopReason::FinalAnswer, (100, 20), 1500),
            summary(Status::Succeeded, StopReason::FinalAnswer, (50, 5), 500),
            summary(Status::Failed, StopReason::MaxTurns, (10, 1), 1000),
        ];
        let text = render(&RunFacts {
            started: Utc.with_ymd_and_hms(2026, 4, 9, 6, 15, 0).unwrap(),
            duration: Duration::from_millis(3250),
            exit_code: 1,
            summaries: &summaries,
        });
        for line in [
            "# TYPE agent_harness_last_run_tasks gauge",
            "agent_harness_last_run_tasks{status=\"failed\",stop_reason=\"max_turns\"} 1",
            "agent_harness_last_run_tasks{status=\"succeeded\",stop_reason=\"final_answer\"} 2",
            "agent_harness_last_run_tokens{kind=\"prompt\"} 160",
            "agent_harness_last_run_tokens{kind=\"completion\"} 26",
            "agent_harness_last_run_task_seconds 3",
            "agent_harness_last_run_start_time_seconds 1775715300",
            "agent_harness_last_run_duration_seconds 3.25",
            "agent_harness_last_run_exit_code 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
        assert_eq!(text.matches("# HELP").count(), 6);
    }
}
