//! `exec` (docs/tasks.md, "exec"): one task given on the command line — no
//! inbox file, no lock, nothing filed in `done/` or `failed/` — run as any
//! task is, a batch of one as its [`BatchOptions`] ask, and recorded under
//! `logs/<name>/`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use anyhow::Context;

use super::{BatchOptions, RunOutcome, Tally, UsageError, run_tasks};
use harness_agent::deps::TaskDeps;
use harness_config::Config;
use harness_inbox::{self as inbox, InboxEntry};
use harness_tools::ToolName;
use harness_tools::mcp::configured;

/// One `exec`: the batch, and the task it is.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    pub batch: BatchOptions,
    /// The task's name: its records go to `logs/<name>/`.
    pub name: String,
    /// The task file's text: a body, perhaps with `+++` frontmatter.
    pub text: String,
    /// `--agent` and `--tools`, set over what the frontmatter says.
    pub agent: Option<String>,
    pub tools: Option<Vec<String>>,
    /// `--max-turns`, set over the frontmatter's and `[limits] max_turns`.
    pub max_turns: Option<u32>,
}

/// Runs the task; a name, a text or a flag that makes no task is a
/// [`UsageError`], and nothing runs.
pub async fn exec(cfg: &Config, deps: &TaskDeps, opts: &ExecOptions) -> anyhow::Result<RunOutcome> {
    inbox::check_task_name(&opts.name)
        .map_err(|e| UsageError(format!("--name {:?}: {e}", opts.name)))?;
    check_flags(cfg, opts).map_err(UsageError)?;
    let placeholders = super::slips::placeholders(cfg);
    if !placeholders.is_empty() {
        return Err(UsageError(placeholders.join("; ")).into());
    }
    let mut keys = Vec::new();
    if let Some(agent) = &opts.agent {
        keys.push(("agent", toml::Value::String(agent.clone())));
    }
    if let Some(tools) = &opts.tools {
        let list = tools.iter().cloned().map(toml::Value::String).collect();
        keys.push(("tools", toml::Value::Array(list)));
    }
    if let Some(n) = opts.max_turns {
        keys.push(("max_turns", toml::Value::Integer(i64::from(n))));
    }
    let text = inbox::with_keys(&opts.text, &keys)
        .map_err(|problem| UsageError(format!("the task given is invalid: {problem}")))?;
    harness_records::create_private_dir(&cfg.paths.logs)
        .with_context(|| format!("creating {}", cfg.paths.logs.display()))?;
    // The task is read from a file like any other: one in a private folder
    // of its own, gone when the run is.
    let dir = tempfile::Builder::new()
        .prefix(".agent-harness-exec-")
        .tempdir()
        .context("creating a temporary folder for the task")?;
    let path = dir.path().join(format!("{}.md", opts.name));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))?;
    let mode = opts.batch.exec(cfg);
    let entry = InboxEntry {
        name: opts.name.clone(),
        path,
    };
    let ends = run_tasks(cfg, deps, vec![entry], &mode, 1).await;
    let mut tally = Tally::of(&ends);
    super::budget::paused_by(&mut tally, deps);
    Ok(RunOutcome::Finished(tally))
}

/// `--agent` names a profile of the config; `--tools` names tools, none empty.
fn check_flags(cfg: &Config, opts: &ExecOptions) -> Result<(), String> {
    if let Some(agent) = &opts.agent
        && !cfg.agents.contains_key(agent)
    {
        let known: Vec<&str> = cfg.agents.keys().map(String::as_str).collect();
        return Err(format!(
            "--agent {agent:?}: no such [agents.NAME] profile (the config has: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ));
    }
    for tool in opts.tools.iter().flatten() {
        match (ToolName::parse(tool), configured(&cfg.mcp, tool)) {
            (Some(_), _) | (None, Some(Ok(_))) => {}
            (None, Some(Err(why))) => return Err(format!("--tools: {why}")),
            (None, None) => {
                return Err(format!(
                    "--tools: {tool:?} is not a tool (tools: {}, or SERVER__tool of an [mcp.servers.SERVER])",
                    ToolName::list(&ToolName::ALL)
                ));
            }
        }
    }
    Ok(())
}
