//! The bounded tool-calling loop (SPEC §5).
//!
//! [`run_task`] is the contract: messages start as `[system, user(task)]`;
//! each turn sends them with the task's tools, reads the reply, and either
//! finishes (a final answer) or answers every tool call and goes round
//! again — until a bound (`max_turns`, `max_wall_secs`, `max_total_tokens`,
//! the context window, the repeat guard) stops it. Thinking is kept out of
//! replayed turns but reported in the events.
//!
//! Every step reports what it did as a [`TaskEvent`] to one sink; the loop
//! writes no file and draws nothing. Each step returns `Err(Stop)` when the
//! task ends, so the loop below reads as the SPEC's list.

mod calls;
pub mod context;
pub mod deps;
pub mod events;
pub mod expect;
mod outcome;
mod spec;

use std::convert::Infallible;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::agent::deps::Harness;
use crate::base::schema::OutputSchema;
use crate::endpoint::{Attempt, CallError, Completion};
use crate::tools::CallContext;
use crate::wire::chat::{self, Message, Role, Tweaks, Usage};
use crate::wire::reply::{Reply, read_reply, replayed_assistant};
pub use calls::Answer;
use calls::{Quotable, Repeats, Rules, Turn, TurnResult, answer_calls};
pub use context::{ContextNote, Counted, Elided};
use context::{Conversation, ToolOrigin};
pub use events::{ModelAttempt, ReplyFacts, TaskEvent};
pub use outcome::{Outcome, Stats, Stop, StopReason};
pub use spec::{BUILT_IN_SYSTEM_PROMPT, TaskInput, TaskSpec};

/// How much of an answer cut at `max_tokens` is sent back when it is asked
/// for again (SPEC §16).
const CUT_ANSWER_REPLAYED_CHARS: usize = 1000;

/// Where a task's events go: the run's records and the live display.
pub type Sink<'a> = dyn FnMut(&TaskEvent<'_>) + Send + 'a;

/// Runs one task to its end and reports every step to `sink`, the last
/// being [`TaskEvent::Stopped`]. Never returns without an outcome.
pub async fn run_task(h: &Harness, spec: &TaskSpec, sink: &mut Sink<'_>) -> Outcome {
    let mut run = TaskRun::new(h, spec, sink);
    let Err(stop) = run.run().await;
    let outcome = Outcome {
        stop: stop.reason,
        final_answer: stop.final_answer,
        error: stop.error,
        retryable: stop.retryable,
        stats: run.stats.clone(),
        result: stop.result,
    };
    (run.sink)(&TaskEvent::Stopped(&outcome));
    outcome
}

/// The state of one task run, with a method per step of the loop.
struct TaskRun<'a, 's> {
    h: &'a Harness,
    spec: &'a TaskSpec,
    sink: &'a mut Sink<'s>,
    conv: Conversation,
    tool_defs: Vec<Value>,
    stats: Stats,
    repeats: Repeats,
    /// The latest tool results, for telling a quoted call from a call.
    quotable: Quotable,
    /// An empty reply was already asked again.
    asked_again: bool,
    /// A cut answer was already asked for again, shorter.
    asked_shorter: bool,
    /// The `response_format` of the next request: the answer did not match
    /// the output schema, and is asked for once more (no tools offered).
    repair: Option<Value>,
    repaired: bool,
    deadline: Instant,
}

impl<'a, 's> TaskRun<'a, 's> {
    fn new(h: &'a Harness, spec: &'a TaskSpec, sink: &'a mut Sink<'s>) -> Self {
        let now = Instant::now();
        // max_wall is bounded by the config, but no number may crash the run.
        let deadline = now
            .checked_add(spec.max_wall)
            .unwrap_or(now + Duration::from_secs(crate::config::bounds::MAX_WALL_SECS.1));
        let tool_defs: Vec<Value> = spec.tools.iter().map(|t| t.definition()).collect();
        let conv = Conversation::new(
            &spec.system_prompt,
            &spec.body,
            &Value::Array(tool_defs.clone()).to_string(),
        );
        TaskRun {
            h,
            spec,
            sink,
            conv,
            tool_defs,
            stats: Stats::default(),
            repeats: Repeats::default(),
            quotable: Quotable::default(),
            asked_again: false,
            asked_shorter: false,
            repair: None,
            repaired: false,
            deadline,
        }
    }

    fn emit(&mut self, event: &TaskEvent<'_>) {
        (self.sink)(event);
    }

    /// The loop. It only ever ends with the reason it stopped.
    async fn run(&mut self) -> Result<Infallible, Stop> {
        let spec = self.spec;
        self.emit(&TaskEvent::Started {
            task: &spec.name,
            tools: &spec.tools,
        });
        let mut tweaks = Tweaks::default();
        loop {
            self.check_bounds()?;
            let note = self.fit_context(tweaks).await?;
            let completion = self.call_model(tweaks, note).await?;
            let reply = self.take_reply(&completion);
            if reply.calls.is_empty() {
                tweaks = self.answer_or_ask_again(reply)?;
                continue;
            }
            tweaks = Tweaks::default();
            self.conv
                .push(replayed_assistant(&reply, spec.replay_thinking));
            self.check_bounds().map_err(|stop| {
                stop.with_note(format!(
                    "the last reply's {} tool call(s) were not executed",
                    reply.calls.len()
                ))
            })?;
            self.answer_calls(&reply).await?;
        }
    }

    /// `max_turns` or `max_total_tokens` reached.
    fn check_bounds(&self) -> Result<(), Stop> {
        let spec = self.spec;
        if self.stats.turns >= spec.max_turns {
            return Err(Stop::failed(
                StopReason::MaxTurns,
                format!("no final answer within max_turns = {}", spec.max_turns),
            ));
        }
        let used = self.stats.usage.total();
        if used >= spec.max_total_tokens {
            return Err(Stop::failed(
                StopReason::MaxTotalTokens,
                format!(
                    "{used} tokens used, max_total_tokens = {}",
                    spec.max_total_tokens
                ),
            ));
        }
        Ok(())
    }

    /// Makes the next request fit the window. Where the server counts, the
    /// request is counted as it is, and only when the count is over the
    /// budget is anything elided (by the estimate, anchored on the count)
    /// and the request counted again; each round removes at least one more
    /// thing, or the task stops. Elsewhere the estimate decides.
    async fn fit_context(&mut self, tweaks: Tweaks) -> Result<ContextNote, Stop> {
        let budget = self.spec.prompt_budget();
        let mut note = ContextNote {
            window: self.spec.context_tokens,
            budget,
            estimated_prompt_tokens: self.conv.estimate(),
            ..ContextNote::default()
        };
        if let Some(budget) = budget {
            loop {
                let Some(n) = self.count_exactly(tweaks).await else {
                    note.counted = Counted::Estimated;
                    self.fit_round(budget, &mut note)?;
                    break;
                };
                note.counts.push(n);
                self.conv.set_exact(n);
                note.counted = Counted::Exact;
                if n <= budget {
                    break;
                }
                self.fit_round(budget, &mut note)?;
            }
        }
        note.prompt_tokens = self.conv.estimate();
        if !note.elided.is_empty() {
            self.repeats.forget(&note.elided.call_ids);
            self.emit(&TaskEvent::ContextElided {
                elided: &note.elided,
            });
        }
        Ok(note)
    }

    /// One round of eliding until the estimate fits `budget`.
    fn fit_round(&mut self, budget: u64, note: &mut ContextNote) -> Result<(), Stop> {
        match self.conv.fit(budget) {
            Ok(elided) => {
                note.elided.extend(elided);
                Ok(())
            }
            Err(elided) => {
                note.elided.extend(elided);
                Err(self.exhausted(budget, note))
            }
        }
    }

    /// The server's count of the request as it would go out now.
    async fn count_exactly(&self, tweaks: Tweaks) -> Option<u64> {
        let body = self.request_body(tweaks);
        self.h
            .endpoint
            .count_prompt(&body, self.conv.min_tokens(), self.deadline, &self.h.cancel)
            .await
    }

    fn request_body(&self, tweaks: Tweaks) -> Value {
        let tools: &[Value] = if self.repair.is_some() {
            &[]
        } else {
            &self.tool_defs
        };
        chat::build_request(
            self.conv.messages(),
            tools,
            &self.spec.sampling,
            tweaks,
            self.repair.as_ref(),
        )
    }

    fn exhausted(&self, budget: u64, note: &ContextNote) -> Stop {
        let how = match note.counted {
            Counted::Exact => "counts",
            Counted::Estimated => "needs about",
        };
        Stop::failed(
            StopReason::ContextExhausted,
            format!(
                "the prompt {how} {} tokens but only {budget} fit (context_tokens − max_tokens), even after removing {} tool result(s) and the thinking of {} turn(s)",
                self.conv.estimate(),
                note.elided.call_ids.len(),
                note.elided.reasoning
            ),
        )
    }

    /// Sends the conversation; on the server's context error, shrinks once and resends.
    async fn call_model(
        &mut self,
        tweaks: Tweaks,
        mut note: ContextNote,
    ) -> Result<Completion, Stop> {
        let turn = self.stats.turns + 1;
        let mut shrunk = false;
        loop {
            debug_assert!(
                self.conv
                    .messages()
                    .last()
                    .is_some_and(|m| m.role != Role::Assistant || m.tool_calls.is_empty())
            );
            let body = self.request_body(tweaks);
            self.emit(&TaskEvent::RequestSent {
                turn,
                messages: self.conv.messages().len(),
                prompt_tokens: note.prompt_tokens,
                counted: note.counted,
            });
            match self.send(turn, body, &note).await {
                Ok(c) => return Ok(c),
                Err(CallError::ContextExceeded { n_prompt, n_ctx }) if !shrunk => {
                    shrunk = true;
                    note = self.shrink(n_prompt, n_ctx)?;
                }
                Err(e) => return Err(self.call_failed(e)),
            }
        }
    }

    /// One model call with its retries; every attempt is reported as it ends.
    async fn send(
        &mut self,
        turn: u32,
        body: Value,
        note: &ContextNote,
    ) -> Result<Completion, CallError> {
        let TaskRun {
            h,
            sink,
            stats,
            deadline,
            ..
        } = self;
        let mut context = Some(note);
        let mut on_attempt = |a: &Attempt<'_>| {
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
            sink(&TaskEvent::Attempt(ModelAttempt {
                turn,
                attempt: a,
                context: context.take(),
            }));
        };
        h.endpoint
            .chat(body, *deadline, &h.cancel, &*h.clock, &mut on_attempt)
            .await
    }

    /// After the server said the prompt is over its context: recalibrates
    /// the estimate to the server's count and elides to fit its window.
    fn shrink(&mut self, n_prompt: Option<u64>, n_ctx: Option<u64>) -> Result<ContextNote, Stop> {
        let estimate = self.conv.estimate();
        self.conv
            .calibrate(n_prompt.unwrap_or(estimate.saturating_mul(2)));
        let budget = n_ctx
            .map(|n| n.saturating_sub(u64::from(self.spec.sampling.max_tokens)))
            .into_iter()
            .chain(self.spec.prompt_budget())
            .min()
            .unwrap_or(self.conv.estimate() / 2);
        self.emit(&TaskEvent::ContextExceeded { n_prompt, n_ctx });
        match self.conv.fit(budget) {
            Ok(elided) => {
                self.repeats.forget(&elided.call_ids);
                let estimate = self.conv.estimate();
                Ok(ContextNote {
                    window: self.spec.context_tokens,
                    prompt_tokens: estimate,
                    estimated_prompt_tokens: estimate,
                    budget: Some(budget),
                    elided,
                    ..ContextNote::default()
                })
            }
            Err(_) => Err(Stop::failed(
                StopReason::ContextExhausted,
                format!(
                    "the prompt does not fit the server's context ({n_ctx:?} tokens) even after removing old tool results"
                ),
            )),
        }
    }

    fn call_failed(&self, e: CallError) -> Stop {
        let stop = |reason| Stop::failed(reason, e.to_string());
        match &e {
            CallError::WallClock => Stop::failed(
                StopReason::MaxWallSecs,
                format!(
                    "the task's wall clock (max_wall_secs = {}) ran out during a model call",
                    self.spec.max_wall.as_secs()
                ),
            ),
            CallError::Unavailable(_) => stop(StopReason::EndpointError).retryable(),
            CallError::Rejected { .. } | CallError::TooLarge(_) | CallError::NotRecorded(_) => {
                stop(StopReason::EndpointError)
            }
            CallError::ContextExceeded { .. } => stop(StopReason::ContextExhausted),
            CallError::Interrupted => stop(StopReason::Interrupted).retryable(),
            CallError::Setup { .. } => Stop::setup_fault(self.h.endpoint.diagnose(&e)),
        }
    }

    /// Counts the reply's tokens and reads it.
    fn take_reply(&mut self, c: &Completion) -> Reply {
        self.stats.turns += 1;
        let turn = self.stats.turns;
        let choice = c.response.choices.first().cloned().unwrap_or_default();
        let quotable = &self.quotable;
        let quoted = |call: &str| quotable.quotes(call);
        let reply = read_reply(
            &choice.message,
            choice.finish_reason.as_deref(),
            &format!("recovered-{turn}"),
            &quoted,
        );
        let usage = c
            .response
            .usage
            .unwrap_or_else(|| self.estimated_usage(&reply));
        self.stats.usage.add(&usage);
        self.conv
            .anchor(usage.prompt_tokens, usage.completion_tokens);
        let total_tokens = self.stats.usage.total_tokens;
        self.emit(&TaskEvent::ReplyRead(ReplyFacts {
            turn,
            usage,
            total_tokens,
            finish_reason: choice.finish_reason.as_deref(),
            thinking: reply.thinking.as_deref(),
            recovered: reply.recovered,
            calls: &reply.calls,
            unread_calls: reply.unread_calls,
        }));
        let unread = u32::try_from(reply.unread_calls).unwrap_or(u32::MAX);
        self.stats.calls_over_budget = self.stats.calls_over_budget.saturating_add(unread);
        reply
    }

    /// A server that reports no `usage`: the prompt as estimated, the reply
    /// at about 3 characters a token.
    fn estimated_usage(&self, reply: &Reply) -> Usage {
        let out = reply.content.len()
            + reply.thinking.as_ref().map_or(0, String::len)
            + reply
                .calls
                .iter()
                .map(|c| c.function.arguments.len())
                .sum::<usize>();
        Usage {
            prompt_tokens: self.conv.estimate(),
            completion_tokens: (out as u64).div_ceil(3),
            total_tokens: 0,
        }
    }

    /// A reply without calls: the final answer, or — when it is empty — the
    /// request once more (without thinking if thinking used up
    /// `max_tokens`), and `empty_response` the second time.
    fn answer_or_ask_again(&mut self, reply: Reply) -> Result<Tweaks, Stop> {
        if !reply.content.is_empty() && reply.cut_off {
            return self.ask_shorter(reply);
        }
        if !reply.content.is_empty() {
            return match self.spec.output_schema.clone() {
                Some(schema) => self.check_answer(&schema, reply),
                None => Err(Stop::answered(reply.content)),
            };
        }
        if self.asked_again {
            return Err(Stop::failed(
                StopReason::EmptyResponse,
                "the model gave no answer and no tool call, twice",
            ));
        }
        self.asked_again = true;
        let thinking_off = reply.cut_off && reply.thinking.is_some();
        self.emit(&TaskEvent::AskedAgain { thinking_off });
        Ok(Tweaks {
            seed: Some(u64::from(fastrand::u32(..))),
            thinking_off,
        })
    }

    /// An answer cut at `max_tokens` is no answer (SPEC §16): it is asked
    /// for once more — complete, shorter, thinking off — and a second cut
    /// (or no turn left to ask in) ends the task as `answer_truncated`.
    fn ask_shorter(&mut self, reply: Reply) -> Result<Tweaks, Stop> {
        let max_tokens = self.spec.sampling.max_tokens;
        let truncated = |why: &str| {
            Stop::failed(
                StopReason::AnswerTruncated,
                format!(
                    "the answer was cut at max_tokens = {max_tokens} (finish_reason \"length\"){why}; raise max_tokens or ask for a shorter answer"
                ),
            )
        };
        if self.asked_shorter {
            return Err(truncated(", again when asked for a shorter one"));
        }
        if self.stats.turns >= self.spec.max_turns {
            return Err(truncated(" and no turn is left to ask again"));
        }
        self.asked_shorter = true;
        self.emit(&TaskEvent::AnswerCut);
        // Only its start goes back: a whole cut answer is max_tokens long,
        // and sent again it could crowd the window the retry needs.
        let mut cut = replayed_assistant(&reply, self.spec.replay_thinking);
        cut.content = crate::base::text::clip(&cut.content, CUT_ANSWER_REPLAYED_CHARS);
        self.conv.push(cut);
        self.conv.push(Message::user(
            "Your answer was cut off at the output length limit. Give your complete final answer again, shorter.",
        ));
        // Under an output schema this is also the one repair: the schema
        // goes as a grammar, so the JSON can close within max_tokens.
        if let Some(schema) = &self.spec.output_schema {
            self.repair = Some(schema.response_format());
            self.repaired = true;
        }
        Ok(Tweaks {
            seed: None,
            thinking_off: true,
        })
    }

    /// A final answer under an output schema: it stands when it matches; the
    /// first time it does not, the model is asked once more with the errors
    /// quoted, the schema as `response_format` and thinking off; the second
    /// time, the task ends as `invalid_answer`.
    fn check_answer(&mut self, schema: &OutputSchema, reply: Reply) -> Result<Tweaks, Stop> {
        let errors = match schema.check(&reply.content) {
            Ok(value) => return Err(Stop::answered(reply.content).with_result(value)),
            Err(errors) => errors,
        };
        let invalid = |why: &str| {
            Stop::failed(
                StopReason::InvalidAnswer,
                format!(
                    "the answer does not match the output schema {}{why}: {}",
                    schema.path.display(),
                    errors.join("; ")
                ),
            )
        };
        if self.repaired {
            return Err(invalid(
                ", even when asked again with the schema as a grammar",
            ));
        }
        if self.stats.turns >= self.spec.max_turns {
            return Err(invalid(" and no turn is left to ask again"));
        }
        self.repaired = true;
        self.emit(&TaskEvent::AnswerRejected { errors: &errors });
        self.conv
            .push(replayed_assistant(&reply, self.spec.replay_thinking));
        self.conv.push(Message::user(format!(
            "Your answer does not match the required JSON Schema:\n- {}\nReply with only the corrected JSON value.",
            errors.join("\n- ")
        )));
        self.repair = Some(schema.response_format());
        // Measured on llama-server: with thinking on, the grammar leaves the
        // thought unconstrained and it can use up max_tokens before any JSON.
        Ok(Tweaks {
            seed: None,
            thinking_off: true,
        })
    }

    /// Answers every call of the reply (within the wall clock) and appends
    /// the results to the conversation in call order.
    async fn answer_calls(&mut self, reply: &Reply) -> Result<(), Stop> {
        let turn = Turn {
            number: self.stats.turns,
            calls: &reply.calls,
            cut_off: reply.cut_off,
            recovered: reply.recovered,
        };
        let ctx = CallContext {
            task: self.spec.name.clone(),
            run_id: self.spec.run_id.clone(),
            turn: self.stats.turns,
            call_id: String::new(),
            agent: self.spec.agent.clone(),
            now: (self.h.clock)(),
            dry_run: self.spec.dry_run,
            max_chars: self.spec.max_tool_result_chars,
            redactor: self.h.redactor.clone(),
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
            _ = self.h.cancel.cancelled() => return Err(self.call_failed(CallError::Interrupted)),
            _ = tokio::time::sleep_until(self.deadline) => {
                return Err(Stop::failed(
                    StopReason::MaxWallSecs,
                    format!("the task's wall clock (max_wall_secs = {}) ran out during tool calls", self.spec.max_wall.as_secs()),
                ));
            }
            r = work => r,
        };
        match result {
            TurnResult::Answered(answers) => {
                self.record_answers(&answers);
                if let Some(fault) = answers.iter().find_map(|a| a.setup_fault.clone()) {
                    return Err(Stop::setup_fault(fault));
                }
                for a in answers {
                    let origin = ToolOrigin {
                        call_id: a.call_id.clone(),
                        call: crate::tools::describe_call(&a.name, &a.arguments),
                    };
                    self.conv
                        .push_tool(Message::tool(a.call_id, a.text), origin);
                }
                Ok(())
            }
            TurnResult::LoopDetected { call, answers } => {
                self.record_answers(&answers);
                Err(Stop::failed(
                    StopReason::LoopDetected,
                    format!("the model kept repeating the same call: {call}"),
                ))
            }
        }
    }

    fn record_answers(&mut self, answers: &[Answer]) {
        for a in answers {
            self.stats.tool_calls += 1;
            self.stats.tool_errors += u32::from(a.is_error);
            self.stats.calls_over_budget = self
                .stats
                .calls_over_budget
                .saturating_add(u32::from(a.over_budget));
            self.quotable.push(&a.undefanged);
            self.emit(&TaskEvent::ToolAnswered(a));
        }
    }
}
