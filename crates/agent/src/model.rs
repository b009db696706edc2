//! One model call of the loop: the conversation fitted to the context
//! window (counted exactly when the server can), the request built and
//! sent, a context overflow shrunk and retried once, and the reply taken
//! apart into what is kept and what is sent back (docs/tasks.md, "The
//! loop": context). [`ModelCall`] is the call's view of the run — what it reads
//! and the parts of the run's state it changes, each named.
//!
//! Spend is not asked or charged here: the endpoint asks the budget before
//! every live attempt and charges each (docs/budget-and-traces.md, "Budget"); a
//! limit reached comes back as [`CallError::OverBudget`] and ends the task
//! `budget_exhausted`. The one thing left to the loop is a live reply the
//! server sent without `usage`: its estimated tokens are charged as the reply
//! is read.

use serde_json::Value;
use tokio::time::Instant;

use crate::calls::{Quotable, Repeats};
use crate::context::{ContextNote, Conversation, Counted};
use crate::deps::TaskDeps;
use crate::events::{ModelAttempt, ReplyFacts, Sink, TaskEvent};
use crate::outcome::{Stats, Stop, StopReason};
use crate::spec::TaskSpec;
use harness_endpoint::{CallError, CallEvent, Completion, Endpoint};
use harness_wire::chat;
use harness_wire::chat::{Role, Tweaks, Usage};
use harness_wire::reply::{OfferedTool, ReadAgainst, Reply, read_reply};

/// One model call's view of the run: what it reads, and the parts of the
/// run's state it changes.
pub(crate) struct ModelCall<'r, 's> {
    pub deps: &'r TaskDeps,
    pub spec: &'r TaskSpec,
    pub deadline: Instant,
    pub sink: &'r mut Sink<'s>,
    pub conv: &'r mut Conversation,
    /// Calls whose results are elided are forgotten by the repeat guard.
    pub repeats: &'r mut Repeats,
    pub stats: &'r mut Stats,
    /// The latest tool results, for telling a quoted call from a call.
    pub quotable: &'r Quotable,
    pub request: Request<'r>,
}

/// What the request carries besides the conversation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'r> {
    /// The task's tools, offered unless a `response_format` is asked for.
    pub tools: &'r [Value],
    /// The same tools, as calls written as text are matched against them.
    pub offered: &'r [OfferedTool],
    /// The output schema, when an answer is asked for under it.
    pub response_format: Option<&'r Value>,
    pub tweaks: Tweaks,
}

impl ModelCall<'_, '_> {
    fn emit(&mut self, event: &TaskEvent<'_>) {
        (self.sink)(event);
    }

    /// Makes the next request fit the window. Where the server counts, the
    /// request is counted as it is, and only when the count is over the
    /// room is anything elided (by the estimate, anchored on the count)
    /// and the request counted again; each round removes at least one more
    /// thing, or the task stops. Elsewhere the estimate decides.
    pub(crate) async fn fit_context(&mut self) -> Result<ContextNote, Stop> {
        let room = self.spec.prompt_room();
        let mut note = ContextNote {
            window: self.spec.context_tokens,
            room,
            estimated_prompt_tokens: self.conv.estimate(),
            ..ContextNote::default()
        };
        if let Some(room) = room {
            loop {
                let Some(n) = self.count_exactly().await else {
                    note.counted = Counted::Estimated;
                    self.fit_round(room, &mut note)?;
                    break;
                };
                note.counts.push(n);
                self.conv.set_exact(n);
                note.counted = Counted::Exact;
                if n <= room {
                    break;
                }
                self.fit_round(room, &mut note)?;
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

    /// One round of eliding until the estimate fits `room`.
    fn fit_round(&mut self, room: u64, note: &mut ContextNote) -> Result<(), Stop> {
        match self.conv.fit(room) {
            Ok(elided) => {
                note.elided.extend(elided);
                Ok(())
            }
            Err(elided) => {
                note.elided.extend(elided);
                Err(self.exhausted(room, note))
            }
        }
    }

    /// The server's count of the request as it would go out now.
    async fn count_exactly(&self) -> Option<u64> {
        let body = self.request_body();
        self.deps
            .endpoint
            .counter()
            .count_prompt(
                &body,
                self.conv.min_tokens(),
                self.deadline,
                &self.deps.cancel,
            )
            .await
    }

    /// The request as it would go out now: an answer asked for under the
    /// output schema is offered no tools.
    fn request_body(&self) -> Value {
        let Request {
            tools,
            response_format,
            tweaks,
            ..
        } = self.request;
        let tools = if response_format.is_some() {
            &[]
        } else {
            tools
        };
        chat::build_request(
            self.conv.messages(),
            tools,
            &self.spec.sampling,
            tweaks,
            response_format,
        )
    }

    fn exhausted(&self, room: u64, note: &ContextNote) -> Stop {
        let how = match note.counted {
            Counted::Exact => "counts",
            Counted::Estimated => "needs about",
        };
        Stop::failed(
            StopReason::ContextExhausted,
            format!(
                "the prompt {how} {} tokens but only {room} fit (context_tokens − max_tokens), even after removing {} tool result(s) and the thinking of {} turn(s)",
                self.conv.estimate(),
                note.elided.call_ids.len(),
                note.elided.reasoning
            ),
        )
    }

    /// Sends the conversation; on the server's context error, shrinks once and resends.
    pub(crate) async fn call_model(&mut self, mut note: ContextNote) -> Result<Completion, Stop> {
        let turn = self.stats.turns + 1;
        let mut shrunk = false;
        loop {
            debug_assert!(
                self.conv
                    .messages()
                    .last()
                    .is_some_and(|m| m.role != Role::Assistant || m.tool_calls.is_empty())
            );
            let body = self.request_body();
            match self.send(turn, body, &note).await {
                Ok(c) => return Ok(c),
                Err(CallError::ContextExceeded { n_prompt, n_ctx }) if !shrunk => {
                    shrunk = true;
                    note = self.shrink(n_prompt, n_ctx)?;
                }
                Err(e) => return Err(call_failed(e, self.spec, &self.deps.endpoint)),
            }
        }
    }

    /// One model call with its retries: the request reported once the
    /// endpoint lets it go out (a `[budget]` limit reached sends nothing,
    /// and nothing is reported sent), every attempt as it ends.
    async fn send(
        &mut self,
        turn: u32,
        body: Value,
        note: &ContextNote,
    ) -> Result<Completion, CallError> {
        let ModelCall {
            deps,
            sink,
            stats,
            deadline,
            conv,
            ..
        } = self;
        let messages = conv.messages().len();
        let mut context = Some(note);
        let mut on_event = |e: CallEvent<'_>| {
            let a = match e {
                CallEvent::Sending => {
                    return sink(&TaskEvent::RequestSent {
                        turn,
                        messages,
                        prompt_tokens: note.prompt_tokens,
                        counted: note.counted,
                    });
                }
                CallEvent::Ended(a) => a,
            };
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
        deps.endpoint
            .chat(body, *deadline, &deps.cancel, &*deps.clock, &mut on_event)
            .await
    }

    /// After the server said the prompt is over its context: recalibrates
    /// the estimate to the server's count and elides to fit its window.
    fn shrink(&mut self, n_prompt: Option<u64>, n_ctx: Option<u64>) -> Result<ContextNote, Stop> {
        let estimate = self.conv.estimate();
        self.conv
            .calibrate(n_prompt.unwrap_or(estimate.saturating_mul(2)));
        let room = n_ctx
            .map(|n| n.saturating_sub(u64::from(self.spec.sampling.max_tokens)))
            .into_iter()
            .chain(self.spec.prompt_room())
            .min()
            .unwrap_or(self.conv.estimate() / 2);
        self.emit(&TaskEvent::ContextExceeded { n_prompt, n_ctx });
        match self.conv.fit(room) {
            Ok(elided) => {
                self.repeats.forget(&elided.call_ids);
                let estimate = self.conv.estimate();
                Ok(ContextNote {
                    window: self.spec.context_tokens,
                    prompt_tokens: estimate,
                    estimated_prompt_tokens: estimate,
                    room: Some(room),
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

    /// Counts the reply's tokens and reads it; a live reply without
    /// `usage` charges the budget its estimate.
    pub(crate) fn take_reply(&mut self, c: &Completion) -> Reply {
        self.stats.turns += 1;
        let turn = self.stats.turns;
        let choice = c.response.choices.first().cloned().unwrap_or_default();
        let quotable = self.quotable;
        // A request under the output schema offered no tools.
        let offered = match self.request.response_format {
            None => self.request.offered,
            Some(_) => &[],
        };
        let spec = self.spec;
        let reply = read_reply(
            &choice.message,
            choice.finish_reason.as_deref(),
            &format!("recovered-{turn}"),
            &ReadAgainst {
                offered,
                // The model saw results defanged (a word joiner in each
                // control string); a quote copied from them is still a quote.
                quoted: &|call| {
                    quotable.quotes(call)
                        || (call.contains('\u{2060}')
                            && quotable.quotes(&call.replace('\u{2060}', "")))
                },
                is_answer: &|text| {
                    spec.output_schema
                        .as_ref()
                        .is_some_and(|schema| schema.check(text).is_ok())
                },
            },
        );
        let usage = c.response.usage.unwrap_or_else(|| {
            let estimated = self.estimated_usage(&reply);
            let tokens = estimated
                .prompt_tokens
                .saturating_add(estimated.completion_tokens);
            self.deps.endpoint.charge_estimate(c, tokens);
            estimated
        });
        self.stats.usage.add(&usage);
        self.conv
            .anchor(usage.prompt_tokens, usage.completion_tokens);
        let total_tokens = self.stats.usage.total_tokens;
        self.emit(&TaskEvent::ReplyRead(ReplyFacts {
            turn,
            usage,
            total_tokens,
            finish_reason: choice.finish_reason.as_deref(),
            model: c.response.model.as_deref(),
            content: &reply.content,
            thinking: reply.thinking.as_deref(),
            recovered: reply.recovered,
            calls: &reply.calls,
            unread_calls: reply.unread_calls,
            held_back: reply.held_back,
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
}

/// How a failed model call ends the task.
pub(crate) fn call_failed(e: CallError, spec: &TaskSpec, endpoint: &Endpoint) -> Stop {
    let stop = |reason| Stop::failed(reason, e.to_string());
    match &e {
        CallError::WallClock => Stop::failed(
            StopReason::MaxWallSecs,
            format!(
                "the task's wall clock (max_wall_secs = {}) ran out during a model call; a model this slow (a small one on a CPU) answers sooner with a lower [model] max_tokens (now {})",
                spec.max_wall.as_secs(),
                spec.sampling.max_tokens
            ),
        ),
        CallError::Unavailable(_) => stop(StopReason::EndpointError).retryable(),
        CallError::Rejected { .. } | CallError::TooLarge(_) | CallError::NotRecorded(_) => {
            stop(StopReason::EndpointError)
        }
        CallError::ContextExceeded { .. } => stop(StopReason::ContextExhausted),
        CallError::Interrupted => stop(StopReason::Interrupted).retryable(),
        CallError::OverBudget(_) => stop(StopReason::BudgetExhausted).retryable(),
        CallError::Setup { .. } => Stop::setup_fault(endpoint.diagnose(&e)),
    }
}
