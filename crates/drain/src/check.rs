//! `check`'s view of the inbox: every task file read and parsed as a run
//! would, with nothing run and nothing moved.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;
use chrono::{DateTime, NaiveDate, Utc};

use super::folders;
use super::prepare::{Origin, ResolveWith, resolve};
use super::recurring;
use super::slips;
use harness_config::{Config, McpTransport};
use harness_inbox::{self as inbox, TaskFile, TaskProblem};
use harness_state::{DaySpend, Found, SPEND_FILE, Slots, day_of};
use harness_tools::{Tool, ToolName, Toolbox};

/// What `check` found in the inbox.
#[derive(Debug, Default)]
pub struct CheckReport {
    pub tasks: usize,
    /// `file: message`: problems of the configuration itself (a `run`
    /// refuses to start with them).
    pub config_problems: Vec<String>,
    /// `file: message`: what in the configuration makes some tasks invalid.
    pub config_warnings: Vec<String>,
    /// `file:line: message`: each makes the task invalid.
    pub problems: Vec<String>,
    /// `file: message`: risks the operator should decide on; not errors.
    pub warnings: Vec<String>,
    /// Each recurring task: `NAME: next due …` (a bad schedule is a problem).
    pub recurring: Vec<String>,
    /// Today's spend against each `[budget]` limit, when one is set.
    pub budget: Option<String>,
    /// What the config does that is said, not judged (the `[model.extra]`
    /// keys sent untouched).
    pub notes: Vec<String>,
}

/// `check`: validates every inbox task against the config without calling
/// anything, and warns about tasks that could leak notes.
pub fn check_inbox(
    cfg: &Config,
    offered: &[Tool],
    now: DateTime<Utc>,
) -> anyhow::Result<CheckReport> {
    let today = now.date_naive();
    let in_config = |p: String| format!("{}: {p}", cfg.path.display());
    let named = profiles_named(cfg);
    let mut report = CheckReport {
        config_problems: Toolbox::unknown_profile_tools(cfg)
            .into_iter()
            .chain(folders::check_inbox(&cfg.paths.inbox).err())
            .chain(folders::clashes(cfg))
            .chain(folders::linked(cfg))
            .chain(folders::unwritable(cfg, true))
            .chain(mcp_commands(cfg))
            .chain(slips::placeholders(cfg))
            .map(in_config)
            .collect(),
        // A profile no task names makes nothing invalid (the example's
        // research-scout before noteworx is set up): only the used ones.
        config_warnings: Toolbox::unoffered_profile_tools(cfg, |p| named.contains(p))
            .into_iter()
            .chain(slips::recurring_near_misses(cfg))
            .chain(slips::unused_mail(cfg))
            .map(in_config)
            .collect(),
        ..CheckReport::default()
    };
    let (extra, misspelt) = slips::extra_keys(cfg);
    report.notes.extend(extra.map(in_config));
    report
        .config_warnings
        .extend(misspelt.into_iter().map(in_config));
    if folders::check_inbox(&cfg.paths.inbox).is_ok()
        && let Err(e) = check_tasks(cfg, offered, today, &mut report)
    {
        report
            .config_problems
            .push(format!("{}: [paths] inbox: {e:#}", cfg.path.display()));
    }
    check_recurring(cfg, offered, now, &mut report);
    report.budget = budget_standing(cfg, now, &mut report.warnings);
    Ok(report)
}

/// `budget on 2026-11-26 (Europe/Berlin): 1200 of 100000 tokens
/// (tokens_per_day), …`: what the ledger says today spent, against each
/// limit set; an unreadable ledger is a warning and counts as nothing.
fn budget_standing(cfg: &Config, now: DateTime<Utc>, warnings: &mut Vec<String>) -> Option<String> {
    let limits = &cfg.budget;
    if !limits.any() {
        return None;
    }
    let today = day_of(now, &cfg.timezone);
    let state_dir = cfg.paths.state_dir();
    let path = state_dir.join(SPEND_FILE);
    let spent = match DaySpend::find(&state_dir, today) {
        Found::Today(spent) => spent,
        Found::Absent | Found::Earlier => DaySpend::nothing(today),
        Found::Distrusted(why) => {
            warnings.push(format!(
                "{}: warning: the budget ledger is not trusted ({why}); a run counts from 0 and replaces it with its own count (a problem of the run)",
                path.display()
            ));
            DaySpend::nothing(today)
        }
        Found::Unreadable(why) => {
            warnings.push(format!(
                "{}: warning: budget ledger unreadable ({why}); today's spend counts from 0",
                path.display()
            ));
            DaySpend::nothing(today)
        }
    };
    let reached = |spent: u64, limit: u64| if spent >= limit { " — reached" } else { "" };
    let mut parts = Vec::new();
    if limits.tokens_per_day > 0 {
        parts.push(format!(
            "{} of {} tokens (tokens_per_day){}",
            spent.tokens,
            limits.tokens_per_day,
            reached(spent.tokens, limits.tokens_per_day)
        ));
    }
    if limits.gpu_seconds_per_day > 0 {
        parts.push(format!(
            "{:.1} of {} GPU-seconds (gpu_seconds_per_day){}",
            spent.gpu_ms as f64 / 1000.0,
            limits.gpu_seconds_per_day,
            reached(
                spent.gpu_ms,
                limits.gpu_seconds_per_day.saturating_mul(1000)
            )
        ));
    }
    if limits.tokens_per_run > 0 {
        parts.push(format!(
            "at most {} tokens a run (tokens_per_run)",
            limits.tokens_per_run
        ));
    }
    Some(format!(
        "budget on {today} ({}): {}",
        cfg.timezone,
        parts.join(", ")
    ))
}

/// The profiles the inbox and recurring tasks name (`agent = "NAME"`).
fn profiles_named(cfg: &Config) -> BTreeSet<String> {
    let inboxed = inbox::list(&cfg.paths.inbox).unwrap_or_default();
    let recurring = recurring::list(cfg).unwrap_or_default();
    inboxed
        .iter()
        .chain(recurring.iter().map(|r| &r.entry))
        .filter_map(|e| inbox::read_task(&e.path).ok()?.frontmatter.agent)
        .collect()
}

/// Each stdio MCP server whose program would not start (docs/operating.md,
/// "Commands"): not found, not a file, not executable.
fn mcp_commands(cfg: &Config) -> Vec<String> {
    cfg.mcp
        .iter()
        .filter_map(|server| match &server.transport {
            McpTransport::Stdio(command) => command
                .executable()
                .err()
                .map(|why| format!("[mcp.servers.{}] command: {why}", server.name)),
            McpTransport::Http { .. } => None,
        })
        .collect()
}

/// `check` for each inbox entry: its problems, its risks, and entries that
/// will never run.
fn check_tasks(
    cfg: &Config,
    offered: &[Tool],
    today: NaiveDate,
    report: &mut CheckReport,
) -> anyhow::Result<()> {
    let inbox::Entries {
        tasks: entries,
        strays,
    } = inbox::listing(&cfg.paths.inbox)
        .with_context(|| format!("listing {}", cfg.paths.inbox.display()))?;
    report.tasks = entries.len();
    for p in strays {
        let shown = harness_base::text::printable(&p.display().to_string()).into_owned();
        match inbox::reserved_entry(&p) {
            Some(why) => report.problems.push(format!("{shown}: {why}")),
            None => report.warnings.push(format!(
                "{shown}: warning: it will never run (only NAME.md files run: lower-case .md, not hidden, not a folder, no `..` or control character in NAME)"
            )),
        }
    }
    for e in &entries {
        match check_task(
            cfg,
            offered,
            &e.name,
            &e.path,
            inbox::read_task(&e.path),
            today,
        ) {
            Ok(warnings) => report.warnings.extend(warnings),
            Err(problem) => report.problems.push(problem),
        }
    }
    Ok(())
}

/// One inbox task file, as read, resolved as a run would, calling
/// nothing: its warnings (`FILE: warning: …`), or its problem
/// (`FILE:LINE: …`). `check` and `submit` both judge a task file by this.
pub fn check_task(
    cfg: &Config,
    offered: &[Tool],
    name: &str,
    path: &Path,
    read: Result<TaskFile, TaskProblem>,
    today: NaiveDate,
) -> Result<Vec<String>, String> {
    let offer = checked_offer(cfg, offered, today);
    let result = read.and_then(|mut f| resolve(cfg, name, Origin::Inbox, &mut f, &offer));
    match result {
        Ok(spec) => Ok(exfiltration_risk(cfg, &spec.tools)
            .map(|w| format!("{}: {w}", path.display()))
            .into_iter()
            .collect()),
        Err(p) => {
            let at = p
                .line
                .map(|l| format!("{}:{l}", path.display()))
                .unwrap_or_else(|| path.display().to_string());
            Err(format!("{at}: {}", p.message))
        }
    }
}

/// What `check` resolves a task with: the tools offered, no MCP listing
/// (nothing is started), the configured window, today.
fn checked_offer<'a>(cfg: &Config, offered: &'a [Tool], today: NaiveDate) -> ResolveWith<'a> {
    ResolveWith {
        offered,
        mcp_listed: false,
        context_tokens: (cfg.limits.context_tokens > 0).then_some(cfg.limits.context_tokens),
        dry_run: false,
        today,
    }
}

/// A task that can read notes and fetch any URL could be talked (by a note
/// or a page) into fetching a URL that carries note text out.
fn exfiltration_risk(cfg: &Config, tools: &[Tool]) -> Option<String> {
    let reads_notes = tools.iter().any(|t| t.is_noteworx() && !t.is_write());
    let fetches_anywhere = tools.contains(&Tool::Builtin(ToolName::Webfetch))
        && cfg
            .webfetch
            .as_ref()
            .is_some_and(|w| w.allow_hosts.is_empty());
    (reads_notes && fetches_anywhere).then(|| {
        "warning: this task may read notes and fetch any URL ([tools.webfetch] allow_hosts is empty), \
         so a fetched page or a note could lead the model to put note text in a URL it fetches; \
         narrow its tools or set allow_hosts"
            .to_string()
    })
}

/// Each recurring task read as a run would (its schedule, its frontmatter
/// against the config), when it is next due, and a name it shares with an
/// inbox task (their runs would share `logs/NAME/`).
fn check_recurring(cfg: &Config, offered: &[Tool], now: DateTime<Utc>, report: &mut CheckReport) {
    let Some(tasks) = recurring::list(cfg) else {
        if cfg.paths.recurring.exists() {
            report.problems.push(format!(
                "{}: [paths] recurring: cannot be listed",
                cfg.paths.recurring.display()
            ));
        }
        return;
    };
    for p in inbox::listing(&cfg.paths.recurring)
        .map(|l| l.strays)
        .unwrap_or_default()
    {
        if let Some(why) = inbox::reserved_entry(&p) {
            report.problems.push(format!("{}: {why}", p.display()));
        }
    }
    let state = Slots::load(&cfg.paths.state_dir());
    let inboxed = inbox::list(&cfg.paths.inbox).unwrap_or_default();
    let offer = checked_offer(cfg, offered, now.date_naive());
    for (task, upcoming) in tasks
        .iter()
        .zip(recurring::next_slots(cfg, &tasks, now, &state))
    {
        let name = upcoming.task;
        let tz = &cfg.timezone;
        let when = upcoming.next.map(|next| match next {
            recurring::NextSlot::DueNow(at) => {
                format!("due now (slot {})", at.with_timezone(tz).to_rfc3339())
            }
            recurring::NextSlot::At(at) => {
                format!("next due {}", at.with_timezone(tz).to_rfc3339())
            }
        });
        let path = task.entry.path.display();
        let origin = Origin::Recurring(None);
        let resolved = inbox::read_task(&task.entry.path)
            .and_then(|mut f| resolve(cfg, &name, origin, &mut f, &offer));
        match (when, resolved) {
            (Err(why), _) => report.problems.push(format!("{path}: {why}")),
            (Ok(_), Err(p)) => report.problems.push(format!("{path}: {p}")),
            (Ok(when), Ok(_)) => report
                .recurring
                .push(format!("{path}: recurring {name}: {when}")),
        }
        if inboxed.iter().any(|e| e.name == name) {
            report.warnings.push(format!(
                "{path}: warning: an inbox task has the same name; their runs share logs/{name}/"
            ));
        }
    }
}
