//! A task made ready to run: its file read, the rules every task file
//! meets checked (for `run` and `check` alike, [`resolve`]), a recurring
//! task's slot filled in, the MCP servers it may use started and their
//! tools offered with the configuration's, and everything resolved into a
//! [`TaskSpec`] — or the reason it cannot start.

use chrono::NaiveDate;

use super::{Mode, Slot};
use crate::agent::deps::TaskDeps;
use crate::agent::{TaskInput, TaskSpec};
use crate::config::Config;
use crate::inbox::{self, InboxEntry, TaskFile, TaskProblem};
use crate::tools::Tool;
use crate::tools::mcp::servers_for;

/// Where a task file comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Origin<'a> {
    /// The inbox (or `exec`): it has no schedule.
    Inbox,
    /// `[paths] recurring`: it has a schedule; run for a slot, its body's
    /// `{{date}}` and `{{last_success}}` are the slot's.
    Recurring(Option<&'a Slot>),
}

/// What a task is resolved with besides its file.
pub(super) struct Offer<'a> {
    pub(super) offered: &'a [Tool],
    /// The MCP servers' tools were listed (a name none lists is no typo).
    pub(super) mcp_listed: bool,
    pub(super) context_tokens: Option<u32>,
    pub(super) dry_run: bool,
    pub(super) today: NaiveDate,
}

/// The one way a task file becomes a spec, for `run` and `check` alike:
/// [`fit`] to where it comes from, then resolved against the config.
pub(super) fn resolve(
    cfg: &Config,
    (name, origin): (&str, Origin<'_>),
    file: &mut TaskFile,
    offer: &Offer<'_>,
) -> Result<TaskSpec, TaskProblem> {
    fit(origin, file)?;
    spec_of(cfg, name, file, offer)
}

/// A schedule only where the task is recurring; a slot's date filled in.
fn fit(origin: Origin<'_>, file: &mut TaskFile) -> Result<(), TaskProblem> {
    match (origin, &file.frontmatter.schedule) {
        (Origin::Inbox, Some(_)) => Err(TaskProblem::new(None, inbox::ONLY_RECURRING)),
        (Origin::Recurring(_), None) => Err(TaskProblem::new(None, inbox::RECURRING_NEEDS_ONE)),
        (Origin::Recurring(Some(slot)), Some(_)) => {
            let last = slot
                .last_success
                .map_or_else(|| "never".to_string(), |d| d.to_string());
            file.body = file
                .body
                .replace("{{date}}", &slot.date.to_string())
                .replace("{{last_success}}", &last);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The fitted file's frontmatter and body resolved against the config.
fn spec_of(
    cfg: &Config,
    name: &str,
    file: &TaskFile,
    offer: &Offer<'_>,
) -> Result<TaskSpec, TaskProblem> {
    TaskSpec::resolve(
        cfg,
        &TaskInput {
            name,
            frontmatter: &file.frontmatter,
            body: &file.body,
            offered: offer.offered,
            mcp_listed: offer.mcp_listed,
            context_tokens: offer.context_tokens,
            dry_run: offer.dry_run,
            today: offer.today,
        },
    )
}

/// What preparing a task logged: `run.log` lines, and the MCP servers it
/// was not offered because they are down.
#[derive(Debug, Default)]
pub(super) struct PrepLog {
    pub(super) lines: Vec<String>,
    pub(super) servers_down: Vec<String>,
}

/// Why a task cannot start.
pub(super) enum StartFailure {
    /// The task file or its settings are wrong: `invalid_task`.
    Invalid(TaskProblem),
    /// An MCP server it may use is not there: retryable
    /// `tool_server_unavailable` (SPEC §19).
    Unavailable(String),
    /// The run was stopped while its MCP servers started.
    Interrupted,
}

impl From<TaskProblem> for StartFailure {
    fn from(p: TaskProblem) -> StartFailure {
        StartFailure::Invalid(p)
    }
}

/// What tasks of one batch are prepared with.
pub(super) struct Preparer<'a> {
    pub(super) cfg: &'a Config,
    pub(super) deps: &'a TaskDeps,
    pub(super) mode: &'a Mode,
    pub(super) context_tokens: Option<u32>,
}

impl Preparer<'_> {
    /// The task file read and resolved against the config; `resumed_today`
    /// is the date of the run it goes on from.
    pub(super) async fn prepare(
        &self,
        entry: &InboxEntry,
        resumed_today: Option<NaiveDate>,
        log: &mut PrepLog,
    ) -> Result<(TaskFile, TaskSpec), StartFailure> {
        let mut file = inbox::read_task(&entry.path)?;
        let origin = match &self.mode.slot {
            Some(slot) => Origin::Recurring(Some(slot)),
            None => Origin::Inbox,
        };
        fit(origin, &mut file)?;
        let offered = self.offered(&file, log).await?;
        let offer = Offer {
            offered: &offered,
            mcp_listed: self.deps.toolbox.mcp.is_some(),
            context_tokens: self.context_tokens,
            dry_run: self.mode.dry_run,
            today: self.today(resumed_today),
        };
        let spec = spec_of(self.cfg, &entry.name, &file, &offer)?;
        Ok((file, spec))
    }

    /// The date the task's prompts are built with: a recurring task's slot
    /// date (in a replay too), else the date of the run it resumes, a
    /// replay's recorded date, or today.
    pub(super) fn today(&self, resumed: Option<NaiveDate>) -> NaiveDate {
        (self.mode.slot.as_ref().map(|s| s.date))
            .or(resumed)
            .or(self.mode.today)
            .unwrap_or_else(|| (self.deps.clock)().date_naive())
    }

    /// The MCP servers the task may use started (once per run), and their
    /// tools with the configuration's. A task that names its tools needs
    /// every server it names; one that names none is offered the servers
    /// that are up, and told which are not (SPEC §22).
    async fn offered(&self, file: &TaskFile, log: &mut PrepLog) -> Result<Vec<Tool>, StartFailure> {
        let mut offered = self.deps.toolbox.offered();
        let Some(mcp) = &self.deps.toolbox.mcp else {
            return Ok(offered);
        };
        let names = TaskSpec::tool_names(self.cfg, &file.frontmatter)?;
        let servers = servers_for(&self.cfg.mcp, names);
        if servers.is_empty() {
            return Ok(offered);
        }
        let (ready, down) = tokio::select! {
            r = mcp.ready(&servers) => r,
            () = self.deps.cancel.cancelled() => return Err(StartFailure::Interrupted),
        };
        log.lines.extend(ready.log_lines);
        if names.is_some()
            && let Some(first) = down.first()
        {
            return Err(StartFailure::Unavailable(first.why.why.clone()));
        }
        for d in down {
            log.lines.push(format!(
                "MCP server {} is not offered (the task names no tools, so it runs without them): {}",
                d.server, d.why.why
            ));
            log.servers_down.push(d.server);
        }
        offered.extend(ready.tools.into_iter().map(Tool::Mcp));
        Ok(offered)
    }
}
