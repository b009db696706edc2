//! The records read back: `runs` and `report` (docs/operating.md, "Records",
//! "Report" and "The morning after"; `show` and `digest` are their own
//! files). They read the config like `run` does, but none of its secrets,
//! and the logs folder as hostile input. What the operator reads the
//! morning after must be true: a folder this user may not read is a
//! permission problem naming the key and the user to run as, never "no runs
//! recorded"; a folder dated more than an hour ahead of the clock is named
//! as no run, never "the newest run"; a run folder of the run holding the
//! lock is running, not a folder without a summary; and every one-line
//! field a record gives is printed escaped, on a terminal or not, in text
//! and JSON alike (docs/untrusted-input.md). Times are printed in
//! `[schedule] timezone` (`--utc`: UTC).

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use chrono::{DateTime, Utc};

use super::cli::Command;
use super::exit;
use harness_agent::deps::system_clock;
use harness_base::text::{printable, printable_json};
use harness_base::zone::Zone;
use harness_config::Config;
use harness_display::Progress;
use harness_outputs::{report, runs};
use harness_records::{self as records, Listing, Status, Unfinished};
use harness_state::{LockState, RunLock};

/// `runs`, `report` or `digest`.
pub(super) fn logs_command(cfg: &Config, command: &Command, progress: &Progress) -> u8 {
    match command {
        // Every run is read: a task's previous run may lie before `since`.
        Command::Digest { since, json } => match listing(cfg, "digest", progress, None) {
            Ok(runs) => {
                super::digest::digest_command(cfg, &runs, since.as_deref(), *json, progress)
            }
            Err(code) => code,
        },
        Command::Report { out, task, limit } => {
            report_command(cfg, out.as_deref(), task, *limit, progress)
        }
        Command::Runs {
            task,
            since,
            statuses,
            limit,
            json,
            utc,
        } => {
            let query = RunsQuery {
                task: task.as_deref(),
                since: since.as_deref(),
                statuses,
                limit: *limit,
                json: *json,
                zone: zone_of(cfg, *utc),
            };
            runs_command(cfg, &query, progress)
        }
        _ => exit::USAGE,
    }
}

/// The zone times are printed in: `[schedule] timezone`, or UTC.
pub(super) fn zone_of(cfg: &Config, utc: bool) -> Zone {
    if utc {
        Zone::utc()
    } else {
        cfg.timezone.clone()
    }
}

/// Since when the run holding the lock now has been going, when it is one
/// that runs tasks and noted its start (docs/operating.md, "The lock"):
/// looked at without taking the lock.
pub(super) fn going_since(cfg: &Config) -> Option<DateTime<Utc>> {
    match RunLock::state(&cfg.paths.state_dir()) {
        LockState::Held {
            holder: Some(holder),
            ..
        } if holder.runs_tasks() => Some(holder.since),
        _ => None,
    }
}

/// `path` cannot be read by this user: the key it is under, and whom to
/// run as (the folder's owner, when its name can be read), with the
/// config this run read ([`harness_drain::program`]).
pub(super) fn permission_problem(cfg: &Config, key: &str, path: &Path, command: &str) -> String {
    let owner = std::fs::metadata(path)
        .ok()
        .and_then(|m| user_name(m.uid()))
        .map(|name| format!(": sudo -u {name} {} {command}", harness_drain::program(cfg)))
        .unwrap_or_default();
    format!(
        "{key}: {} cannot be read by this user (permission denied); run it as the user that owns it{owner}",
        printable(&path.display().to_string())
    )
}

/// The name `/etc/passwd` gives the user id `uid`.
fn user_name(uid: u32) -> Option<String> {
    harness_base::owner::Accounts::read()
        .user(uid)
        .map(str::to_string)
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
                    permission_problem(cfg, "[paths] logs", path, "report")
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
                    permission_problem(cfg, "[paths] logs", path, "report")
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

/// The listing of `logs` (the runs started at or after `since`, when
/// given), its skipped and unreadable folders said on stderr; `Err` with
/// the exit code when the logs folder itself cannot be read (nothing
/// listed would be true).
pub(super) fn listing(
    cfg: &Config,
    command: &str,
    progress: &Progress,
    since: Option<DateTime<Utc>>,
) -> Result<records::Listing, u8> {
    let logs = &cfg.paths.logs;
    let now = (system_clock())();
    let listing = records::read_summaries_since(logs, now, since);
    for path in &listing.unreadable {
        progress.eprintln(&format!(
            "agent-harness: {}",
            permission_problem(cfg, "[paths] logs", path, command)
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

/// What `runs` was asked for.
struct RunsQuery<'a> {
    task: Option<&'a str>,
    /// `--since WHEN`, as typed.
    since: Option<&'a str>,
    /// `--status`: any of these (none: every status).
    statuses: &'a [Status],
    limit: usize,
    json: bool,
    zone: Zone,
}

fn runs_command(cfg: &Config, q: &RunsQuery<'_>, progress: &Progress) -> u8 {
    let since = match q.since.map(|w| since(cfg, w)).transpose() {
        Ok(since) => since,
        Err(why) => {
            progress.eprintln(&format!("agent-harness: --since: {why}"));
            return exit::USAGE;
        }
    };
    let listing = match listing(cfg, "runs", progress, since) {
        Ok(listing) => listing,
        Err(code) => return code,
    };
    let mut summaries = listing.summaries();
    let mut incomplete = listing.incomplete;
    if let Some(t) = q.task {
        summaries.retain(|s| s.task == t);
        let folder = harness_inbox::fit_file_name("", t, "");
        incomplete.retain(|u| u.task_dir == folder);
        // A name that matches no run is said (where that task is, or the
        // names near it), not printed as an empty table; `--json` prints
        // the empty list it asked for. Runs left out by `--since` are
        // still runs of it.
        let recorded = since.is_some() && has_runs(cfg, t);
        if summaries.is_empty()
            && incomplete.is_empty()
            && listing.unreadable.is_empty()
            && !recorded
        {
            progress.eprintln(&format!("agent-harness: {}", no_run_of(cfg, t)));
            if !q.json {
                return exit::USAGE;
            }
        }
    }
    let going = going_since(cfg);
    let (running, incomplete): (Vec<Unfinished>, Vec<_>) = incomplete
        .into_iter()
        .partition(|u| going.is_some_and(|since| records::started_since(&u.run_dir, since)));
    say_unfinished(&incomplete, progress);
    if !q.statuses.is_empty() {
        summaries.retain(|s| q.statuses.contains(&s.status));
    }
    // A run going now has no status of its own to match.
    let running = if q.statuses.is_empty() {
        running
    } else {
        Vec::new()
    };
    summaries.truncate(q.limit);
    let mut out = progress.stdout();
    let written = if q.json {
        serde_json::to_string_pretty(&runs::json(&running, &summaries))
            .map_err(std::io::Error::other)
            .and_then(|s| writeln!(out, "{}", printable_json(&s)))
    } else {
        let mut text = runs::table(&summaries, &running, &q.zone);
        // With folders it could not read, "no runs" would not be true.
        if summaries.is_empty() && running.is_empty() && listing.unreadable.is_empty() {
            let filtered = since.is_some() || !q.statuses.is_empty();
            text.push_str(if filtered {
                "(no run matches)\n"
            } else {
                "(no runs recorded)\n"
            });
        }
        write!(out, "{text}")
    }
    .and_then(|()| out.flush());
    exit::of_listing(written, listing.unreadable.is_empty(), progress)
}

/// The moment `--since WHEN` names (docs/operating.md, "The morning
/// after"): a date is its midnight in `[schedule] timezone`, `--utc` or
/// not (that flag is how times are printed).
fn since(cfg: &Config, when: &str) -> Result<DateTime<Utc>, String> {
    harness_base::time::since(when, (system_clock())(), &cfg.timezone)
}

/// Whether task `name` has a folder of runs in the logs.
fn has_runs(cfg: &Config, name: &str) -> bool {
    let folder = harness_inbox::fit_file_name("", name, "");
    cfg.paths.logs.join(folder).is_dir()
}

/// The run folders without a summary that are not the run going now's,
/// on stderr, as what they may be.
fn say_unfinished(others: &[Unfinished], progress: &Progress) {
    if !others.is_empty() {
        let shown: Vec<String> = others.iter().map(|u| u.dir.display().to_string()).collect();
        progress.eprintln(&format!(
            "agent-harness: {} run folder(s) without a readable summary.json (killed mid-run, or not a run): {}",
            others.len(),
            printable(&shown.join(", "))
        ));
    }
}

/// Task `name` has no run recorded: where it is instead, or the names near it.
pub(super) fn no_run_of(cfg: &Config, name: &str) -> String {
    let wants = format!("no run of it is recorded in {}/", cfg.paths.logs.display());
    printable(&harness_inbox::whereabouts(&cfg.paths, name).say(
        &cfg.paths,
        harness_inbox::Place::Logs,
        &wants,
    ))
    .into_owned()
}
