//! `show` (docs/operating.md, "Commands" and "The morning after"): one run
//! read back — what it did, where its file went, its answer — and, for a
//! run that failed or was interrupted, what went wrong and what runs it
//! again: its error, the last tool error, the last lines of its `run.log`,
//! and the exact command (`requeue`, `rerun`) or that nothing is needed
//! (`drain::again`). The records are read as hostile input: every one-line
//! field escaped, the log's lines too; times in `[schedule] timezone`
//! (`--utc`: UTC).

use std::io::Write;

use super::exit;
use super::logs::{listing, no_run_of};
use harness_base::folder::Folder;
use harness_base::text::{clip, one_line, printable, printable_json};
use harness_base::zone::Zone;
use harness_config::Config;
use harness_display::Progress;
use harness_drain::{Again, again};
use harness_outputs::runs::when;
use harness_records::{self as records, FailureDetail, ListedRun, Status};

/// Lines of `run.log` a failed run shows.
const LOG_LINES: usize = 10;
/// Characters of one of them, or of the last tool error.
const LINE_CHARS: usize = 300;

/// `show [NAME|RUN_ID|NAME/RUN_ID] [--json] [--utc]`: one run, the newest
/// that matches; exit 2 when none does.
pub(super) fn show_command(
    cfg: &Config,
    which: Option<&str>,
    json: bool,
    zone: &Zone,
    progress: &Progress,
) -> u8 {
    let listing = match listing(cfg, "show", progress, None) {
        Ok(listing) => listing,
        Err(code) => return code,
    };
    let runs = matching(&listing.runs, which);
    let run = match runs.as_slice() {
        // Folders it could not read may hold it: the permission problem
        // said above is the answer, not "no run".
        [] if !listing.unreadable.is_empty() => return exit::FAILED,
        [] => {
            progress.eprintln(&format!(
                "agent-harness: {} in {}",
                match which {
                    None => "no run is recorded".to_string(),
                    Some(w) if !w.contains('/') && records::run_time(w).is_none() => {
                        progress.eprintln(&format!("agent-harness: {}", no_run_of(cfg, w)));
                        return exit::USAGE;
                    }
                    Some(w) => format!("no run matches {:?}", printable(w)),
                },
                cfg.paths.logs.display()
            ));
            return exit::USAGE;
        }
        [run] => *run,
        [run, others @ ..] if which.is_some_and(|w| records::run_time(w).is_some()) => {
            let tasks: Vec<String> = others
                .iter()
                .map(|r| printable(&r.summary.task).into_owned())
                .collect();
            progress.eprintln(&format!(
                "agent-harness: run {} is a run of {} tasks; showing {} (the others: {}; name one as TASK/RUN_ID)",
                printable(&run.summary.run_id),
                others.len() + 1,
                printable(&run.summary.task),
                tasks.join(", ")
            ));
            run
        }
        [run, ..] => run,
    };
    let mut out = progress.stdout();
    if json {
        let text = serde_json::to_string_pretty(&run.summary).unwrap_or_default();
        let _ = writeln!(out, "{}", printable_json(&text));
        return exit::OK;
    }
    let logs = Folder::open_root(&cfg.paths.logs).ok();
    let answer = logs.as_ref().and_then(|logs| records::answer_of(logs, run));
    let failure = logs
        .as_ref()
        .filter(|_| run.summary.status != Status::Succeeded)
        .map(|logs| records::failure_detail(logs, run, LOG_LINES));
    let text = show_text(cfg, run, zone, failure.as_ref(), answer.as_deref());
    // On a terminal what a record holds cannot move the cursor or retitle
    // the window; a pipe gets the answer as written (its one-line fields
    // are escaped already).
    let text = if out.is_terminal() {
        text.split('\n')
            .map(|l| printable(l).into_owned())
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        text
    };
    let _ = out.write_all(text.as_bytes());
    exit::OK
}

/// The listed runs (newest first) that `which` names: a task's runs, a
/// run id's, `TASK/RUN_ID`'s, or every run.
fn matching<'a>(runs: &'a [ListedRun], which: Option<&str>) -> Vec<&'a ListedRun> {
    // Matched by the folders the listing walked, never a summary's field.
    let folder_of = |task: &str| harness_inbox::fit_file_name("", task, "");
    runs.iter()
        .filter(|r| match which {
            None => true,
            Some(w) => match w.split_once('/') {
                Some((task, run_id)) => r.task_dir == folder_of(task) && r.run_dir == run_id,
                None if records::run_time(w).is_some() => r.run_dir == w,
                None => r.task_dir == folder_of(w),
            },
        })
        .collect()
}

/// What `show` prints of a run: every one-line field escaped (a line
/// break or an escape sequence in a record forges no line), then for a
/// run that did not succeed what went wrong and what runs it again, then
/// the answer as it is.
fn show_text(
    cfg: &Config,
    run: &ListedRun,
    zone: &Zone,
    failure: Option<&FailureDetail>,
    answer: Option<&str>,
) -> String {
    let s = &run.summary;
    let one = |field: &str| printable(field).into_owned();
    // Only a task run of this folder's task is looked for (a crafted
    // summary names no other task's file).
    let own = harness_inbox::check_task_name(&s.task).is_ok()
        && harness_inbox::fit_file_name("", &s.task, "") == run.task_dir;
    let to_do = own.then(|| again(&cfg.paths, &s.task, &run.run_dir, s.recurring));
    let mut lines = vec![
        format!("task        {}", one(&s.task)),
        format!("run id      {}", one(&s.run_id)),
        format!(
            "status      {} ({}){}",
            s.status.as_str(),
            s.stop_reason.as_str(),
            if s.dry_run { ", a dry run" } else { "" }
        ),
    ];
    if let Some(e) = &s.error {
        lines.push(format!("error       {}", one(e)));
    }
    lines.push(format!(
        "turns       {} ({} tool call(s), {} tool error(s)), tokens {} ({} prompt + {} completion)",
        s.turns, s.tool_calls, s.tool_errors, s.total_tokens, s.prompt_tokens, s.completion_tokens
    ));
    lines.push(format!(
        "time        started {}, finished {}, {:.1} s",
        when(s.started_at, zone),
        when(s.finished_at, zone),
        s.wall_ms as f64 / 1000.0
    ));
    if let Some(slot) = &s.slot {
        lines.push(format!("slot        {} (a recurring task)", one(slot)));
    }
    if let Some(from) = &s.resumed_from {
        lines.push(format!(
            "resumed     from run {}, {} turn(s) from its records",
            one(from),
            s.resumed_turns
        ));
    }
    if !s.tool_servers_down.is_empty() {
        lines.push(format!(
            "not offered the MCP servers that were down: {}",
            one(&s.tool_servers_down.join(", "))
        ));
    }
    lines.push(format!(
        "task file   {}",
        one(&task_file(run, to_do.as_ref()))
    ));
    lines.push(format!(
        "records     {}",
        one(&run.dir.display().to_string())
    ));
    if let Some(failure) = failure {
        // A replay ran no task file: nothing of it runs again.
        let to_do = to_do.as_ref().filter(|_| s.replay_of.is_none());
        lines.extend(failure_lines(to_do, &harness_drain::program(cfg), failure));
    }
    lines.push(String::new());
    match answer {
        Some(a) => {
            lines.push("answer:".into());
            lines.push(a.trim_end().to_string());
        }
        None => lines.push("(no answer)".into()),
    }
    lines.join("\n") + "\n"
}

/// Where the run's task file is now, as [`again`] found it (`None`: the
/// summary's task is not the task of the folder it is in).
fn task_file(run: &ListedRun, to_do: Option<&Again>) -> String {
    let s = &run.summary;
    match to_do {
        None => "unknown: the summary's task is not the task of the folder it is in".into(),
        Some(_) if s.dry_run || s.replay_of.is_some() => "not moved (a dry run or a replay)".into(),
        Some(Again::Requeue(back) | Again::Rerun(back)) => back.file.display().to_string(),
        Some(Again::Waiting(file)) => format!("{} (in the inbox)", file.display()),
        Some(Again::Recurring { file, .. }) => {
            format!(
                "{} (a recurring task: its file stays there)",
                file.display()
            )
        }
        Some(Again::Gone) => "in no task folder (pruned, moved by hand, or run by exec)".into(),
    }
}

/// What `show` adds for a run that failed or was interrupted: the last
/// tool error, what runs it again (`to_do`, run as `program`), and the
/// last lines of its `run.log`, each escaped and clipped to one line.
fn failure_lines(to_do: Option<&Again>, program: &str, failure: &FailureDetail) -> Vec<String> {
    let one = |field: &str| printable(&clip(field, LINE_CHARS)).into_owned();
    let mut lines = Vec::new();
    if let Some(t) = &failure.last_tool_error {
        lines.push(format!(
            "tool error  turn {}, {}: {}",
            t.turn,
            one(&t.name),
            printable(&one_line(&t.result, LINE_CHARS))
        ));
    }
    if let Some(to_do) = to_do {
        lines.push(format!("again       {}", one(&to_do.said(program))));
    }
    for why in &failure.not_loaded {
        lines.push(format!("not read    {}", one(why)));
    }
    if !failure.log_tail.is_empty() {
        lines.push(String::new());
        lines.push(format!(
            "run.log, its last {} line(s):",
            failure.log_tail.len()
        ));
        lines.extend(failure.log_tail.iter().map(|l| format!("  {}", one(l))));
    }
    lines
}
