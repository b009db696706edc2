//! A task made ready to run: its file read and parsed, a recurring task's
//! slot filled in, the MCP servers it may use started and their tools
//! offered with the configuration's, and everything resolved into a
//! [`TaskSpec`] — or the reason it cannot start.

use super::ledger::AttemptCount;
use super::resume::{Found, ResumeNote, find};
use super::task::Drain;
use super::*;

impl Drain<'_> {
    /// What the MCP servers the task used wrote to stderr, into its run.log.
    pub(super) fn log_tool_servers(&self, rec: &mut RunRecord, spec: &TaskSpec) {
        let Some(mcp) = &self.h.toolbox.mcp else {
            return;
        };
        for line in mcp.stderr(&servers_of(spec)) {
            rec.note((self.h.clock)(), &line);
        }
    }

    /// A task that may use a server that died while it ran does not pass
    /// as done, nor fail for good: it ends retryable
    /// `tool_server_unavailable` (SPEC §19).
    pub(super) async fn unless_server_died(&self, spec: &TaskSpec, outcome: Outcome) -> Outcome {
        let Some(mcp) = &self.h.toolbox.mcp else {
            return outcome;
        };
        if matches!(
            outcome.stop,
            StopReason::SetupFault | StopReason::Interrupted
        ) {
            return outcome;
        }
        let Some(down) = mcp.down(&servers_of(spec)).await else {
            return outcome;
        };
        Outcome {
            stop: StopReason::ToolServerUnavailable,
            final_answer: None,
            error: Some(format!("{} while the task ran", down.why)),
            retryable: true,
            result: None,
            ..outcome
        }
    }

    /// The MCP servers the task may use started (once per run), and their
    /// tools with the configuration's. A task that names its tools needs
    /// every server it names; one that names none is offered the servers
    /// that are up, and told which are not (SPEC §22).
    async fn offered(
        &self,
        file: &inbox::TaskFile,
        notes: &mut Noted,
    ) -> Result<Vec<Tool>, Unready> {
        let mut offered = self.h.toolbox.offered();
        let Some(mcp) = &self.h.toolbox.mcp else {
            return Ok(offered);
        };
        let names = TaskSpec::tool_names(self.cfg, &file.frontmatter)?;
        let servers = crate::tools::mcp::servers_for(&self.cfg.mcp, names);
        if servers.is_empty() {
            return Ok(offered);
        }
        let (ready, down) = tokio::select! {
            r = mcp.ready(&servers) => r,
            () = self.h.cancel.cancelled() => return Err(Unready::Interrupted),
        };
        notes.lines.extend(ready.notes);
        if names.is_some()
            && let Some(first) = down.first()
        {
            return Err(Unready::Unavailable(first.why.why.clone()));
        }
        for d in down {
            notes.lines.push(format!(
                "MCP server {} is not offered (the task names no tools, so it runs without them): {}",
                d.server, d.why.why
            ));
            notes.servers_down.push(d.server);
        }
        offered.extend(ready.tools.into_iter().map(Tool::Mcp));
        Ok(offered)
    }

    /// The task file read and resolved against the config.
    pub(super) async fn prepare(
        &self,
        entry: &InboxEntry,
        resumed_today: Option<chrono::NaiveDate>,
        notes: &mut Noted,
    ) -> Result<(inbox::TaskFile, TaskSpec), Unready> {
        let mut file = inbox::read_task(&entry.path)?;
        match (&self.mode.slot, &file.frontmatter.schedule) {
            (None, Some(_)) => {
                return Err(TaskProblem::new(
                    None,
                    "frontmatter: schedule: only a recurring task (in [paths] recurring) has a schedule",
                )
                .into());
            }
            (Some(_), None) => {
                return Err(TaskProblem::new(
                    None,
                    "frontmatter: schedule: a recurring task needs one",
                )
                .into());
            }
            (Some(slot), Some(_)) => {
                let last = slot
                    .last_success
                    .map_or_else(|| "never".to_string(), |d| d.to_string());
                file.body = file
                    .body
                    .replace("{{date}}", &slot.date.to_string())
                    .replace("{{last_success}}", &last);
            }
            (None, None) => {}
        }
        let today = self.today(resumed_today);
        let offered = self.offered(&file, notes).await?;
        let spec = TaskSpec::resolve(
            self.cfg,
            &TaskInput {
                name: &entry.name,
                frontmatter: &file.frontmatter,
                body: &file.body,
                offered: &offered,
                mcp_listed: self.h.toolbox.mcp.is_some(),
                context_tokens: self.context_tokens,
                dry_run: self.mode.dry_run,
                today,
            },
        )?;
        Ok((file, spec))
    }

    /// The date the task's prompts are built with: a recurring task's slot
    /// date (in a replay too), else the date of the run it resumes, a
    /// replay's recorded date, or today.
    pub(super) fn today(&self, resumed: Option<chrono::NaiveDate>) -> chrono::NaiveDate {
        (self.mode.slot.as_ref().map(|s| s.date))
            .or(resumed)
            .or(self.mode.today)
            .unwrap_or_else(|| (self.h.clock)().date_naive())
    }
}

/// What preparing a task noted: `run.log` lines, and the MCP servers it
/// was not offered because they are down.
#[derive(Debug, Default)]
pub(super) struct Noted {
    pub(super) lines: Vec<String>,
    pub(super) servers_down: Vec<String>,
}

/// Why a task cannot start.
pub(super) enum Unready {
    /// The task file or its settings are wrong: `invalid_task`.
    Invalid(TaskProblem),
    /// An MCP server it may use is not there: retryable
    /// `tool_server_unavailable` (SPEC §19).
    Unavailable(String),
    /// The run was stopped while its MCP servers started.
    Interrupted,
}

impl From<TaskProblem> for Unready {
    fn from(p: TaskProblem) -> Unready {
        Unready::Invalid(p)
    }
}

/// The task ends retryable: a tool server it may use is not there.
pub(super) fn unavailable(rec: &mut RunRecord, h: &TaskDeps, why: String) -> Outcome {
    rec.note((h.clock)(), &format!("{why}; the task stays in the inbox"));
    tracing::warn!(error = %why, "a tool server is unavailable; the task is tried again later");
    let mut outcome = Outcome::failed(StopReason::ToolServerUnavailable, why);
    outcome.retryable = true;
    outcome
}

/// A task's file and spec, and the records it goes on from.
pub(super) struct Prepared {
    pub(super) file: crate::inbox::TaskFile,
    pub(super) spec: TaskSpec,
    pub(super) found: Option<Found>,
    pub(super) note: ResumeNote,
}

impl Drain<'_> {
    /// Reads and resolves the task, finds the records it may go on from,
    /// and checks them against the spec; refused records leave a fresh
    /// task and the reason.
    pub(super) async fn prepare_resumed(
        &self,
        entry: &InboxEntry,
        run_id: &str,
        count: &AttemptCount,
        notes: &mut Noted,
    ) -> Result<Prepared, Unready> {
        let now = (self.h.clock)();
        let unsettled = count.previous > 0;
        let found = (self.cfg.limits.resume && self.may_resume())
            .then(|| find(self.mode, &entry.name, &count.runs, run_id, unsettled, now))
            .flatten();
        let (file, spec) = self
            .prepare(entry, found.as_ref().map(|f| f.today), notes)
            .await?;
        let spec = spec.for_run(run_id);
        let Some(found) = found else {
            return Ok(Prepared {
                file,
                spec,
                found: None,
                note: ResumeNote::default(),
            });
        };
        match found.check(self.h, &spec).await {
            Ok(turns) => {
                let note = ResumeNote {
                    from: Some(found.run_id.clone()),
                    turns,
                    refused: None,
                    wall_before: found.wall_before,
                    ..ResumeNote::default()
                };
                Ok(Prepared {
                    file,
                    spec,
                    found: Some(found),
                    note,
                })
            }
            Err(why) => {
                notes.servers_down.clear();
                let (file, spec) = self.prepare(entry, None, notes).await?;
                Ok(Prepared {
                    file,
                    spec: spec.for_run(run_id),
                    found: None,
                    note: ResumeNote {
                        refused: Some(format!("run {}: {why}", found.run_id)),
                        ..ResumeNote::default()
                    },
                })
            }
        }
    }
}

/// The MCP servers whose tools a task was given.
fn servers_of(spec: &TaskSpec) -> Vec<&str> {
    let mut servers: Vec<&str> = Vec::new();
    for tool in &spec.tools {
        if let Tool::Mcp(m) = tool
            && !servers.contains(&m.server.as_str())
        {
            servers.push(&m.server);
        }
    }
    servers
}
