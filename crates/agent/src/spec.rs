//! What one task runs with: the config's defaults with the task file's
//! frontmatter applied, resolved once before the loop starts.

use std::time::Duration;

use serde_json::Value;

use harness_base::schema::OutputSchema;
use harness_config::{AgentProfile, Config, PromptAids, ReplayThinking};
use harness_inbox::{Expect, Frontmatter, TaskProblem};
use harness_tools::{Tool, ToolName, mcp};
use harness_wire::chat::Sampling;

/// The system prompt used when neither the config nor the task sets one.
/// Written for a small model: short, ordered, explicit.
pub const BUILT_IN_SYSTEM_PROMPT: &str = "\
You complete one task on your own. Nobody will answer questions, so never ask any.

How to work:
1. If the task can be answered from its text alone, answer at once.
2. Otherwise call a tool. Call only tools you need, with the exact argument names listed.
3. Use each result. Never repeat a call with the same arguments: its result is already above.
4. A long result is cut; use the offset it gives only if you need the rest.
5. When done, reply with the final answer as plain text and no tool call.

When you create an attachment, write only its body. Never write frontmatter (--- lines): it is added for you.";

/// Everything one task runs with: `Config` defaults with its frontmatter applied.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    pub name: String,
    /// The run id stamped into what write tools create (set by [`TaskSpec::for_run`]).
    pub run_id: String,
    pub body: String,
    pub system_prompt: String,
    pub tools: Vec<Tool>,
    pub sampling: Sampling,
    pub max_turns: u32,
    pub max_wall: Duration,
    pub max_total_tokens: u64,
    pub max_tool_result_chars: usize,
    /// Tool calls run from one reply.
    pub max_calls_per_turn: u32,
    /// Write-tool calls run in the whole task.
    pub max_writes: u32,
    /// The context window; `None` when it is not managed.
    pub context_tokens: Option<u32>,
    pub replay_thinking: ReplayThinking,
    pub dry_run: bool,
    /// What the task must achieve, when its file says.
    pub expect: Option<Expect>,
    /// The profile it runs as: attachments are signed with this name.
    pub agent: Option<String>,
    /// The JSON Schema its final answer must match.
    pub output_schema: Option<OutputSchema>,
    /// `[prompt]`'s aids for small models (the system prompt has the
    /// preamble and the example already; the tool definitions take the hints).
    pub prompt_aids: PromptAids,
}

/// What a task is resolved from besides the config.
#[derive(Debug, Clone, Copy)]
pub struct TaskInput<'a> {
    pub name: &'a str,
    pub frontmatter: &'a Frontmatter,
    pub body: &'a str,
    /// The tools the configuration offers, with the tools of the MCP
    /// servers the task may use when they were started.
    pub offered: &'a [Tool],
    /// Whether those servers were started and their tools are in
    /// `offered`; when not (`check`), a `SERVER__tool` the configuration
    /// allows is taken on trust.
    pub mcp_listed: bool,
    /// The context window managed, if any.
    pub context_tokens: Option<u32>,
    pub dry_run: bool,
    /// `{{date}}` in a role prompt (UTC).
    pub today: chrono::NaiveDate,
}

impl TaskSpec {
    /// The tools a task names: its own `tools`, else its profile's; `None`
    /// when neither names any (every offered tool).
    pub fn tool_names<'c>(
        cfg: &'c Config,
        fm: &'c Frontmatter,
    ) -> Result<Option<&'c [String]>, TaskProblem> {
        let profile = profile(cfg, fm.agent.as_deref())?;
        Ok(fm
            .tools
            .as_deref()
            .or(profile.and_then(|p| p.tools.as_deref())))
    }

    /// Applies a task's frontmatter, over its agent profile, over the config.
    /// A task naming a tool the configuration does not offer, or an unknown
    /// profile, is invalid.
    pub fn resolve(cfg: &Config, input: &TaskInput<'_>) -> Result<TaskSpec, TaskProblem> {
        let fm = input.frontmatter;
        let profile = profile(cfg, fm.agent.as_deref())?;
        let names = TaskSpec::tool_names(cfg, fm)?;
        let tools_from = match (&fm.tools, profile) {
            (None, Some(p)) => format!("[agents.{}] tools", p.name),
            _ => "frontmatter".to_string(),
        };
        let tools = allowed_tools(cfg, names, input, &tools_from)?;
        let sampling = sampling(cfg, fm, profile, input.context_tokens)?;
        if let Some(expected) = fm.expect.as_ref().and_then(|e| e.tools_called.as_ref()) {
            expected_tools(expected, &tools)?;
        }
        let output_schema = match &fm.output_schema {
            Some(p) => {
                let base = cfg.path.parent().unwrap_or(std::path::Path::new("."));
                let path = harness_config::resolve_file(base, p);
                Some(OutputSchema::load(&path).map_err(|e| {
                    TaskProblem::new(None, format!("frontmatter: output_schema: {e}"))
                })?)
            }
            None => profile.and_then(|p| p.output_schema.clone()),
        };
        let limits = &cfg.limits;
        Ok(TaskSpec {
            name: input.name.to_string(),
            run_id: String::new(),
            body: input.body.to_string(),
            system_prompt: system_prompt(cfg, input, profile, &tools, output_schema.as_ref()),
            tools,
            sampling,
            max_turns: fm.max_turns.unwrap_or(limits.max_turns),
            max_wall: Duration::from_secs(fm.max_wall_secs.unwrap_or(limits.max_wall_secs)),
            max_total_tokens: fm.max_total_tokens.unwrap_or(limits.max_total_tokens),
            max_tool_result_chars: limits.max_tool_result_chars,
            max_calls_per_turn: fm.max_calls_per_turn.unwrap_or(limits.max_calls_per_turn),
            max_writes: fm
                .max_writes
                .or(profile.and_then(|p| p.max_writes))
                .unwrap_or(limits.max_writes),
            context_tokens: input.context_tokens,
            replay_thinking: cfg.model.replay_thinking,
            dry_run: input.dry_run,
            expect: fm.expect.clone(),
            agent: profile.map(|p| p.name.clone()),
            output_schema,
            prompt_aids: cfg.prompt_aids,
        })
    }

    /// The spec of this task's run `run_id`.
    pub fn for_run(mut self, run_id: &str) -> TaskSpec {
        self.run_id = run_id.to_string();
        self
    }

    /// The most prompt tokens a request may carry.
    pub(crate) fn prompt_room(&self) -> Option<u64> {
        self.context_tokens
            .map(|c| u64::from(c).saturating_sub(u64::from(self.sampling.max_tokens)))
    }
}

/// The task's `tools` list within what the configuration offers (all of it
/// when the task names none).
fn allowed_tools(
    cfg: &Config,
    names: Option<&[String]>,
    input: &TaskInput<'_>,
    from: &str,
) -> Result<Vec<Tool>, TaskProblem> {
    let offered = input.offered;
    let Some(names) = names else {
        return Ok(offered.to_vec());
    };
    let mut tools: Vec<Tool> = Vec::new();
    for n in names {
        let found = match Tool::find(offered, n) {
            Some(t) => Ok(t.clone()),
            None => unoffered(cfg, n, input),
        };
        match found {
            Ok(t) if !tools.contains(&t) => tools.push(t),
            Ok(_) => {}
            Err(why) => return Err(TaskProblem::new(None, format!("{from}: {why}"))),
        }
    }
    Ok(tools)
}

/// A named tool that is not among the offered ones: a `SERVER__tool` the
/// configuration allows while its server is not started (`check`), or why
/// the task cannot have it.
fn unoffered(cfg: &Config, n: &str, input: &TaskInput<'_>) -> Result<Tool, String> {
    if ToolName::parse(n).is_some() {
        return Err(format!(
            "tool {n:?} is not offered by this configuration (offered: {})",
            Tool::list(input.offered)
        ));
    }
    match mcp::configured(&cfg.mcp, n) {
        Some(Err(why)) => Err(why),
        Some(Ok(server)) if input.mcp_listed => {
            let listed: Vec<&Tool> = input
                .offered
                .iter()
                .filter(|t| matches!(t, Tool::Mcp(m) if m.server == server.name))
                .collect();
            Err(format!(
                "MCP server {} does not list the tool {n:?} (it offers: {})",
                server.name,
                if listed.is_empty() {
                    "none".to_string()
                } else {
                    listed
                        .iter()
                        .map(|t| t.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ))
        }
        Some(Ok(server)) => {
            let tool = &n[server.name.len() + harness_config::MCP_SEPARATOR.len()..];
            Ok(Tool::Mcp(std::sync::Arc::new(mcp::McpTool::declared(
                &server.name,
                tool,
            ))))
        }
        None => Err(format!(
            "{n:?} is not a tool (tools: {}, or SERVER__tool of an [mcp.servers.SERVER])",
            ToolName::list(&ToolName::ALL)
        )),
    }
}

/// `[expect] tools_called` may name only tools the task can call: any other
/// could never pass.
fn expected_tools(expected: &[String], tools: &[Tool]) -> Result<(), TaskProblem> {
    for name in expected {
        if Tool::find(tools, name).is_none() {
            return Err(TaskProblem::new(
                None,
                format!(
                    "frontmatter: [expect] tools_called names {name:?}, which this task cannot call (its tools: {})",
                    Tool::list(tools)
                ),
            ));
        }
    }
    Ok(())
}

/// The profile a task names; an unknown name makes the task invalid.
fn profile<'c>(
    cfg: &'c Config,
    name: Option<&str>,
) -> Result<Option<&'c AgentProfile>, TaskProblem> {
    let Some(name) = name else { return Ok(None) };
    cfg.agents.get(name).map(Some).ok_or_else(|| {
        let known: Vec<&str> = cfg.agents.keys().map(String::as_str).collect();
        TaskProblem::new(
            None,
            format!(
                "frontmatter: agent {name:?} is not a profile of this configuration (profiles: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        )
    })
}

/// The task's `system_prompt`, else its profile's role prompt (placeholders
/// filled), else the config's, else the built-in one; then `[prompt]`'s
/// aids, the profile's answer style and the output schema.
fn system_prompt(
    cfg: &Config,
    input: &TaskInput<'_>,
    profile: Option<&AgentProfile>,
    tools: &[Tool],
    schema: Option<&OutputSchema>,
) -> String {
    let role = profile.and_then(|p| {
        p.role_prompt.as_ref().map(|r| {
            r.replace("{{agent}}", &p.name)
                .replace("{{task}}", input.name)
                .replace("{{date}}", &input.today.format("%Y-%m-%d").to_string())
                .replace("{{tools}}", &Tool::list(tools))
        })
    });
    let mut prompt = input
        .frontmatter
        .system_prompt
        .clone()
        .or(role)
        .or_else(|| cfg.system_prompt.clone())
        .unwrap_or_else(|| BUILT_IN_SYSTEM_PROMPT.to_string());
    prompt = crate::aids::with_aids(prompt, cfg.prompt_aids, tools);
    if let Some(style) = profile.and_then(|p| p.answer_style) {
        prompt = format!("{prompt}\n\n{}", style.sentence());
    }
    if let Some(schema) = schema {
        prompt = format!("{prompt}\n\n{}", schema.describe());
    }
    prompt
}

/// `[model]`, with the profile's sampling keys over it and the task's over those.
fn sampling(
    cfg: &Config,
    fm: &Frontmatter,
    profile: Option<&AgentProfile>,
    context_tokens: Option<u32>,
) -> Result<Sampling, TaskProblem> {
    let mut sampling = Sampling::from_config(&cfg.model, cfg.endpoint.model.clone());
    let p = |f: fn(&AgentProfile) -> Option<f64>| profile.and_then(f);
    sampling.temperature = fm
        .temperature
        .or(p(|p| p.temperature))
        .or(sampling.temperature);
    sampling.top_p = fm.top_p.or(p(|p| p.top_p)).or(sampling.top_p);
    sampling.top_k = fm
        .top_k
        .or(profile.and_then(|p| p.top_k))
        .or(sampling.top_k);
    let (max_tokens, from) = match (fm.max_tokens, profile) {
        (Some(n), _) => (n, "frontmatter: max_tokens".to_string()),
        (
            None,
            Some(AgentProfile {
                name,
                max_tokens: Some(n),
                ..
            }),
        ) => (*n, format!("[agents.{name}] max_tokens")),
        _ => (sampling.max_tokens, "[model] max_tokens".to_string()),
    };
    sampling.max_tokens = max_tokens;
    if let Some(on) = fm.enable_thinking {
        sampling
            .chat_template_kwargs
            .insert("enable_thinking".into(), Value::Bool(on));
    }
    if let Some(ctx) = context_tokens
        && u64::from(ctx) <= u64::from(sampling.max_tokens) + 256
    {
        return Err(TaskProblem::new(
            None,
            format!("{from} ({max_tokens}) leaves no room for the prompt in a {ctx}-token context"),
        ));
    }
    Ok(sampling)
}
