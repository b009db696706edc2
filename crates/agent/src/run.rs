//! One task's run of the loop (docs/tasks.md, "The loop"): [`TaskRun`], the
//! state the loop keeps from turn to turn, and its steps — the bounds checked,
//! the model called (through a [`ModelCall`] over the state it touches), a
//! reply without calls judged ([`AnswerState`]), a reply's calls answered. The
//! loop ends with the final answer, or with the [`Stop`] that ended it without
//! one.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::answer::{AnswerState, AskAgain, Verdict};
use crate::calls::{Answer, Planned, Quotable, Repeats, Rules, Turn, TurnResult};
use crate::calls::{plan_calls, run_calls};
use crate::context::{Conversation, ToolOrigin};
use crate::deps::TaskDeps;
use crate::events::{Sink, TaskEvent};
use crate::model::{ModelCall, Request, call_failed};
use crate::outcome::{FinalAnswer, Outcome, Stats, Stop, StopReason};
use crate::spec::TaskSpec;
use harness_endpoint::CallError;
use harness_tools::CallContext;
use harness_wire::chat::{Message, Tweaks};
use harness_wire::reply::{OfferedTool, Reply, replayed_assistant};

/// Runs one task to its end and reports every step to `sink`, the last
/// being [`TaskEvent::Stopped`]. Never returns without an outcome.
pub async fn run_task(deps: &TaskDeps, spec: &TaskSpec, sink: &mut Sink<'_>) -> Outcome {
    let mut run = TaskRun::new(deps, spec, sink);
    let ending = run.run().await;
    let outcome = Outcome::ended(ending, run.stats.clone());
    run.emit(&TaskEvent::Stopped(&outcome));
    outcome
}

/// The state of one task run, with a method per step of the loop.
struct TaskRun<'a, 's> {
    deps: &'a TaskDeps,
    spec: &'a TaskSpec,
    sink: &'a mut Sink<'s>,
    conv: Conversation,
    tool_defs: Vec<Value>,
    /// The tools as calls written as text are matched against them.
    offered: Vec<OfferedTool>,
    stats: Stats,
    repeats: Repeats,
    /// The latest tool results, for telling a quoted call from a call.
    quotable: Quotable,
    /// What the answer checks remember: each way of asking again, once.
    answers: AnswerState,
    deadline: Instant,
}

impl<'a, 's> TaskRun<'a, 's> {
    fn new(deps: &'a TaskDeps, spec: &'a TaskSpec, sink: &'a mut Sink<'s>) -> Self {
        let now = Instant::now();
        // max_wall is bounded by the config, but no number may crash the run.
        let deadline = now
            .checked_add(spec.max_wall)
            .unwrap_or(now + Duration::from_secs(harness_config::bounds::MAX_WALL_SECS.1));
        let tool_defs: Vec<Value> = spec
            .tools
            .iter()
            .map(|t| crate::aids::definition(t, spec.prompt_aids))
            .collect();
        let conv = Conversation::new(
            &spec.system_prompt,
            &spec.body,
            &Value::Array(tool_defs.clone()).to_string(),
        );
        TaskRun {
            deps,
            spec,
            sink,
            conv,
            offered: tool_defs.iter().map(OfferedTool::of).collect(),
            tool_defs,
            stats: Stats::default(),
            repeats: Repeats::default(),
            quotable: Quotable::default(),
            answers: AnswerState::default(),
            deadline,
        }
    }

    fn emit(&mut self, event: &TaskEvent<'_>) {
        (self.sink)(event);
    }

    /// The loop: the final answer, or why it stopped without one.
    async fn run(&mut self) -> Result<FinalAnswer, Stop> {
        let spec = self.spec;
        self.emit(&TaskEvent::Started {
            task: &spec.name,
            tools: &spec.tools,
        });
        let mut tweaks = Tweaks::default();
        loop {
            self.check_bounds()?;
            let mut model = self.model_call(tweaks);
            let note = model.fit_context().await?;
            let completion = model.call_model(note).await?;
            let reply = model.take_reply(&completion);
            if reply.calls.is_empty() {
                match self
                    .answers
                    .judge(reply, spec, self.stats.turns, self.stats.tool_calls)?
                {
                    Verdict::Final(answer) => return Ok(answer),
                    Verdict::AskAgain(ask) => tweaks = self.ask_again(ask),
                }
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

    /// The next model call, over the parts of the run it reads and changes.
    fn model_call(&mut self, tweaks: Tweaks) -> ModelCall<'_, 's> {
        ModelCall {
            deps: self.deps,
            spec: self.spec,
            deadline: self.deadline,
            sink: &mut *self.sink,
            conv: &mut self.conv,
            repeats: &mut self.repeats,
            stats: &mut self.stats,
            quotable: &self.quotable,
            request: Request {
                tools: &self.tool_defs,
                offered: &self.offered,
                response_format: self.answers.response_format(),
                tweaks,
            },
        }
    }

    /// An answer asked for again: reported, its messages appended; the
    /// next request's tweaks.
    fn ask_again(&mut self, ask: AskAgain) -> Tweaks {
        self.emit(&ask.event());
        for m in ask.messages {
            self.conv.push(m);
        }
        ask.tweaks
    }

    /// Answers every call of the reply (within the wall clock) and appends
    /// the results to the conversation in call order.
    async fn answer_calls(&mut self, reply: &Reply) -> Result<(), Stop> {
        let turn = Turn {
            number: self.stats.turns,
            calls: &reply.calls,
            // A call followed by others held back was not the one cut.
            cut_off: reply.cut_off && reply.held_back == 0,
            recovered: reply.recovered,
        };
        let ctx = CallContext {
            task: self.spec.name.clone(),
            run_id: self.spec.run_id.clone(),
            turn: self.stats.turns,
            call_id: String::new(),
            agent: self.spec.agent.clone(),
            now: (self.deps.clock)(),
            dry_run: self.spec.dry_run,
            max_chars: self.spec.max_tool_result_chars,
            redactor: self.deps.redactor.clone(),
        };
        let rules = Rules {
            allowed: &self.spec.tools,
            max_calls_per_turn: self.spec.max_calls_per_turn,
            max_writes: self.spec.max_writes,
            max_chars: self.spec.max_tool_result_chars,
            redactor: &self.deps.redactor,
        };
        let result = match plan_calls(&turn, &rules, &mut self.repeats) {
            Ok(planned) => {
                for call in planned.writes_to_send(turn.number, &self.deps.toolbox, ctx.dry_run) {
                    self.emit(&TaskEvent::WriteIntent {
                        turn: turn.number,
                        call,
                    });
                }
                self.run_calls(&turn, planned, &rules, &ctx).await?
            }
            Err(loop_detected) => loop_detected,
        };
        self.take_answers(result)
    }

    /// Runs the planned calls within the wall clock and the stop signal.
    async fn run_calls(
        &self,
        turn: &Turn<'_>,
        planned: Planned<'_>,
        rules: &Rules<'_>,
        ctx: &CallContext,
    ) -> Result<TurnResult, Stop> {
        let work = run_calls(turn, planned, rules, &self.deps.toolbox, ctx);
        Ok(tokio::select! {
            biased;
            _ = self.deps.cancel.cancelled() => {
                return Err(call_failed(CallError::Interrupted, self.spec, &self.deps.endpoint));
            }
            _ = tokio::time::sleep_until(self.deadline) => {
                return Err(Stop::failed(
                    StopReason::MaxWallSecs,
                    format!("the task's wall clock (max_wall_secs = {}) ran out during tool calls", self.spec.max_wall.as_secs()),
                ));
            }
            r = work => r,
        })
    }

    /// The answers of a turn into the records and the conversation.
    fn take_answers(&mut self, result: TurnResult) -> Result<(), Stop> {
        match result {
            TurnResult::Answered(answers) => {
                self.record_answers(&answers);
                self.answers.results(&answers, self.spec);
                if let Some(fault) = answers.iter().find_map(|a| a.setup_fault.clone()) {
                    return Err(Stop::setup_fault(fault));
                }
                for a in answers {
                    let origin = ToolOrigin {
                        call_id: a.call_id.clone(),
                        call: harness_tools::describe_call(&a.name, &a.arguments),
                    };
                    self.conv
                        .push_tool(Message::tool(a.call_id, a.text), origin);
                }
                if self.spec.prompt_aids.result_note {
                    self.conv.push(Message::user(crate::aids::RESULT_NOTE));
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
                .saturating_add(u32::from(a.over_limit));
            self.quotable.push(&a.undefanged);
            self.emit(&TaskEvent::ToolAnswered(a));
        }
    }
}
