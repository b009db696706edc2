//! The records read back: `runs`, `show` and `report` (docs/operating.md,
//! "Records" and "Report"). They read the config like `run` does, but none of
//! its secrets, and the logs folder as hostile input. What the operator reads
//! the morning after must be true: a folder this user may not read is a
//! permission problem naming the key and the user to run as, never "no runs
//! recorded"; a folder dated more than an hour ahead of the clock is named as
//! no run, never "the newest run"; and every one-line field a record gives is
//! printed escaped, on a terminal or not, in text and JSON alike
//! (docs/untrusted-input.md).

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::cli::Command;
use super::exit;
use harness_agent::deps::system_clock;
use harness_base::folder::Folder;
use harness_base::text::{clip, printable, printable_json, table};
use harness_config::Config;
use harness_display::Progress;
use harness_outputs::report;
use harness_records::{self as records, ListedRun, Listing, Summary, read_summaries};

/// `runs`, `show` or `report`.
pub(super) fn logs_command(cfg: &Config, command: &Command, progress: &Progress) -> u8 {
    match command {
        Command::Report { out, task, limit } => {
            report_command(cfg, out.as_deref(), task, *limit, progress)
        }
        Command::Show { which, json } => show_command(cfg, which.as_deref(), *json, progress),
        Command::Runs { task, limit, json } => {
            runs_command(cfg, task.as_deref(), *limit, *json, progress)
        }
        _ => exit::USAGE,
    }
}

/// `path` cannot be read by this user: the key it is under, and whom to
/// run as (the folder's owner, when its name can be read).
pub(super) fn permission_problem(key: &str, path: &Path, command: &str) -> String {
    let owner = std::fs::metadata(path)
        .ok()
        .and_then(|m| user_name(m.uid()))
        .map(|name| format!(": sudo -u {name} agent-harness {command}"))
        .unwrap_or_default();
    format!(
        "{key}: {} cannot be read by this user (permission denied); run it as the user that owns it{owner}",
        printable(&path.display().to_string())
    )
}

/// The name `/etc/passwd` gives the user id `uid`.
fn user_name(uid: u32) -> Option<String> {
    let passwd = harness_base::file::read_regular(
        Path::new("/etc/passwd"),
        4 << 20,
        harness_base::file::Links::Follow,
    )
    .ok()?;
    String::from_utf8_lossy(&passwd).lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

fn report_command(
    cfg: &Config,
    out: Option<&Path>,
    task: &Option<String>,
    limit: usize,
    progress: &Progress,
) -> u8 {
    let logs = &cfg.paths.logs;
    let opts = report::ReportOptions {
        out: out.map_or_else(|| logs.join("report"), Path::to_path_buf),
        task: task.clone(),
        limit,
    };
    let mut warn = |line: String| progress.eprintln(&format!("agent-harness: {line}"));
    match report::write(logs, &opts, (system_clock())(), &mut warn) {
        Ok(written) => {
            for path in &written.unreadable {
                progress.eprintln(&format!(
                    "agent-harness: {}",
                    permission_problem("[paths] logs", path, "report")
                ));
            }
            let shown = std::fs::canonicalize(&written.index).unwrap_or(written.index);
            let evals = match written.evals {
                0 => String::new(),
                n => format!(" and {n} eval(s)"),
            };
            let _ = writeln!(
                progress.stdout(),
                "report of {} run(s){evals}: file://{}",
                written.runs,
                shown.display()
            );
            if written.unreadable.is_empty() {
                exit::OK
            } else {
                exit::FAILED
            }
        }
        Err(e) => {
            let denied = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
            });
            let line = match e.downcast_ref::<records::Unreadable>() {
                Some(records::Unreadable(path)) => {
                    permission_problem("[paths] logs", path, "report")
                }
                None if denied => format!(
                    "{e:#}: this user may not write the report there; run it as the user that owns it, or write it elsewhere with --out DIR"
                ),
                None => format!("{e:#}"),
            };
            progress.eprintln(&format!("agent-harness: {line}"));
            exit::FAILED
        }
    }
}

/// The listing of `logs`, its skipped and unreadable folders said on
/// stderr; `Err` with the exit code when the logs folder itself cannot be
/// read (nothing listed would be true).
fn listing(cfg: &Config, command: &str, progress: &Progress) -> Result<records::Listing, u8> {
    let logs = &cfg.paths.logs;
    let now = (system_clock())();
    let listing = read_summaries(logs, now);
    for path in &listing.unreadable {
        progress.eprintln(&format!(
            "agent-harness: {}",
            permission_problem("[paths] logs", path, command)
        ));
    }
    if let Some(why) = &listing.broken {
        progress.eprintln(&format!("agent-harness: [paths] logs: {}", printable(why)));
        return Err(exit::FAILED);
    }
    if listing.unreadable.iter().any(|p| p == logs) {
        return Err(exit::FAILED);
    }
    for why in &listing.skipped {
        progress.eprintln(&format!("agent-harness: skipped {}", printable(why)));
    }
    for dir in &listing.ahead {
        progress.eprintln(&format!(
            "agent-harness: skipped {}",
            printable(&Listing::ahead_line(dir, now))
        ));
    }
    Ok(listing)
}

fn runs_command(
    cfg: &Config,
    task: Option<&str>,
    limit: usize,
    json: bool,
    progress: &Progress,
) -> u8 {
    let listing = match listing(cfg, "runs", progress) {
        Ok(listing) => listing,
        Err(code) => return code,
    };
    let mut summaries = listing.summaries();
    let mut incomplete = listing.incomplete;
    if let Some(t) = task {
        summaries.retain(|s| s.task == t);
        incomplete.retain(|dir| dir.parent().and_then(Path::file_name) == Some(t.as_ref()));
        // A name that matches no run is said (where that task is, or the
        // names near it), not printed as an empty table.
        if summaries.is_empty() && incomplete.is_empty() && listing.unreadable.is_empty() {
            progress.eprintln(&format!("agent-harness: {}", no_run_of(cfg, t)));
            return exit::USAGE;
        }
    }
    if !incomplete.is_empty() {
        let dirs: Vec<String> = incomplete.iter().map(|d| d.display().to_string()).collect();
        progress.eprintln(&format!(
            "agent-harness: {} run folder(s) without a readable summary.json (still running, killed mid-run, or not a run): {}",
            dirs.len(),
            printable(&dirs.join(", "))
        ));
    }
    summaries.truncate(limit);
    let mut out = progress.stdout();
    let written = if json {
        serde_json::to_string_pretty(&summaries)
            .map_err(std::io::Error::other)
            .and_then(|s| writeln!(out, "{}", printable_json(&s)))
    } else {
        let mut text = runs_table(&summaries);
        // With folders it could not read, "no runs" would not be true.
        if summaries.is_empty() && listing.unreadable.is_empty() {
            text.push_str("(no runs recorded)\n");
        }
        write!(out, "{text}")
    }
    .and_then(|()| out.flush());
    match written {
        Ok(()) if listing.unreadable.is_empty() => exit::OK,
        Ok(()) => exit::FAILED,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e}"));
            exit::FAILED
        }
    }
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

/// The `runs` table: task, run id, status, stop reason, turns, tool
/// errors, tokens, wall time, the answer's first line — and, when any run
/// listed is a recurring task's, its slot.
pub(crate) fn runs_table(summaries: &[Summary]) -> String {
    let slots = summaries.iter().any(|s| s.slot.is_some());
    let mut header = vec![
        "TASK",
        "RUN ID",
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
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            let status = s.status.as_str().to_string();
            let cell = |t: &str| printable(t).into_owned();
            let mut row = vec![
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
            ];
            if slots {
                row.push(cell(s.slot.as_deref().unwrap_or("-")));
            }
            row.push(answer_cell(s.final_answer.as_deref()));
            row
        })
        .collect();
    table(&header, &rows)
}

/// `show [NAME|RUN_ID|NAME/RUN_ID] [--json]`: one run, the newest that
/// matches; exit 2 when none does.
fn show_command(cfg: &Config, which: Option<&str>, json: bool, progress: &Progress) -> u8 {
    let listing = match listing(cfg, "show", progress) {
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
    let answer = Folder::open_root(&cfg.paths.logs)
        .ok()
        .and_then(|logs| records::answer_of(&logs, run));
    let text = show_text(cfg, run, answer.as_deref());
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

/// Task `name` has no run recorded: where it is instead, or the names near it.
fn no_run_of(cfg: &Config, name: &str) -> String {
    let wants = format!("no run of it is recorded in {}/", cfg.paths.logs.display());
    printable(&harness_inbox::whereabouts(&cfg.paths, name).say(
        &cfg.paths,
        harness_inbox::Place::Logs,
        &wants,
    ))
    .into_owned()
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
/// break or an escape sequence in a record forges no line), the answer as
/// it is.
fn show_text(cfg: &Config, run: &ListedRun, answer: Option<&str>) -> String {
    let s = &run.summary;
    let one = |field: &str| printable(field).into_owned();
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
        s.started_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        s.finished_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
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
    lines.push(format!("task file   {}", one(&task_file(cfg, run))));
    lines.push(format!(
        "records     {}",
        one(&run.dir.display().to_string())
    ));
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

/// Where the run's task file is now, as the folders say. The summary's
/// task name is used only when it is a task name and the one of the
/// folder the run sits in (a crafted summary builds no path).
fn task_file(cfg: &Config, run: &ListedRun) -> String {
    let s = &run.summary;
    if harness_inbox::check_task_name(&s.task).is_err()
        || harness_inbox::fit_file_name("", &s.task, "") != run.task_dir
    {
        return "unknown: the summary's task is not the task of the folder it is in".into();
    }
    if s.recurring {
        return "a recurring task: its file stays in [paths] recurring".into();
    }
    if s.dry_run || s.replay_of.is_some() {
        return "not moved (a dry run or a replay)".into();
    }
    let filed = [&cfg.paths.done, &cfg.paths.failed]
        .into_iter()
        .find_map(|dir| harness_inbox::filed_as(dir, &s.run_id, &s.task));
    let left = s.status == harness_records::Status::Interrupted || s.retryable;
    match filed {
        Some(path) => path.display().to_string(),
        None if left => {
            let inbox: PathBuf = cfg.paths.inbox.join(format!("{}.md", s.task));
            let now = if std::fs::symlink_metadata(&inbox).is_ok() {
                "it is there now"
            } else {
                "it is no longer there"
            };
            format!("left in the inbox by this run ({}; {now})", inbox.display())
        }
        None => "not found in done/ or failed/ (pruned, moved by hand, or run by exec)".into(),
    }
}
