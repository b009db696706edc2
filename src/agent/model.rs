//! One model call of the loop: the conversation fitted to the context
//! window (counted exactly when the server can), the request built and
//! sent, a context overflow shrunk and retried once, and the reply taken
//! apart into what is kept and what is sent back.

use super::TaskRun;
use crate::agent::context::{ContextNote, Counted};
use crate::agent::events::{ModelAttempt, ReplyFacts, TaskEvent};
use crate::agent::outcome::{Stop, StopReason};
use crate::endpoint::{Attempt, CallError, Completion};
use crate::wire::chat;
use crate::wire::chat::{Role, Tweaks, Usage};
use crate::wire::reply::{Reply, read_reply};
use serde_json::Value;

impl TaskRun<'_, '_> {
    /// Makes the next request fit the window. Where the server counts, the
    /// request is counted as it is, and only when the count is over the
    /// room is anything elided (by the estimate, anchored on the count)
    /// and the request counted again; each round removes at least one more
    /// thing, or the task stops. Elsewhere the estimate decides.
    pub(super) async fn fit_context(&mut self, tweaks: Tweaks) -> Result<ContextNote, Stop> {
        let room = self.spec.prompt_room();
        let mut note = ContextNote {
            window: self.spec.context_tokens,
            room,
            estimated_prompt_tokens: self.conv.estimate(),
            ..ContextNote::default()
        };
        if let Some(room) = room {
            loop {
                let Some(n) = self.count_exactly(tweaks).await else {
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
    pub(super) fn fit_round(&mut self, room: u64, note: &mut ContextNote) -> Result<(), Stop> {
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
    pub(super) async fn count_exactly(&self, tweaks: Tweaks) -> Option<u64> {
        let body = self.request_body(tweaks);
        self.deps
            .endpoint
            .count_prompt(
                &body,
                self.conv.min_tokens(),
                self.deadline,
                &self.deps.cancel,
            )
            .await
    }

    pub(super) fn request_body(&self, tweaks: Tweaks) -> Value {
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

    pub(super) fn exhausted(&self, room: u64, note: &ContextNote) -> Stop {
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
    pub(super) async fn call_model(
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
            // A recorded answer (a resume, a replay) spends nothing.
            if self.deps.endpoint.next_call_is_live() {
                self.deps
                    .budget
                    .check()
                    .map_err(|why| Stop::failed(StopReason::BudgetExhausted, why).retryable())?;
            }
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
    pub(super) async fn send(
        &mut self,
        turn: u32,
        body: Value,
        note: &ContextNote,
    ) -> Result<Completion, CallError> {
        let TaskRun {
            deps,
            sink,
            stats,
            deadline,
            unbilled,
            ..
        } = self;
        let mut context = Some(note);
        let runpod = deps.endpoint.kind() == crate::config::EndpointKind::Runpod;
        *unbilled = None;
        let mut on_attempt = |a: &Attempt<'_>| {
            // What the budget counts as GPU time: RunPod's execution time
            // (the request's wall time when a job reports none: a timed-out
            // or cancelled one), else the request's wall time; a recorded
            // answer cost nothing. A failed attempt is spent at once (the
            // retry's check sees it), the answered one with its tokens.
            if !a.recorded {
                let ms = match (runpod, a.runpod.as_ref().and_then(|j| j.execution_time)) {
                    (true, Some(ms)) => ms,
                    _ => a.latency_ms,
                };
                match a.error {
                    Some(_) => deps.budget.spend(0, ms),
                    None => *unbilled = Some(ms),
                }
            }
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
        let budget = deps.budget.clone();
        let gate = move || budget.check();
        deps.endpoint
            .chat(
                body,
                *deadline,
                &deps.cancel,
                &*deps.clock,
                &mut on_attempt,
                &gate,
            )
            .await
    }

    /// After the server said the prompt is over its context: recalibrates
    /// the estimate to the server's count and elides to fit its window.
    pub(super) fn shrink(
        &mut self,
        n_prompt: Option<u64>,
        n_ctx: Option<u64>,
    ) -> Result<ContextNote, Stop> {
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

    pub(super) fn call_failed(&self, e: CallError) -> Stop {
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
            CallError::OverBudget(_) => stop(StopReason::BudgetExhausted).retryable(),
            CallError::Setup { .. } => Stop::setup_fault(self.deps.endpoint.diagnose(&e)),
        }
    }

    /// Counts the reply's tokens and reads it.
    pub(super) fn take_reply(&mut self, c: &Completion) -> Reply {
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
        if let Some(gpu_ms) = self.unbilled.take() {
            let tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
            self.deps.budget.spend(tokens, gpu_ms);
        }
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
        }));
        let unread = u32::try_from(reply.unread_calls).unwrap_or(u32::MAX);
        self.stats.calls_over_budget = self.stats.calls_over_budget.saturating_add(unread);
        reply
    }

    /// A server that reports no `usage`: the prompt as estimated, the reply
    /// at about 3 characters a token.
    pub(super) fn estimated_usage(&self, reply: &Reply) -> Usage {
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
