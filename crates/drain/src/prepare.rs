//! A task made ready to run, in two parts. [`Preparer::prepare`]: its file
//! read and fitted to where it comes from (a recurring task's slot filled
//! in), and the MCP servers it may use started — once per run — their tools
//! offered with the configuration's. [`Preparer::spec`], pure: what was
//! prepared resolved into the run's [`TaskSpec`], with the date its prompts
//! are built with and, going on from earlier records, the wall time they
//! left — so a resume refused only resolves again. [`resolve`] is the one
//! way a task file becomes a spec, for `run` and `check` alike; a task
//! that cannot start says why ([`StartFailure`]) and that is its outcome.

use std::path::Path;

use chrono::{DateTime, NaiveDate, Utc};

use super::resume::ResumePoint;
use super::{Mode, Slot};
use harness_agent::deps::TaskDeps;
use harness_agent::{Outcome, StopReason, TaskInput, TaskSpec};
use harness_config::Config;
use harness_inbox::{self as inbox, InboxEntry, TaskFile, TaskProblem};
use harness_records::RunRecord;
use harness_tools::Tool;
use harness_tools::mcp::servers_for;

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
pub(super) struct ResolveWith<'a> {
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
    name: &str,
    origin: Origin<'_>,
    file: &mut TaskFile,
    offer: &ResolveWith<'_>,
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
    offer: &ResolveWith<'_>,
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

/// A task prepared: its file read and fitted, and the tools it is offered.
pub(super) struct Prepared {
    pub(super) file: TaskFile,
    tools: Vec<Tool>,
    /// The MCP servers it is not offered because they are down.
    pub(super) servers_down: Vec<String>,
}

/// Why a task cannot start.
pub(super) enum StartFailure {
    /// The task file or its settings are wrong: `invalid_task`.
    Invalid(TaskProblem),
    /// An MCP server it may use is not there: retryable
    /// `tool_server_unavailable` (docs/tools.md, "Tools from MCP servers").
    Unavailable(String),
    /// The run was stopped while its MCP servers started.
    Interrupted,
}

impl From<TaskProblem> for StartFailure {
    fn from(p: TaskProblem) -> StartFailure {
        StartFailure::Invalid(p)
    }
}

impl StartFailure {
    /// Why the task in `path` could not start, in its records, as its outcome.
    pub(super) fn outcome(self, rec: &mut RunRecord, now: DateTime<Utc>, path: &Path) -> Outcome {
        match self {
            StartFailure::Invalid(problem) => {
                let error = rec.invalid_task(now, path, &problem);
                tracing::warn!(error = %error, "invalid task");
                Outcome::failed(StopReason::InvalidTask, error)
            }
            StartFailure::Unavailable(why) => {
                rec.log_line(now, &format!("{why}; the task stays in the inbox"));
                tracing::warn!(error = %why, "a tool server is unavailable; the task is tried again later");
                Outcome {
                    retryable: true,
                    ..Outcome::failed(StopReason::ToolServerUnavailable, why)
                }
            }
            StartFailure::Interrupted => {
                let why = "stopped by a signal while its MCP servers started";
                Outcome::failed(StopReason::Interrupted, why.into())
            }
        }
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
    /// The task file read and fitted to where it comes from, and the MCP
    /// servers it may use started; what starting them says goes to `rec`'s
    /// `run.log`.
    pub(super) async fn prepare(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
    ) -> Result<Prepared, StartFailure> {
        let mut file = inbox::read_task(&entry.path)?;
        let origin = match &self.mode.slot {
            Some(slot) => Origin::Recurring(Some(slot)),
            None => Origin::Inbox,
        };
        fit(origin, &mut file)?;
        let (tools, servers_down) = self.offered(&file, rec).await?;
        Ok(Prepared {
            file,
            tools,
            servers_down,
        })
    }

    /// The spec of run `run_id` resolved from what was prepared (pure):
    /// going on from the records of `from`, its prompts have that run's
    /// date.
    pub(super) fn spec(
        &self,
        name: &str,
        prepared: &Prepared,
        run_id: &str,
        from: Option<&ResumePoint>,
    ) -> Result<TaskSpec, TaskProblem> {
        let offer = ResolveWith {
            offered: &prepared.tools,
            mcp_listed: self.deps.toolbox.mcp.is_some(),
            context_tokens: self.context_tokens,
            dry_run: self.mode.dry_run,
            today: self.today(from.map(|p| p.today)),
        };
        Ok(spec_of(self.cfg, name, &prepared.file, &offer)?.for_run(run_id))
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
    /// tools with the configuration's; the servers it is not offered. A
    /// task that names its tools needs every server it names; one that
    /// names none is offered the servers that are up, and told which are
    /// not (docs/tools.md, "Tools from MCP servers").
    async fn offered(
        &self,
        file: &TaskFile,
        rec: &mut RunRecord,
    ) -> Result<(Vec<Tool>, Vec<String>), StartFailure> {
        let mut offered = self.deps.toolbox.offered();
        let Some(mcp) = &self.deps.toolbox.mcp else {
            return Ok((offered, Vec::new()));
        };
        let names = TaskSpec::tool_names(self.cfg, &file.frontmatter)?;
        let servers = servers_for(&self.cfg.mcp, names);
        if servers.is_empty() {
            return Ok((offered, Vec::new()));
        }
        let (ready, down) = tokio::select! {
            r = mcp.ready(&servers) => r,
            () = self.deps.cancel.cancelled() => return Err(StartFailure::Interrupted),
        };
        for line in ready.log_lines {
            rec.log_line((self.deps.clock)(), &line);
        }
        if names.is_some()
            && let Some(first) = down.first()
        {
            return Err(StartFailure::Unavailable(first.why.why.clone()));
        }
        let mut servers_down = Vec::with_capacity(down.len());
        for d in down {
            let line = format!(
                "MCP server {} is not offered (the task names no tools, so it runs without them): {}",
                d.server, d.why.why
            );
            rec.log_line((self.deps.clock)(), &line);
            servers_down.push(d.server);
        }
        offered.extend(ready.tools.into_iter().map(Tool::Mcp));
        Ok((offered, servers_down))
    }
}
