//! The bounded tool-calling loop (SPEC §5).
//!
//! [`run_task`] is the contract: messages start as `[system, user(task)]`;
//! each turn sends them with the task's tools, reads the reply, and either
//! finishes (a final answer) or answers every tool call and goes round
//! again — until a bound (`max_turns`, `max_wall_secs`, `max_total_tokens`,
//! the context window, the repeat guard) stops it. Thinking is kept out of
//! replayed turns but written to the records.

mod calls;
pub mod context;

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::Harness;
use crate::chat::{self, FunctionCall, Message, Role, Sampling, ToolCall, Tweaks, Usage};
use crate::config::{Config, ReplayThinking};
use crate::endpoint::{CallError, Completion};
use crate::inbox::{Frontmatter, TaskProblem};
use crate::progress::TaskProgress;
use crate::records::{ContextNote, ConversationLine, RunRecord, StopReason};
use crate::reply::{Reply, read_reply};
use crate::tools::{CallContext, ToolName};
use calls::{Repeats, Rules, Turn, TurnResult, answer_calls};
use context::{Conversation, ToolOrigin};

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
    pub body: String,
    pub system_prompt: String,
    pub tools: Vec<ToolName>,
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
}

impl TaskSpec {
    /// Applies a task's frontmatter to the config. `offered` is the set of
    /// configured tools; a task naming any other tool is invalid.
    pub fn resolve(
        cfg: &Config,
        name: &str,
        fm: &Frontmatter,
        body: &str,
        offered: &[ToolName],
        context_tokens: Option<u32>,
        dry_run: bool,
    ) -> Result<TaskSpec, TaskProblem> {
        let tools = match &fm.tools {
            None => offered.to_vec(),
            Some(names) => {
                let mut tools = Vec::new();
                for n in names {
                    match ToolName::parse(n).filter(|t| offered.contains(t)) {
                        Some(t) if !tools.contains(&t) => tools.push(t),
                        Some(_) => {}
                        None => {
                            let list = offered
                                .iter()
                                .map(|t| t.as_str())
                                .collect::<Vec<_>>()
                                .join(", ");
                            return Err(TaskProblem::new(
                                None,
                                format!(
                                    "frontmatter: tool {n:?} is not offered by this configuration (offered: {list})"
                                ),
                            ));
                        }
                    }
                }
                tools
            }
        };
        let mut sampling = Sampling::from_config(&cfg.model, cfg.endpoint.model.clone());
        sampling.temperature = fm.temperature.or(sampling.temperature);
        sampling.top_p = fm.top_p.or(sampling.top_p);
        sampling.top_k = fm.top_k.or(sampling.top_k);
        sampling.max_tokens = fm.max_tokens.unwrap_or(sampling.max_tokens);
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
                format!(
                    "frontmatter: max_tokens {} leaves no room for the prompt in a {ctx}-token context",
                    sampling.max_tokens
                ),
            ));
        }
        Ok(TaskSpec {
            name: name.to_string(),
            body: body.to_string(),
            system_prompt: fm
                .system_prompt
                .clone()
                .or_else(|| cfg.system_prompt.clone())
                .unwrap_or_else(|| BUILT_IN_SYSTEM_PROMPT.to_string()),
            tools,
            sampling,
            max_turns: fm.max_turns.unwrap_or(cfg.limits.max_turns),
            max_wall: Duration::from_secs(fm.max_wall_secs.unwrap_or(cfg.limits.max_wall_secs)),
            max_total_tokens: fm.max_total_tokens.unwrap_or(cfg.limits.max_total_tokens),
            max_tool_result_chars: cfg.limits.max_tool_result_chars,
            max_calls_per_turn: fm
                .max_calls_per_turn
                .unwrap_or(cfg.limits.max_calls_per_turn),
            max_writes: fm.max_writes.unwrap_or(cfg.limits.max_writes),
            context_tokens,
            replay_thinking: cfg.model.replay_thinking,
            dry_run,
        })
    }

    /// The most prompt tokens a request may carry.
    fn prompt_budget(&self) -> Option<u64> {
        self.context_tokens
            .map(|c| u64::from(c).saturating_sub(u64::from(self.sampling.max_tokens)))
    }
}

/// Counters of one task run, summed as it goes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub turns: u32,
    pub tool_calls: u32,
    pub tool_errors: u32,
    pub usage: Usage,
    pub runpod_exec_ms: Option<u64>,
    pub runpod_delay_ms: Option<u64>,
    /// Calls answered "not run" because a budget was spent.
    pub calls_over_budget: u32,
}

/// How a task run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub stop: StopReason,
    pub final_answer: Option<String>,
    pub error: Option<String>,
    /// The failure may pass if tried again in a later run (endpoint unavailable, interrupted).
    pub retryable: bool,
    pub stats: Stats,
}

/// Runs one task to its end. Never panics, never returns early without an
/// outcome; every request and tool call is recorded as it happens.
pub async fn run_task(
    h: &Harness,
    spec: &TaskSpec,
    rec: &mut RunRecord,
    live: &TaskProgress,
) -> Outcome {
    let now = Instant::now();
    // max_wall is bounded by the config, but no number may crash the run.
    let deadline = now
        .checked_add(spec.max_wall)
        .unwrap_or(now + Duration::from_secs(crate::config::bounds::MAX_WALL_SECS.1));
    let tool_defs: Vec<Value> = spec.tools.iter().map(|t| t.definition()).collect();
    let mut conv = Conversation::new(
        &spec.system_prompt,
        &spec.body,
        &Value::Array(tool_defs.clone()).to_string(),
    );
    let mut run = TaskRun {
        h,
        spec,
        rec,
        live,
        stats: Stats::default(),
        repeats: Repeats::default(),
        quotable: Vec::new(),
        deadline,
    };
    let tools_list = spec
        .tools
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    run.log(&format!(
        "task {} started; tools: {}",
        spec.name,
        if tools_list.is_empty() {
            "none"
        } else {
            &tools_list
        }
    ));
    let mut tweaks = Tweaks::default();
    let mut asked_again = false;
    loop {
        if let Some(stop) = run.budget_spent() {
            return stop;
        }
        let note = match run.fit_context(&mut conv) {
            Ok(note) => note,
            Err(stop) => return *stop,
        };
        let completion = match run.call_model(&mut conv, &tool_defs, tweaks, note).await {
            Ok(c) => c,
            Err(stop) => return *stop,
        };
        let reply = run.take_reply(&mut conv, &completion);

        if reply.calls.is_empty() {
            if !reply.content.is_empty() {
                run.log(&format!("final answer:\n{}", reply.content));
                return run.finish(StopReason::FinalAnswer, Some(reply.content), None);
            }
            if asked_again {
                return run.finish(
                    StopReason::EmptyResponse,
                    None,
                    Some("the model gave no answer and no tool call, twice".into()),
                );
            }
            // Ask once more; if thinking used up max_tokens, without thinking.
            asked_again = true;
            let thinking_ran_out = reply.cut_off && reply.thinking.is_some();
            tweaks = Tweaks {
                seed: Some(u64::from(fastrand::u32(..))),
                thinking_off: thinking_ran_out,
            };
            run.log(if thinking_ran_out {
                "empty reply: thinking used up max_tokens; asking again with thinking off"
            } else {
                "empty reply; asking again"
            });
            continue;
        }
        tweaks = Tweaks::default();
        conv.push(replayed_assistant(&reply, spec.replay_thinking));
        if let Some(stop) = run.budget_spent() {
            return stop.with_note(format!(
                "the last reply's {} tool call(s) were not executed",
                reply.calls.len()
            ));
        }
        match run.answer_calls(&reply).await {
            Ok(answers) => {
                for a in answers {
                    let origin = ToolOrigin {
                        call_id: a.call_id.clone(),
                        call: crate::tools::describe_call(&a.line.name, &a.line.arguments),
                    };
                    conv.push_tool(Message::tool(a.call_id, a.text), origin);
                }
            }
            Err(stop) => return *stop,
        }
    }
}

/// The state of one task run, with a method per step of the loop.
struct TaskRun<'a> {
    h: &'a Harness,
    spec: &'a TaskSpec,
    rec: &'a mut RunRecord,
    live: &'a TaskProgress,
    stats: Stats,
    repeats: Repeats,
    /// Every tool result so far, as it was before control strings were
    /// broken: a text-form call found in one is a quote, not a call.
    quotable: Vec<String>,
    deadline: Instant,
}

impl TaskRun<'_> {
    fn log(&mut self, text: &str) {
        self.rec.log((self.h.clock)(), text);
    }

    fn finish(
        &mut self,
        stop: StopReason,
        final_answer: Option<String>,
        error: Option<String>,
    ) -> Outcome {
        if let Some(e) = &error {
            self.log(&format!("stopped: {}: {e}", stop.as_str()));
        }
        let retryable = matches!(stop, StopReason::Interrupted);
        Outcome {
            stop,
            final_answer,
            error,
            retryable,
            stats: self.stats.clone(),
        }
    }

    /// `max_turns` or `max_total_tokens` reached.
    fn budget_spent(&mut self) -> Option<Outcome> {
        let spec = self.spec;
        if self.stats.turns >= spec.max_turns {
            let e = format!("no final answer within max_turns = {}", spec.max_turns);
            return Some(self.finish(StopReason::MaxTurns, None, Some(e)));
        }
        if self.stats.usage.total() >= spec.max_total_tokens {
            let e = format!(
                "{} tokens used, max_total_tokens = {}",
                self.stats.usage.total(),
                spec.max_total_tokens
            );
            return Some(self.finish(StopReason::MaxTotalTokens, None, Some(e)));
        }
        None
    }

    /// Elides old tool results until the next request fits the window.
    fn fit_context(&mut self, conv: &mut Conversation) -> Result<ContextNote, Box<Outcome>> {
        let budget = self.spec.prompt_budget();
        let elided = match budget.map(|b| conv.fit(b)) {
            None => Vec::new(),
            Some(Ok(elided)) => elided,
            Some(Err(elided)) => {
                let e = format!(
                    "the prompt needs about {} tokens but only {} fit (context_tokens − max_tokens), even after removing {} tool result(s)",
                    conv.estimate(),
                    budget.unwrap_or(0),
                    elided.len()
                );
                return Err(Box::new(self.finish(
                    StopReason::ContextExhausted,
                    None,
                    Some(e),
                )));
            }
        };
        if !elided.is_empty() {
            self.log(&format!(
                "context: removed the bodies of {} old tool result(s) to fit: {}",
                elided.len(),
                elided.join(", ")
            ));
        }
        Ok(ContextNote {
            estimated_prompt_tokens: conv.estimate(),
            budget,
            elided_call_ids: elided,
        })
    }

    /// Sends the conversation; on the server's context error, shrinks once and resends.
    async fn call_model(
        &mut self,
        conv: &mut Conversation,
        tool_defs: &[Value],
        tweaks: Tweaks,
        mut note: ContextNote,
    ) -> Result<Completion, Box<Outcome>> {
        let turn = self.stats.turns + 1;
        let mut shrunk = false;
        loop {
            debug_assert!(
                conv.messages()
                    .last()
                    .is_some_and(|m| m.role != Role::Assistant || m.tool_calls.is_empty())
            );
            let body = chat::build_request(conv.messages(), tool_defs, &self.spec.sampling, tweaks);
            self.log(&format!(
                "turn {turn}: request with {} messages, ~{} prompt tokens",
                conv.messages().len(),
                note.estimated_prompt_tokens
            ));
            let (rec, stats, h) = (&mut *self.rec, &mut self.stats, self.h);
            let mut first = Some(note.clone());
            let mut on_attempt = |a: &crate::endpoint::Attempt<'_>| {
                if let Some(job) = &a.runpod {
                    let add = |sum: &mut Option<u64>, ms: Option<u64>| {
                        if let Some(ms) = ms {
                            let s = sum.get_or_insert(0);
                            *s = s.saturating_add(ms);
                        }
                    };
                    add(&mut stats.runpod_exec_ms, job.execution_time);
                    add(&mut stats.runpod_delay_ms, job.delay_time);
                }
                let context = first.take();
                rec.conversation(&ConversationLine {
                    turn,
                    attempt: a,
                    context: context.as_ref(),
                });
            };
            let result = h
                .endpoint
                .chat(body, self.deadline, &h.cancel, &h.clock, &mut on_attempt)
                .await;
            match result {
                Ok(c) => return Ok(c),
                Err(CallError::ContextExceeded { n_prompt, n_ctx }) if !shrunk => {
                    shrunk = true;
                    conv.calibrate(n_prompt.unwrap_or_else(|| conv.estimate() * 2));
                    let budget = n_ctx
                        .map(|n| n.saturating_sub(u64::from(self.spec.sampling.max_tokens)))
                        .into_iter()
                        .chain(self.spec.prompt_budget())
                        .min()
                        .unwrap_or(conv.estimate() / 2);
                    self.log(&format!("the server said the prompt ({n_prompt:?} tokens) exceeds its context ({n_ctx:?}); shrinking and retrying once"));
                    match conv.fit(budget) {
                        Ok(elided) => {
                            note = ContextNote {
                                estimated_prompt_tokens: conv.estimate(),
                                budget: Some(budget),
                                elided_call_ids: elided,
                            }
                        }
                        Err(_) => {
                            let e = format!(
                                "the prompt does not fit the server's context ({n_ctx:?} tokens) even after removing old tool results"
                            );
                            return Err(Box::new(self.finish(
                                StopReason::ContextExhausted,
                                None,
                                Some(e),
                            )));
                        }
                    }
                }
                Err(e) => return Err(Box::new(self.call_failed(e))),
            }
        }
    }

    fn call_failed(&mut self, e: CallError) -> Outcome {
        let (stop, retryable) = match &e {
            CallError::WallClock => (StopReason::MaxWallSecs, false),
            CallError::Unavailable(_) => (StopReason::EndpointError, true),
            CallError::Rejected { .. } => (StopReason::EndpointError, false),
            CallError::ContextExceeded { .. } => (StopReason::ContextExhausted, false),
            CallError::Interrupted => (StopReason::Interrupted, true),
            CallError::TooLarge(_) => (StopReason::EndpointError, false),
        };
        let error = match stop {
            StopReason::MaxWallSecs => format!(
                "the task's wall clock (max_wall_secs = {}) ran out during a model call",
                self.spec.max_wall.as_secs()
            ),
            _ => e.to_string(),
        };
        Outcome {
            retryable,
            ..self.finish(stop, None, Some(error))
        }
    }

    /// Counts the reply's tokens and reads it; the thinking goes to `run.log`.
    fn take_reply(&mut self, conv: &mut Conversation, c: &Completion) -> Reply {
        self.stats.turns += 1;
        let turn = self.stats.turns;
        let choice = c.response.choices.first().cloned().unwrap_or_default();
        let quotable = &self.quotable;
        let quoted = |call: &str| quotable.iter().any(|r| r.contains(call));
        let reply = read_reply(
            &choice.message,
            choice.finish_reason.as_deref(),
            &format!("recovered-{turn}"),
            &quoted,
        );
        let usage = c.response.usage.unwrap_or_else(|| {
            let out = reply.content.len()
                + reply.thinking.as_ref().map_or(0, String::len)
                + reply
                    .calls
                    .iter()
                    .map(|c| c.function.arguments.len())
                    .sum::<usize>();
            Usage {
                prompt_tokens: conv.estimate(),
                completion_tokens: (out as u64).div_ceil(3),
                total_tokens: 0,
            }
        });
        self.stats.usage.add(&usage);
        self.live.turn(turn, self.stats.usage.total_tokens);
        conv.anchor(usage.prompt_tokens, usage.completion_tokens);
        if let Some(t) = &reply.thinking {
            self.log(&format!("turn {turn}: thinking:\n{t}"));
        }
        let finish = choice.finish_reason.as_deref().unwrap_or("-");
        let calls: Vec<String> = reply
            .calls
            .iter()
            .map(|c| crate::tools::describe_call(&c.function.name, &c.function.arguments))
            .collect();
        self.log(&format!(
            "turn {turn}: reply ({} prompt + {} completion tokens, finish {finish}){}{}",
            usage.prompt_tokens,
            usage.completion_tokens,
            if reply.recovered {
                "; tool calls recovered from text"
            } else {
                ""
            },
            if calls.is_empty() {
                String::new()
            } else {
                format!("; calls:\n{}", calls.join("\n"))
            }
        ));
        reply
    }

    async fn answer_calls(&mut self, reply: &Reply) -> Result<Vec<calls::Answer>, Box<Outcome>> {
        let turn = Turn {
            number: self.stats.turns,
            calls: &reply.calls,
            cut_off: reply.cut_off,
            recovered: reply.recovered,
        };
        let ctx = CallContext {
            task: self.spec.name.clone(),
            run_id: self.rec.run_id.clone(),
            now: (self.h.clock)(),
            dry_run: self.spec.dry_run,
            max_chars: self.spec.max_tool_result_chars,
        };
        let rules = Rules {
            allowed: &self.spec.tools,
            max_calls_per_turn: self.spec.max_calls_per_turn,
            max_writes: self.spec.max_writes,
            max_chars: self.spec.max_tool_result_chars,
            redactor: &self.h.redactor,
        };
        let work = answer_calls(turn, &rules, &self.h.toolbox, &ctx, &mut self.repeats);
        let result = tokio::select! {
            biased;
            _ = self.h.cancel.cancelled() => return Err(Box::new(self.call_failed(CallError::Interrupted))),
            _ = tokio::time::sleep_until(self.deadline) => {
                let e = format!("the task's wall clock (max_wall_secs = {}) ran out during tool calls", self.spec.max_wall.as_secs());
                return Err(Box::new(self.finish(StopReason::MaxWallSecs, None, Some(e))));
            }
            r = work => r,
        };
        let answers = match result {
            TurnResult::Answered(a) => a,
            TurnResult::LoopDetected { call, answers } => {
                self.record_answers(&answers);
                let e = format!("the model kept repeating the same call: {call}");
                return Err(Box::new(self.finish(
                    StopReason::LoopDetected,
                    None,
                    Some(e),
                )));
            }
        };
        self.record_answers(&answers);
        Ok(answers)
    }

    fn record_answers(&mut self, answers: &[calls::Answer]) {
        for a in answers {
            self.stats.tool_calls += 1;
            self.stats.tool_errors += u32::from(a.line.is_error);
            self.stats.calls_over_budget += u32::from(a.over_budget);
            self.quotable.push(a.undefanged.clone());
            self.rec.tool(&a.line);
            let mark = if a.line.is_error { "error" } else { "ok" };
            let short = crate::text::clip(&a.text, 200);
            self.log(&format!(
                "tool {} [{}] {mark}: {short}",
                a.line.name, a.call_id
            ));
        }
    }
}

impl Outcome {
    fn with_note(mut self, note: String) -> Outcome {
        self.error = Some(match self.error {
            Some(e) => format!("{e}; {note}"),
            None => note,
        });
        self
    }
}

/// The assistant message as replayed: thinking dropped (or kept on tool-call
/// turns with `replay_thinking = "keep"`), text-form calls turned into real
/// `tool_calls`, and arguments that are not a JSON object replaced by `{}`
/// (llama-server answers 500 to a replayed call whose arguments do not parse).
pub fn replayed_assistant(reply: &Reply, replay: ReplayThinking) -> Message {
    let tool_calls = reply
        .calls
        .iter()
        .map(|c| {
            let valid = matches!(
                serde_json::from_str::<Value>(&c.function.arguments),
                Ok(Value::Object(_))
            );
            ToolCall {
                id: c.id.clone(),
                kind: "function".into(),
                function: FunctionCall {
                    name: c.function.name.clone(),
                    arguments: if valid {
                        c.function.arguments.clone()
                    } else {
                        "{}".into()
                    },
                },
            }
        })
        .collect();
    let reasoning_content = match replay {
        ReplayThinking::Keep => reply.thinking.clone(),
        ReplayThinking::Strip => None,
    };
    Message {
        role: Role::Assistant,
        content: reply.content.clone(),
        reasoning_content,
        tool_calls,
        tool_call_id: None,
    }
}
