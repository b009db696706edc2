//! What every task of a run shares: the clients built once from the
//! config, the clock, the stop signal, the redactor, the budget.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use harness_config::{self as config, Config};
use harness_endpoint::Endpoint;
use harness_state::Budget;
use harness_tools::{self as tools, Toolbox};

/// The source of "now" for records and signatures; tests pass a fixed one.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(Utc::now)
}

/// The loop's dependencies, shared by every task of a run: the clients,
/// the clock, the stop signal, the redactor — and no display.
pub struct TaskDeps {
    pub endpoint: Endpoint,
    pub toolbox: Toolbox,
    pub clock: Clock,
    /// Cancelled on SIGINT / SIGTERM: no new work starts, running calls stop.
    pub cancel: CancellationToken,
    /// Replaces every configured secret in what the model and the logs see.
    pub redactor: std::sync::Arc<config::Redactor>,
    /// `[budget]`, shared by every task: the one the endpoint is metered
    /// by (it asks and charges it at every live attempt); the drain keeps
    /// its ledger and asks it before a task starts.
    pub budget: Arc<Budget>,
}

impl TaskDeps {
    /// Stops what the run started for its tasks (MCP servers) before exit.
    pub async fn shutdown(&self) {
        if let Some(mcp) = &self.toolbox.mcp {
            mcp.stop().await;
        }
    }

    pub fn new(cfg: &Config, clock: Clock, cancel: CancellationToken) -> anyhow::Result<TaskDeps> {
        let problems = Toolbox::unknown_profile_tools(cfg);
        if !problems.is_empty() {
            anyhow::bail!("{}: {}", cfg.path.display(), problems.join("; "));
        }
        let noteworx = match &cfg.noteworx {
            Some(n) => Some(tools::noteworx::Noteworx {
                client: harness_tools::noteworx::client::NoteworxClient::new(n, &cfg.tls.trust)?,
                agent_name: n.agent_name.clone(),
                token_env: n.token_env.clone(),
            }),
            None => None,
        };
        let webfetch = cfg
            .webfetch
            .as_ref()
            .map(|w| tools::webfetch::Webfetch::new(w, &cfg.tls.trust))
            .transpose()?;
        let budget = Arc::new(Budget::new(cfg, clock.clone()));
        Ok(TaskDeps {
            endpoint: Endpoint::new(&cfg.endpoint, &cfg.tls.trust)?
                .redacting(cfg.redactor())
                .metered(budget.clone()),
            toolbox: Toolbox {
                webfetch,
                noteworx,
                recorded: None,
                mcp: (!cfg.mcp.is_empty()).then(|| {
                    std::sync::Arc::new(tools::mcp::McpServers::new(
                        &cfg.mcp,
                        &cfg.tls.trust,
                        std::sync::Arc::new(cfg.redactor()),
                    ))
                }),
            },
            redactor: std::sync::Arc::new(cfg.redactor()),
            budget,
            clock,
            cancel,
        })
    }

    /// These dependencies spending from `budget` (an eval's variants share
    /// its first's): the endpoint metered by it too.
    pub fn sharing(mut self, budget: Arc<Budget>) -> TaskDeps {
        self.endpoint = self.endpoint.metered(budget.clone());
        self.budget = budget;
        self
    }

    /// These dependencies with model calls and tool results answered from
    /// a recording first (a replay, or a task resuming from its records).
    pub fn answering_from(
        &self,
        recording: Arc<std::sync::Mutex<harness_endpoint::recorded::Recording>>,
        results: tools::RecordedResults,
    ) -> TaskDeps {
        TaskDeps {
            endpoint: self.endpoint.clone().replaying(recording),
            toolbox: Toolbox {
                recorded: Some(Arc::new(results)),
                ..self.toolbox.clone()
            },
            clock: self.clock.clone(),
            cancel: self.cancel.clone(),
            redactor: self.redactor.clone(),
            budget: self.budget.clone(),
        }
    }
}
