//! Answering one turn's tool calls (docs/tasks.md, "The loop"): every call gets
//! exactly one tool result, in call order. Calls are first judged in order —
//! invalid, cut off, repeated — and the ones worth running then run
//! concurrently.
//!
//! The repeat guard: the same call (name + identical arguments) asked for a
//! third or fourth time is answered without running; the fifth stops the
//! task as `loop_detected`, and every call of that turn is recorded as not run.
//!
//! The call limits (docs/untrusted-input.md): calls of one reply past `max_calls_per_turn`,
//! and write calls past the task's `max_writes`, are answered "not run", so
//! one injected page cannot make a reply spam every note.
//!
//! Every result is redacted, cut, and defanged (control-token strings broken)
//! before the model sees it; `tools.jsonl` records it as the model got it.

use std::collections::HashMap;
use std::time::Instant;

use serde_json::Value;

use harness_base::text::chars;
use harness_config::Redactor;
use harness_tools::text::{cut, defang};
use harness_tools::{self as tools, CallContext, ReadOn, Tool, ToolOutput, Toolbox};
use harness_wire::chat::ToolCall;

/// The call count at which a repeated call is answered without running.
pub(crate) const REPEAT_REFUSE_AT: u32 = 3;
/// The call count at which a repeated call stops the task.
pub(crate) const REPEAT_STOP_AT: u32 = 5;

/// What a task's calls have used so far: identical calls whose results are
/// still in the context, and writes run.
#[derive(Debug, Default)]
pub(crate) struct Repeats {
    /// Each call (name + canonical arguments): the ids asked for it, oldest first.
    seen: HashMap<String, Vec<String>>,
    /// Each call id's key in `seen`.
    keys: HashMap<String, String>,
    writes: u32,
}

impl Repeats {
    /// Counts one more ask for this call; returns the count and the first
    /// call's id. Arguments are compared in their canonical form (key order
    /// and spacing aside); ones too long to be run are compared as written.
    fn bump(&mut self, call: &ToolCall) -> (u32, String) {
        let args = harness_wire::chat::canonical_arguments(&call.function.arguments);
        let key = format!("{}\u{0}{args}", call.function.name);
        self.keys.insert(call.id.clone(), key.clone());
        let ids = self.seen.entry(key).or_default();
        ids.push(call.id.clone());
        (u32::try_from(ids.len()).unwrap_or(u32::MAX), ids[0].clone())
    }

    /// The results of these calls left the context: asking for them again
    /// is not a repeat (docs/tasks.md, "The loop": repeats).
    pub(crate) fn forget(&mut self, call_ids: &[String]) {
        for id in call_ids {
            if let Some(key) = self.keys.remove(id)
                && let Some(ids) = self.seen.get_mut(&key)
            {
                ids.retain(|i| i != id);
            }
        }
    }
}

/// One answered call: what the model asked, what it got back, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub turn: u32,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    /// The result as the model gets it: redacted, cut, defanged.
    pub text: String,
    /// The text before control strings were broken: what the model may
    /// quote back, checked when it writes a call as text.
    pub undefanged: String,
    pub is_error: bool,
    pub duration_ms: u64,
    /// Characters of the tool's own result, before cutting.
    pub original_chars: usize,
    pub returned_chars: usize,
    /// False when the call was answered without running the tool (invalid,
    /// repeated, cut off, over a limit); dry-run writes count as run.
    pub executed: bool,
    /// The call was written as text and recovered.
    pub recovered: bool,
    /// How many times this exact call has been asked for in the task.
    pub repeat: u32,
    /// Extra facts (a dry-run intent, a duplicate skipped).
    pub detail: Option<Value>,
    /// Not run because a call limit was reached.
    pub over_limit: bool,
    /// The service refused the setup: the run stops (docs/operating.md, "Setup
    /// faults").
    pub setup_fault: Option<String>,
    /// Answered from a recording (a replay, or the records a task resumes
    /// from): the tool did not run now.
    pub recorded: bool,
    /// The result is one page of a longer text that goes on from here.
    pub read_on: Option<ReadOn>,
}

/// The turn's calls were answered, or a call repeated too often.
#[derive(Debug)]
pub(crate) enum TurnResult {
    Answered(Vec<Answer>),
    /// The named call reached `REPEAT_STOP_AT`; no call of the turn was run.
    /// `answers` records each of them as not run (the model never sees them).
    LoopDetected {
        call: String,
        answers: Vec<Answer>,
    },
}

enum Plan {
    Refuse(String),
    /// Not run: a call limit is reached.
    OverLimit(String),
    Run(tools::Call),
}

pub(crate) struct Turn<'a> {
    pub number: u32,
    pub calls: &'a [ToolCall],
    /// The reply hit `max_tokens`: its last call may be cut off.
    pub cut_off: bool,
    pub recovered: bool,
}

/// The tool results the model read lately, as they were before control
/// strings were broken: a text-form call found in one is a quote, not a
/// call (docs/untrusted-input.md). The newest [`Quotable::MAX_BYTES`] are kept, so the
/// check costs at most that much per recovered call.
#[derive(Debug, Default)]
pub(crate) struct Quotable {
    texts: std::collections::VecDeque<String>,
    bytes: usize,
}

impl Quotable {
    pub(crate) const MAX_BYTES: usize = 2 * 1024 * 1024;

    pub(crate) fn push(&mut self, text: &str) {
        self.bytes += text.len();
        self.texts.push_back(text.to_owned());
        while self.bytes > Self::MAX_BYTES {
            match self.texts.pop_front() {
                Some(old) => self.bytes -= old.len(),
                None => break,
            }
        }
    }

    /// Whether a kept result holds `text`.
    pub(crate) fn quotes(&self, text: &str) -> bool {
        self.texts.iter().any(|t| t.contains(text))
    }
}

/// The task's call limits and how results are shaped for the model.
pub(crate) struct Rules<'a> {
    pub allowed: &'a [Tool],
    pub max_calls_per_turn: u32,
    pub max_writes: u32,
    pub max_chars: usize,
    pub redactor: &'a Redactor,
}

/// The calls of a turn, each judged: run, refused, or over a limit.
pub(crate) struct Planned<'t> {
    plans: Vec<(&'t ToolCall, Plan, u32)>,
}

impl Planned<'_> {
    /// The write calls about to be sent: each is recorded as an intent
    /// first (docs/resume-replay-eval.md, "Resume"), so a crash between sending
    /// and recording is known. A dry run sends nothing, and a call answered
    /// from the records is not sent again.
    pub(crate) fn writes_to_send(
        &self,
        turn: u32,
        toolbox: &Toolbox,
        dry_run: bool,
    ) -> Vec<&ToolCall> {
        if dry_run {
            return Vec::new();
        }
        self.plans
            .iter()
            .filter(|(call, plan, _)| {
                matches!(plan, Plan::Run(c) if c.tool().is_write())
                    && !toolbox.answers_from_record(turn, &call.id)
            })
            .map(|(call, _, _)| *call)
            .collect()
    }
}

/// Judges every call of the turn; a call asked for too often stops the
/// task before any runs.
pub(crate) fn plan_calls<'t>(
    turn: &Turn<'t>,
    rules: &Rules<'_>,
    repeats: &mut Repeats,
) -> Result<Planned<'t>, TurnResult> {
    let mut plans = Vec::with_capacity(turn.calls.len());
    for (i, call) in turn.calls.iter().enumerate() {
        let (count, first_id) = repeats.bump(call);
        if count >= REPEAT_STOP_AT {
            return Err(loop_detected(turn, i, count, plans, repeats, rules));
        }
        let plan = judge(turn, i, count, &first_id, rules, repeats);
        plans.push((call, plan, count));
    }
    Ok(Planned { plans })
}

/// Runs the planned calls (concurrently) and shapes each result for the model.
pub(crate) async fn run_calls(
    turn: &Turn<'_>,
    planned: Planned<'_>,
    rules: &Rules<'_>,
    toolbox: &Toolbox,
    ctx: &CallContext,
) -> TurnResult {
    let plans = planned.plans;
    let runs = plans.iter().map(|(call, plan, _)| async move {
        let started = Instant::now();
        let recorded = toolbox.answers_from_record(ctx.turn, &call.id);
        let output = match plan {
            Plan::Run(c) => {
                let ctx = CallContext {
                    call_id: call.id.clone(),
                    ..ctx.clone()
                };
                toolbox.run(c, &ctx).await
            }
            Plan::Refuse(message) | Plan::OverLimit(message) => ToolOutput::error(message.clone()),
        };
        let ms = harness_base::time::millis(started.elapsed());
        (output, ms, recorded)
    });
    let outputs = futures::future::join_all(runs).await;

    let answers = plans
        .into_iter()
        .zip(outputs)
        .map(|((call, plan, count), (output, duration_ms, recorded))| {
            let executed = matches!(plan, Plan::Run(_));
            let mut a = answer(turn, call, count, executed, output, duration_ms, rules);
            a.over_limit = matches!(plan, Plan::OverLimit(_));
            a.recorded = recorded && executed;
            a
        })
        .collect();
    TurnResult::Answered(answers)
}

/// What to do with call `i` of the turn, asked for the `count`-th time.
fn judge(
    turn: &Turn<'_>,
    i: usize,
    count: u32,
    first_id: &str,
    rules: &Rules<'_>,
    repeats: &mut Repeats,
) -> Plan {
    let call = &turn.calls[i];
    if u32::try_from(i).map_or(true, |i| i >= rules.max_calls_per_turn) {
        return Plan::OverLimit(format!(
            "not run: at most {} tool calls per reply. Ask for it again in your next reply if you still need it.",
            rules.max_calls_per_turn
        ));
    }
    if turn.cut_off && i + 1 == turn.calls.len() {
        return Plan::Refuse(format!(
            "This call was cut off by the output token limit before its arguments were complete, so it was not run. \
             Call {} again with shorter arguments.",
            call.function.name
        ));
    }
    if count >= REPEAT_REFUSE_AT {
        return Plan::Refuse(format!(
            "You already made this exact call {} times (first as call {first_id}); its result is in that earlier tool message. \
             It was not run again. Use that result, try something different, or give your final answer.",
            count - 1
        ));
    }
    match tools::validate(&call.function.name, &call.function.arguments, rules.allowed) {
        Ok(c) if c.tool().is_write() && repeats.writes >= rules.max_writes => {
            Plan::OverLimit(format!(
                "not run: this task's write budget ({}) is spent. Do not call {} again; finish with what you have.",
                rules.max_writes,
                c.tool().name()
            ))
        }
        Ok(c) => {
            if c.tool().is_write() {
                repeats.writes += 1;
            }
            Plan::Run(c)
        }
        Err(message) => Plan::Refuse(message),
    }
}

/// Call `at` of the turn was asked for the `REPEAT_STOP_AT`-th time: the task
/// stops, and every call of the turn is recorded as not run.
fn loop_detected(
    turn: &Turn<'_>,
    at: usize,
    count: u32,
    judged: Vec<(&ToolCall, Plan, u32)>,
    repeats: &mut Repeats,
    rules: &Rules<'_>,
) -> TurnResult {
    let looping = &turn.calls[at];
    let mut counts: Vec<u32> = judged.into_iter().map(|(_, _, n)| n).collect();
    counts.push(count);
    counts.extend(turn.calls[at + 1..].iter().map(|c| repeats.bump(c).0));
    let answers = turn
        .calls
        .iter()
        .zip(counts)
        .enumerate()
        .map(|(i, (call, n))| {
            let why = if i == at {
                format!("Not run: this exact call was asked for the {n}th time; the task stops as loop_detected.")
            } else {
                "Not run: the task stopped as loop_detected on another call of this turn.".to_string()
            };
            answer(turn, call, n, false, ToolOutput::error(why), 0, rules)
        })
        .collect();
    TurnResult::LoopDetected {
        call: tools::describe_call(&looping.function.name, &looping.function.arguments),
        answers,
    }
}

/// The result text for the model and the `tools.jsonl` line of one call:
/// secrets redacted, cut to size, control strings broken.
fn answer(
    turn: &Turn<'_>,
    call: &ToolCall,
    repeat: u32,
    executed: bool,
    output: ToolOutput,
    duration_ms: u64,
    rules: &Rules<'_>,
) -> Answer {
    let undefanged = cut(&rules.redactor.redact_str(&output.text), rules.max_chars);
    let text = defang(&undefanged).into_owned();
    Answer {
        turn: turn.number,
        call_id: call.id.clone(),
        name: call.function.name.clone(),
        arguments: call.function.arguments.clone(),
        returned_chars: chars(&text),
        original_chars: chars(&output.text),
        text,
        undefanged,
        is_error: output.is_error,
        duration_ms,
        executed,
        recovered: turn.recovered,
        repeat,
        detail: output.detail,
        over_limit: false,
        setup_fault: output.setup_fault,
        recorded: false,
        read_on: output.read_on,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotable_keeps_the_newest_results_within_its_bytes() {
        let mut q = Quotable::default();
        q.push("call:webfetch{url:old}");
        let filler = "f".repeat(Quotable::MAX_BYTES / 2);
        q.push(&filler);
        assert!(q.quotes("call:webfetch{url:old}"));
        q.push(&filler);
        assert!(!q.quotes("call:webfetch{url:old}"), "the oldest went first");
        assert!(q.quotes("fff"));
        q.push(&"g".repeat(Quotable::MAX_BYTES + 1));
        assert!(!q.quotes("fff"));
        assert!(!q.quotes("g"), "one result past the cap is not kept either");
    }
}
