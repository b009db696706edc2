//! What a run has to do (docs/operating.md, "Commands"; docs/tasks.md,
//! "Recurring tasks"; README, Exit codes):
//! the inbox entries (all of them, or the one `run-task` names), the
//! entries that will never run, said, and the recurring tasks due — with
//! the attempt counts of tasks no longer in the inbox forgotten and the
//! recurring state saved.

use std::path::{Path, PathBuf};

use super::recurring::{self, Due};
use super::{NameError, RunOptions};
use harness_agent::deps::TaskDeps;
use harness_config::Config;
use harness_inbox::{self as inbox, InboxEntry};
use harness_state::{Attempts, Slots};

/// What a run has to do: inbox entries, then recurring tasks due.
pub(super) struct ToRun {
    pub(super) entries: Vec<InboxEntry>,
    pub(super) due: Vec<Due>,
    pub(super) state: Slots,
    /// What the operator must fix that no task's record says (README, Exit codes).
    pub(super) problems: Vec<String>,
    /// Inbox entries that will never run.
    pub(super) strays: usize,
}

impl ToRun {
    /// The tasks a run would start: inbox entries and slots due.
    pub(super) fn len(&self) -> usize {
        self.entries.len() + self.due.len()
    }
}

/// The inbox entries and the recurring tasks due, as `opts` asks; the
/// recurring state with any task seen for the first time recorded.
pub(super) fn to_run(cfg: &Config, deps: &TaskDeps, opts: &RunOptions) -> anyhow::Result<ToRun> {
    let state_dir = &cfg.paths.state_dir();
    let mut state = Slots::load(state_dir);
    let now = (deps.clock)();
    if opts.recurring {
        let name = opts.only.as_deref().unwrap_or_default();
        inbox::check_task_name(name).map_err(NameError)?;
        let tasks = recurring::list(cfg).unwrap_or_default();
        let one =
            recurring::now_slot(cfg, &tasks, name, now, &state).map_err(|e| NameError(e.0))?;
        return Ok(ToRun {
            entries: Vec::new(),
            due: vec![one],
            state,
            problems: Vec::new(),
            strays: 0,
        });
    }
    let inbox::Entries {
        tasks: mut entries,
        strays,
    } = inbox::listing(&cfg.paths.inbox)?;
    if !opts.batch.dry_run {
        forget_absent(state_dir, &entries);
    }
    let mut problems = Vec::new();
    if let Some(name) = &opts.only {
        inbox::check_task_name(name).map_err(NameError)?;
        entries.retain(|e| &e.name == name);
        if entries.is_empty() {
            let wants = format!(
                "run-task runs tasks from the inbox {}/",
                cfg.paths.inbox.display()
            );
            return Err(NameError(inbox::whereabouts(&cfg.paths, name).say(
                &cfg.paths,
                inbox::Place::Inbox,
                &wants,
            ))
            .into());
        }
        return Ok(ToRun {
            entries,
            due: Vec::new(),
            state,
            problems: Vec::new(),
            strays: 0,
        });
    }
    // A folder that cannot be listed is no empty one: its slots are kept.
    let strays = ignored_entries(cfg, strays, &mut problems);
    let tasks = recurring::list(cfg);
    let mut due = match &tasks {
        Some(tasks) => recurring::due(cfg, tasks, now, &mut state),
        None => Vec::new(),
    };
    if let Some(tasks) = tasks.as_ref().filter(|_| !opts.batch.dry_run)
        && let Err(e) = state.save(state_dir)
    {
        tracing::error!(error = %format!("{e:#}"), "cannot save the recurring state; no recurring task runs");
        // Unsaved, no slot could be counted or marked done: none runs,
        // and while there are recurring tasks the run says so (exit 1).
        if !tasks.is_empty() {
            problems.push(format!(
                "the recurring state cannot be saved, so no recurring task runs: {e:#}"
            ));
        }
        due.clear();
    }
    Ok(ToRun {
        entries,
        due,
        state,
        problems,
        strays,
    })
}

/// Drops the attempt counts of tasks no longer in the inbox (removed by
/// hand): a file put back under the same name starts afresh, and the state
/// file does not grow with names long gone. Runs under the run lock.
fn forget_absent(state_dir: &Path, entries: &[InboxEntry]) {
    let mut counts = Attempts::load(state_dir);
    if counts.retain(|name| entries.iter().any(|e| e.name == name))
        && let Err(e) = counts.save(state_dir)
    {
        tracing::warn!(error = %e, "cannot save the attempt counts");
    }
}

/// Inbox entries that will never run named in the log one by one; the
/// rest are counted in one line (docs/untrusted-input.md: nothing floods).
const NAMED_STRAYS: usize = 20;

/// Each inbox entry that will never run (not a `*.md` regular file: a
/// `.txt`, a `.MD`, a folder), logged — the first [`NAMED_STRAYS`] by name,
/// the others counted; one problem line for them all (the run exits 1 for
/// it: README, Exit codes). Their number, for the metrics.
fn ignored_entries(cfg: &Config, strays: Vec<PathBuf>, problems: &mut Vec<String>) -> usize {
    // A reserved name (`report.md`, `eval.md`: two at most) is said on its own, with why.
    let (reserved, strays): (Vec<_>, Vec<_>) = strays
        .into_iter()
        .partition(|p| inbox::reserved_entry(p).is_some());
    for path in strays.iter().take(NAMED_STRAYS) {
        tracing::warn!(entry = %harness_base::text::printable(&path.display().to_string()), "an inbox entry that will never run: only NAME.md files run (lower-case .md, not hidden, not a folder, no `..` or control character in NAME)");
    }
    let unnamed = strays.len().saturating_sub(NAMED_STRAYS);
    if unnamed > 0 {
        tracing::warn!(
            inbox = %harness_base::text::printable(&cfg.paths.inbox.display().to_string()),
            "and {unnamed} more inbox entries that will never run (not named, so the log does not flood)"
        );
    }
    for path in &reserved {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let why = inbox::reserved_entry(path).unwrap_or_default();
        tracing::warn!(entry = %harness_base::text::printable(&path.display().to_string()), "an inbox entry that will never run: {why}");
        problems.push(format!(
            "the inbox entry {} will never run: {why}",
            harness_base::text::printable(&name)
        ));
    }
    // A recurring task of a reserved name never runs either: said, not skipped.
    let recurring = inbox::listing(&cfg.paths.recurring)
        .map(|l| l.strays)
        .unwrap_or_default();
    for path in recurring
        .iter()
        .filter(|p| inbox::reserved_entry(p).is_some())
    {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let why = inbox::reserved_entry(path).unwrap_or_default();
        tracing::warn!(entry = %harness_base::text::printable(&path.display().to_string()), "a recurring task that will never run: {why}");
        problems.push(format!(
            "the recurring task {} will never run: {why}",
            harness_base::text::printable(&name)
        ));
    }
    if !strays.is_empty() {
        let names: Vec<String> = strays
            .iter()
            .take(10)
            .filter_map(|p| p.file_name())
            .map(|n| harness_base::text::printable(&n.to_string_lossy()).into_owned())
            .collect();
        let more = strays.len().saturating_sub(names.len());
        problems.push(format!(
            "{} inbox entr{} will never run (only NAME.md files run: lower-case .md, not hidden, not a folder, no `..` or control character in NAME): {}{}",
            strays.len(),
            if strays.len() == 1 { "y" } else { "ies" },
            names.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        ));
    }
    strays.len() + reserved.len()
}
