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
use harness_base::text::{printable, printable_json};
use harness_base::zone::Zone;
use harness_config::Config;
use harness_display::Progress;
use harness_drain::{Again, again};
use harness_outputs::show::{self, Found};
use harness_records::{self as records, ListedRun, Listing, Status};

/// Lines of `run.log` a failed run shows.
const LOG_LINES: usize = 10;

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
    let run = match chosen(cfg, &listing, which, progress) {
        Ok(run) => run,
        Err(code) => return code,
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
    let s = &run.summary;
    // Only a task run of this folder's task is looked for (a crafted
    // summary names no other task's file).
    let own = harness_inbox::check_task_name(&s.task).is_ok()
        && harness_inbox::fit_file_name("", &s.task, "") == run.task_dir;
    let to_do = own.then(|| again(&cfg.paths, &s.task, &run.run_dir, s.recurring));
    let found = Found {
        task_file: task_file(run, to_do.as_ref()),
        // A replay ran no task file: nothing of it runs again.
        again: (to_do.as_ref())
            .filter(|_| s.replay_of.is_none())
            .map(|to_do| to_do.said(&harness_drain::program(cfg))),
        failure: failure.as_ref(),
        answer: answer.as_deref(),
    };
    let text = show::text(run, zone, &found);
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

/// The newest run that `which` names, or the exit code when none does
/// (said on stderr).
fn chosen<'a>(
    cfg: &Config,
    listing: &'a Listing,
    which: Option<&str>,
    progress: &Progress,
) -> Result<&'a ListedRun, u8> {
    let runs = matching(&listing.runs, which);
    match runs.as_slice() {
        // Folders it could not read may hold it: the permission problem
        // said above is the answer, not "no run".
        [] if !listing.unreadable.is_empty() => Err(exit::FAILED),
        [] => {
            progress.eprintln(&format!(
                "agent-harness: {} in {}",
                match which {
                    None => "no run is recorded".to_string(),
                    Some(w) if !w.contains('/') && records::run_time(w).is_none() => {
                        progress.eprintln(&format!("agent-harness: {}", no_run_of(cfg, w)));
                        return Err(exit::USAGE);
                    }
                    Some(w) => format!("no run matches {:?}", printable(w)),
                },
                cfg.paths.logs.display()
            ));
            Err(exit::USAGE)
        }
        [run] => Ok(run),
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
            Ok(run)
        }
        [run, ..] => Ok(run),
    }
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
