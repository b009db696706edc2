//! The Prometheus textfile (docs/operating.md, "Metrics"): after each `run`,
//! what it did, for node_exporter's textfile collector. Gauges of the last run,
//! named and documented by Prometheus conventions; written to a temporary file
//! and renamed, so the collector never reads half a file (readable by
//! node_exporter's own user whatever the umask, never written through a planted
//! link).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};

use harness_records::Summary;
use harness_state::SpendToday;

/// What one run did.
#[derive(Debug, Clone)]
pub struct RunFacts<'a> {
    pub started: DateTime<Utc>,
    pub duration: Duration,
    pub exit_code: u8,
    pub summaries: &'a [Summary],
    /// When the last run that exited 0 ended, in seconds since the epoch.
    pub last_success: Option<f64>,
    /// Inbox entries that will never run, when the inbox was listed.
    pub ignored: Option<usize>,
    /// Each MCP server the run tried to start, and whether it is up.
    pub servers_up: &'a [(String, bool)],
    /// Failed notifications, this run's and every earlier one's
    /// ([`notify_failures`]); `None` when nothing is notified.
    pub notify_failures: Option<u64>,
    /// Task traces that did not reach `[traces] endpoint`, this run's and
    /// every earlier one's ([`trace_export_failures`]); `None` without `[traces]`.
    pub trace_export_failures: Option<u64>,
    /// The day's spend and limits, when a daily `[budget]` limit is set.
    pub budget: Option<SpendToday>,
}

/// The gauge carried from one run's file to the next.
const LAST_SUCCESS: &str = "agent_harness_last_success_timestamp_seconds";

/// The end of this run when it exited 0, else the value the previous file
/// held (none when no run has succeeded yet).
pub fn last_success(
    path: &Path,
    started: DateTime<Utc>,
    duration: Duration,
    exit_code: u8,
) -> Option<f64> {
    if exit_code == 0 {
        return Some(started.timestamp_millis() as f64 / 1000.0 + duration.as_secs_f64());
    }
    carried(path, LAST_SUCCESS)
}

/// The counter of failed notifications: the previous file's, plus this run's.
pub fn notify_failures(path: &Path, this_run: u64) -> u64 {
    counter(path, NOTIFY_FAILURES, this_run)
}

const NOTIFY_FAILURES: &str = "agent_harness_notify_failures_total";

/// The counter of task traces lost: the previous file's, plus this run's.
pub fn trace_export_failures(path: &Path, this_run: u64) -> u64 {
    counter(path, TRACE_FAILURES, this_run)
}

/// The counter `name` of the previous file, plus this run's.
fn counter(path: &Path, name: &str, this_run: u64) -> u64 {
    let before = carried(path, name).map_or(0, |v| v.min(u64::MAX as f64) as u64);
    before.saturating_add(this_run)
}

const TRACE_FAILURES: &str = "agent_harness_trace_export_failures_total";

/// The value of the unlabelled figure `name` in the previous file (a
/// regular file, never a link, at most 1 MiB), when it is a number ≥ 0.
fn carried(path: &Path, name: &str) -> Option<f64> {
    let previous =
        harness_base::file::read_regular(path, 1024 * 1024, harness_base::file::Links::Refuse)
            .ok()?;
    String::from_utf8_lossy(&previous).lines().find_map(|l| {
        let value = l.strip_prefix(name)?.strip_prefix(' ')?;
        value
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
    })
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
        sum(|s| s.prompt_tokens.saturating_sub(s.earlier.prompt_tokens))
    );
    let _ = writeln!(
        out,
        "agent_harness_last_run_tokens{{kind=\"completion\"}} {}",
        sum(|s| s
            .completion_tokens
            .saturating_sub(s.earlier.completion_tokens))
    );
    let seconds = |ms: u64| ms as f64 / 1000.0;
    for (name, help, value) in [
        (
            "agent_harness_last_run_task_seconds",
            "Wall-clock seconds the last run's tasks took, summed.",
            seconds(sum(|s| s.wall_ms.saturating_sub(s.earlier.wall_ms))),
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
            "The last run's exit code: 0 all succeeded, 1 a task failed, 2 a configuration error or setup fault, 75 some left for later.",
            f64::from(facts.exit_code),
        ),
    ] {
        gauge_head(&mut out, name, help);
        let _ = writeln!(out, "{name} {value}");
    }
    run_level(&mut out, facts);
    out
}

/// What the run met besides its tasks: ignored inbox entries, MCP
/// servers, the last success carried over.
fn run_level(out: &mut String, facts: &RunFacts<'_>) {
    if let Some(n) = facts.ignored {
        gauge_head(
            out,
            "agent_harness_inbox_ignored_files",
            "Inbox entries the last run found that will never run (not NAME.md regular files).",
        );
        let _ = writeln!(out, "agent_harness_inbox_ignored_files {n}");
    }
    if !facts.servers_up.is_empty() {
        gauge_head(
            out,
            "agent_harness_tool_server_up",
            "Whether each MCP server the last run tried to start was up at its end (1) or not (0).",
        );
        for (server, up) in facts.servers_up {
            let _ = writeln!(
                out,
                "agent_harness_tool_server_up{{server=\"{server}\"}} {}",
                u8::from(*up)
            );
        }
    }
    if let Some(n) = facts.notify_failures {
        counter_lines(
            out,
            NOTIFY_FAILURES,
            "Notifications ([notify]) that failed, in every run so far.",
            n,
        );
    }
    if let Some(n) = facts.trace_export_failures {
        counter_lines(
            out,
            TRACE_FAILURES,
            "Task traces that did not reach [traces] endpoint, in every run so far.",
            n,
        );
    }
    if let Some(b) = facts.budget.filter(SpendToday::daily) {
        gauge_head(
            out,
            "agent_harness_budget_spent",
            "What today (the calendar day in [schedule] timezone) spent on model requests, by kind.",
        );
        let _ = writeln!(
            out,
            "agent_harness_budget_spent{{kind=\"tokens\"}} {}",
            b.tokens
        );
        let _ = writeln!(
            out,
            "agent_harness_budget_spent{{kind=\"gpu_seconds\"}} {}",
            b.gpu_seconds
        );
        gauge_head(
            out,
            "agent_harness_budget_limit",
            "The daily [budget] limits that are set, by kind.",
        );
        for (kind, limit) in [
            ("tokens", b.tokens_per_day),
            ("gpu_seconds", b.gpu_seconds_per_day),
        ] {
            if let Some(limit) = limit {
                let _ = writeln!(out, "agent_harness_budget_limit{{kind=\"{kind}\"}} {limit}");
            }
        }
    }
    if let Some(at) = facts.last_success {
        gauge_head(
            out,
            LAST_SUCCESS,
            "When the last run that exited 0 ended, in seconds since the Unix epoch.",
        );
        let _ = writeln!(out, "{LAST_SUCCESS} {at}");
    }
}

fn gauge_head(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
}

/// A counter without labels: its help, its type and its one sample.
fn counter_lines(out: &mut String, name: &str, help: &str, n: u64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} counter");
    let _ = writeln!(out, "{name} {n}");
}

/// Writes the textfile atomically: a new temporary file in the same folder
/// (never opened through a link or over another file), mode 0644 whatever
/// the umask (it holds counts and times only, and node_exporter reads it as
/// another user), then a rename over the old one. The temporary name does
/// not end in `.prom`, so node_exporter never reads it.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.exists() {
        // node_exporter (another user) must be able to enter the folder
        // this run creates, whatever the umask.
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "agent-harness.prom".into());
    // The folder is the operator's (`[metrics] textfile`): a link there is
    // theirs and is followed; the file itself never is.
    harness_base::folder::Folder::open_root(&dir)?.replace(&name, text.as_bytes(), 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use harness_agent::StopReason;
    use harness_records::Status;
    use std::os::unix::fs::PermissionsExt;

    fn summary(status: Status, stop: StopReason, tokens: (u64, u64), wall_ms: u64) -> Summary {
        let t = Utc.with_ymd_and_hms(2026, 4, 9, 6, 15, 0).unwrap();
        Summary {
            status,
            stop_reason: stop,
            turns: 1,
            prompt_tokens: tokens.0,
            completion_tokens: tokens.1,
            total_tokens: tokens.0 + tokens.1,
            wall_ms,
            ..Summary::blank("t", "r", t)
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
            last_success: Some(1775700000.5),
            ignored: Some(2),
            servers_up: &[("files".into(), true), ("time".into(), false)],
            notify_failures: Some(3),
            trace_export_failures: Some(2),
            budget: Some(SpendToday {
                day: chrono::NaiveDate::from_ymd_opt(2026, 4, 9).unwrap(),
                tokens: 1234,
                gpu_seconds: 5.5,
                tokens_per_day: Some(100_000),
                gpu_seconds_per_day: None,
                tokens_per_run: Some(10),
            }),
        });
        for line in [
            "# TYPE agent_harness_budget_spent gauge",
            "agent_harness_budget_spent{kind=\"tokens\"} 1234",
            "agent_harness_budget_spent{kind=\"gpu_seconds\"} 5.5",
            "# TYPE agent_harness_budget_limit gauge",
            "agent_harness_budget_limit{kind=\"tokens\"} 100000",
            "# TYPE agent_harness_last_run_tasks gauge",
            "agent_harness_last_run_tasks{status=\"failed\",stop_reason=\"max_turns\"} 1",
            "agent_harness_last_run_tasks{status=\"succeeded\",stop_reason=\"final_answer\"} 2",
            "agent_harness_last_run_tokens{kind=\"prompt\"} 160",
            "agent_harness_last_run_tokens{kind=\"completion\"} 26",
            "agent_harness_last_run_task_seconds 3",
            "agent_harness_last_run_start_time_seconds 1775715300",
            "agent_harness_last_run_duration_seconds 3.25",
            "agent_harness_last_run_exit_code 1",
            "# TYPE agent_harness_last_success_timestamp_seconds gauge",
            "agent_harness_last_success_timestamp_seconds 1775700000.5",
            "agent_harness_inbox_ignored_files 2",
            "agent_harness_tool_server_up{server=\"files\"} 1",
            "agent_harness_tool_server_up{server=\"time\"} 0",
            "# TYPE agent_harness_notify_failures_total counter",
            "agent_harness_notify_failures_total 3",
            "# TYPE agent_harness_trace_export_failures_total counter",
            "agent_harness_trace_export_failures_total 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
        assert!(
            !text.contains("agent_harness_budget_limit{kind=\"gpu_seconds\"}"),
            "a limit not set is no figure:\n{text}"
        );
        assert_eq!(text.matches("# HELP").count(), 13);
    }

    #[test]
    fn the_file_is_world_readable_whatever_the_umask_and_never_follows_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent-harness.prom");
        // SAFETY: umask only changes this process's file creation mask;
        // the tests of this crate that create files do not depend on it.
        let old = unsafe { libc::umask(0o077) };
        let written = write(&path, "x 1\n");
        unsafe { libc::umask(old) };
        written.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        // A link planted where the old fixed temporary name was is left alone.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("agent-harness.prom.tmp")).unwrap();
        write(&path, "x 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "x 2\n");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp") && n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "no temporary file is left: {left:?}");
    }

    #[test]
    fn a_textfile_folder_the_operator_linked_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("collector");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("textfile")).unwrap();
        write(&dir.path().join("textfile/agent-harness.prom"), "x 1\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(real.join("agent-harness.prom")).unwrap(),
            "x 1\n"
        );
    }

    #[test]
    fn the_last_success_is_kept_from_the_previous_file_until_a_run_exits_0() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.prom");
        let t = Utc.with_ymd_and_hms(2026, 4, 9, 6, 15, 0).unwrap();
        let d = Duration::from_millis(2500);
        assert_eq!(last_success(&path, t, d, 75), None, "never succeeded");
        assert_eq!(last_success(&path, t, d, 0), Some(1775715302.5));
        std::fs::write(
            &path,
            "# HELP x\nagent_harness_last_success_timestamp_seconds 1775715302.5\n",
        )
        .unwrap();
        assert_eq!(last_success(&path, t, d, 2), Some(1775715302.5));
        std::fs::write(&path, "agent_harness_last_success_timestamp_seconds NaN\n").unwrap();
        assert_eq!(
            last_success(&path, t, d, 1),
            None,
            "a value that is no time is dropped"
        );
    }
}
