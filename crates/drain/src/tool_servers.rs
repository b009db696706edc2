//! What the MCP servers a task used did while it ran: one that died makes
//! the task retryable (docs/tools.md, "Tools from MCP servers"); what they
//! wrote to stderr goes to its `run.log`.

use harness_agent::deps::TaskDeps;
use harness_agent::{Outcome, StopReason, TaskSpec};
use harness_records::RunRecord;
use harness_tools::Tool;

/// A task that may use a server that died while it ran does not pass as
/// done, nor fail for good: it ends retryable `tool_server_unavailable`.
pub(super) async fn unless_one_died(deps: &TaskDeps, spec: &TaskSpec, outcome: Outcome) -> Outcome {
    let Some(mcp) = &deps.toolbox.mcp else {
        return outcome;
    };
    if matches!(
        outcome.stop,
        StopReason::SetupFault | StopReason::Interrupted | StopReason::BudgetExhausted
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

/// What the MCP servers the task used wrote to stderr, into its run.log.
pub(super) fn log_stderr(deps: &TaskDeps, rec: &mut RunRecord, spec: &TaskSpec) {
    let Some(mcp) = &deps.toolbox.mcp else {
        return;
    };
    for line in mcp.stderr(&servers_of(spec)) {
        rec.log_line((deps.clock)(), &line);
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
