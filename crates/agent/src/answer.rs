//! A reply without tool calls, judged: the final answer, or — when it is empty,
//! cut at `max_tokens`, claims a call that never ran, comes before the rest
//! of a paged result was read, is no answer yet (it stops at a colon, says
//! it will call a tool, repeats the task), or does not match the output
//! schema — asked for once more, with a note that says what was wrong, or
//! the failure that ends the task (docs/tasks.md, "The loop").
//! [`AnswerState::judge`] only decides; the loop reports the [`AskAgain`] and
//! appends its messages.

use serde_json::Value;

use crate::calls::Answer;
use crate::events::TaskEvent;
use crate::outcome::{FinalAnswer, Stop, StopReason};
use crate::spec::TaskSpec;
use harness_base::schema::OutputSchema;
use harness_tools::Tool;
use harness_tools::text::{defang, without_control_strings};
use harness_wire::chat::{Message, Tweaks};
use harness_wire::reply::repeated_block;
use harness_wire::reply::{Reply, replayed_assistant};

/// How much of an answer cut at `max_tokens` is sent back when it is asked
/// for again (docs/tasks.md, "The loop": cut-off output).
const CUT_ANSWER_REPLAYED_CHARS: usize = 1000;

/// The note after an empty reply. Measured on a 1.5B instruction-tuned
/// model that ended its turn at once after a tool result: asked again with
/// the same messages it did the same; with this note it went on.
pub(crate) const EMPTY_NOTE: &str = "Your reply was empty. Go on with the task: call the next tool you need, or give your final answer.";

/// Words that, beside an offered tool's name, make an answer a claim to
/// have used it (or a plan to, which no call followed).
const CLAIM_WORDS: &[&str] = &[
    "call", "calls", "called", "calling", "use", "used", "using", "invoke", "invoked", "ran",
    "run", "executed", "fetched", "returned",
];

/// Words that make a sentence no claim ("I did not need webfetch").
const NEGATIONS: &[&str] = &["not", "no", "never", "without", "cannot"];

/// Words that make a sentence naming a tool a plan ("I will use webfetch").
/// Not "next", "can" or "need": "I used webfetch to fetch the next page"
/// and "I ran webfetch and can confirm" are answers.
const INTENT_WORDS: &[&str] = &["will", "i'll", "let", "let's", "going", "shall", "should"];

/// How an answer that only says what the model will do next begins.
const PLAN_OPENINGS: &[&str] = &[
    "i need to ",
    "i will ",
    "i'll ",
    "let me ",
    "i am going to ",
    "i'm going to ",
    "i should ",
    "next, i ",
    "now i ",
];

/// The fewest words of a sentence of the task that, said again in an
/// answer, make the answer a repeat of the task (a URL's pieces are no
/// sentence).
const REPEATED_TASK_WORDS: usize = 7;

/// What the answer checks remember across a task's turns: each way of
/// asking again is used once.
#[derive(Debug, Default)]
pub(crate) struct AnswerState {
    /// An empty reply was already asked again.
    asked_again: bool,
    /// An answer that claimed a call was already asked again.
    asked_claimed: bool,
    /// An answer that was no answer yet was already asked again.
    asked_unfinished: bool,
    /// An answer given before a paged result was read on was already
    /// asked again.
    asked_read_on: bool,
    /// The call that reads on from the last tool turn's paged result, when
    /// one went on.
    unread: Option<Unread>,
    /// A cut answer was already asked for again, shorter.
    asked_shorter: bool,
    /// The output schema as `response_format`, once an answer was asked for
    /// again under it: every later request carries it, and offers no tools.
    repair: Option<Value>,
}

/// What a reply without calls comes to, short of a failure.
#[derive(Debug)]
pub(crate) enum Verdict {
    Final(FinalAnswer),
    AskAgain(AskAgain),
}

/// The request once more: why (what the loop reports), the messages
/// appended first, and how the request changes.
#[derive(Debug)]
pub(crate) struct AskAgain {
    pub why: Why,
    pub messages: Vec<Message>,
    pub tweaks: Tweaks,
}

/// Why an answer is asked for again.
#[derive(Debug)]
pub(crate) enum Why {
    /// No answer and no call (or nothing but chat-template debris).
    Empty { thinking_off: bool },
    /// The answer names an offered tool as used, and no tool has run.
    Claimed { tool: String, note: String },
    /// The answer is no answer yet: what is wrong with it, and the note.
    Unfinished { what: &'static str, note: String },
    /// The answer was cut at `max_tokens`.
    Cut,
    /// The answer does not match the output schema.
    OffSchema { errors: Vec<String> },
}

impl AskAgain {
    /// The event the loop reports before it asks.
    pub(crate) fn event(&self) -> TaskEvent<'_> {
        match &self.why {
            Why::Empty { thinking_off } => TaskEvent::AskedAgain {
                thinking_off: *thinking_off,
                note: EMPTY_NOTE,
            },
            Why::Claimed { tool, note } => TaskEvent::CallClaimed { tool, note },
            Why::Unfinished { what, note } => TaskEvent::AnswerUnfinished { what, note },
            Why::Cut => TaskEvent::AnswerCut,
            Why::OffSchema { errors } => TaskEvent::AnswerRejected { errors },
        }
    }
}

/// A paged result a tool turn left with text unread: the call that reads
/// the next page, and how much is left.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unread {
    tool: String,
    /// The call's own arguments with the next page's `offset`.
    arguments: serde_json::Map<String, Value>,
    chars: usize,
}

impl AnswerState {
    /// A tool turn's results: the last paged one of a tool that only
    /// reads, when its text goes on, is what an answer right after them
    /// has not read ([`Unread`]).
    pub(crate) fn results(&mut self, answers: &[Answer], spec: &TaskSpec) {
        // The turn's last result only: an earlier page of the turn was
        // followed by another result, which the answer comes after.
        self.unread = answers.last().and_then(|a| {
            let read_on = a.read_on?;
            let tool = Tool::find(&spec.tools, &a.name).filter(|t| !t.is_write())?;
            let mut arguments: serde_json::Map<String, Value> =
                serde_json::from_str(&a.arguments).ok()?;
            arguments.insert("offset".into(), read_on.offset.into());
            Some(Unread {
                tool: tool.name().to_string(),
                arguments,
                chars: read_on.unread,
            })
        });
    }

    /// The `response_format` every request carries from now on, if any.
    pub(crate) fn response_format(&self) -> Option<&Value> {
        self.repair.as_ref()
    }

    /// A reply without calls, `turns` into the task, after `calls` tool
    /// calls: the final answer, or — when it is empty, or nothing but
    /// chat-template debris (docs/tasks.md, "The loop") — the request once
    /// more with a note saying so (without thinking if thinking used up
    /// `max_tokens`), and `empty_response` the second time. An answer that
    /// says it used an offered tool when no call has run is asked for once
    /// more, with a note; the second answer stands. So is one that is no
    /// answer yet ([`unfinished`]), once a task. A reply cut while it
    /// repeated one block over and over ends the task as `repetition`.
    pub(crate) fn judge(
        &mut self,
        mut reply: Reply,
        spec: &TaskSpec,
        turns: u32,
        calls: u32,
    ) -> Result<Verdict, Stop> {
        let empty = without_control_strings(&reply.content).trim().is_empty();
        if reply.cut_off {
            let text = if empty {
                reply.thinking.as_deref().unwrap_or_default()
            } else {
                &reply.content
            };
            if let Some(block) = repeated_block(text) {
                return Err(looped(&block, spec.sampling.max_tokens));
            }
        }
        // What the model wrote goes on to the records and stdout: no
        // control string in it stays whole.
        reply.content = defang(&reply.content).into_owned();
        if !empty && reply.cut_off {
            return self.ask_shorter(reply, spec, turns);
        }
        if !empty
            && calls == 0
            && spec.output_schema.is_none()
            && !self.asked_claimed
            && turns < spec.max_turns
            && let Some(tool) = claimed_tool(&reply.content, spec)
        {
            self.asked_claimed = true;
            return Ok(Verdict::AskAgain(claimed(tool, reply, spec)));
        }
        // Only right after a paged result that goes on, once a task, and
        // with a turn left for the next page and an answer after it.
        if !empty
            && spec.output_schema.is_none()
            && !self.asked_read_on
            && turns.saturating_add(1) < spec.max_turns
            && let Some(unread) = &self.unread
        {
            self.asked_read_on = true;
            return Ok(Verdict::AskAgain(ask_to_read_on(unread)));
        }
        // Only where a tool ran, and with a turn left for a call and an
        // answer after it.
        if !empty
            && calls > 0
            && spec.output_schema.is_none()
            && !self.asked_unfinished
            && turns.saturating_add(1) < spec.max_turns
            && let Some(what) = unfinished(&reply.content, spec)
        {
            self.asked_unfinished = true;
            return Ok(Verdict::AskAgain(ask_to_finish(what)));
        }
        if !empty {
            return match &spec.output_schema {
                Some(schema) => self.check_answer(schema, reply, spec, turns),
                None => Ok(Verdict::Final(FinalAnswer {
                    answer: reply.content,
                    result: None,
                })),
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
        Ok(Verdict::AskAgain(AskAgain {
            why: Why::Empty { thinking_off },
            messages: vec![Message::user(EMPTY_NOTE)],
            tweaks: Tweaks {
                seed: Some(u64::from(fastrand::u32(..))),
                thinking_off,
            },
        }))
    }

    /// An answer cut at `max_tokens` is no answer (docs/tasks.md, "The loop"):
    /// it is asked for once more — complete, shorter, thinking off — and a
    /// second cut (or no turn left to ask in) ends the task as
    /// `answer_truncated`.
    fn ask_shorter(&mut self, reply: Reply, spec: &TaskSpec, turns: u32) -> Result<Verdict, Stop> {
        let max_tokens = spec.sampling.max_tokens;
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
        if turns >= spec.max_turns {
            return Err(truncated(" and no turn is left to ask again"));
        }
        self.asked_shorter = true;
        // Only its start goes back: a whole cut answer is max_tokens long,
        // and sent again it could crowd the window the retry needs.
        let mut cut = replayed_assistant(&reply, spec.replay_thinking);
        cut.content = harness_base::text::clip(&cut.content, CUT_ANSWER_REPLAYED_CHARS);
        // Under an output schema this is also the one repair: the schema
        // goes as a grammar, so the JSON can close within max_tokens.
        if let Some(schema) = &spec.output_schema {
            self.repair = Some(schema.response_format());
        }
        Ok(Verdict::AskAgain(AskAgain {
            why: Why::Cut,
            messages: vec![
                cut,
                Message::user(
                    "Your answer was cut off at the output length limit. Give your complete final answer again, shorter.",
                ),
            ],
            tweaks: Tweaks {
                seed: None,
                thinking_off: true,
            },
        }))
    }

    /// A final answer under an output schema: it stands when it matches; the
    /// first time it does not, the model is asked once more with the errors
    /// quoted, the schema as `response_format` and thinking off; the second
    /// time, the task ends as `invalid_answer`.
    fn check_answer(
        &mut self,
        schema: &OutputSchema,
        reply: Reply,
        spec: &TaskSpec,
        turns: u32,
    ) -> Result<Verdict, Stop> {
        let errors = match schema.check(&reply.content) {
            Ok(value) => {
                return Ok(Verdict::Final(FinalAnswer {
                    answer: reply.content,
                    result: Some(value),
                }));
            }
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
        if self.repair.is_some() {
            return Err(invalid(
                ", even when asked again with the schema as a grammar",
            ));
        }
        if turns >= spec.max_turns {
            return Err(invalid(" and no turn is left to ask again"));
        }
        self.repair = Some(schema.response_format());
        let messages = vec![
            replayed_assistant(&reply, spec.replay_thinking),
            Message::user(format!(
                "Your answer does not match the required JSON Schema:\n- {}\nReply with only the corrected JSON value.",
                errors.join("\n- ")
            )),
        ];
        // Measured on llama-server: with thinking on, the grammar leaves the
        // thought unconstrained and it can use up max_tokens before any JSON.
        Ok(Verdict::AskAgain(AskAgain {
            why: Why::OffSchema { errors },
            messages,
            tweaks: Tweaks {
                seed: None,
                thinking_off: true,
            },
        }))
    }
}

/// The first offered tool that a sentence of the answer names together
/// with a word of use ([`CLAIM_WORDS`]) and no negation, all as whole
/// words, ASCII case aside (an MCP tool also by its server's name).
fn claimed_tool<'s>(answer: &str, spec: &'s TaskSpec) -> Option<&'s str> {
    named_tool(answer, spec, false)
}

/// The first offered tool a sentence of `answer` names with a word of use
/// and no negation — and, when `planned`, a word of intent ([`INTENT_WORDS`]).
fn named_tool<'s>(answer: &str, spec: &'s TaskSpec, planned: bool) -> Option<&'s str> {
    let lower = answer.to_ascii_lowercase();
    lower
        .split(['.', '!', '?', '\n', ';'])
        .find_map(|sentence| {
            let words: Vec<&str> = sentence
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '\''))
                .filter(|w| !w.is_empty())
                .collect();
            let has = |set: &[&str]| words.iter().any(|w| set.contains(w));
            if negated(&words) || !has(CLAIM_WORDS) || (planned && !has(INTENT_WORDS)) {
                return None;
            }
            spec.tools.iter().find_map(|t| {
                let said = |name: &str| words.iter().any(|w| w.eq_ignore_ascii_case(name));
                // An MCP tool is also named by its server ("the time tool
                // returned …" of `time__get_current_time`) or its own name.
                let named = match t {
                    Tool::Builtin(_) => said(t.name()),
                    Tool::Mcp(m) => said(&m.name) || said(&m.server) || said(&m.tool),
                };
                named.then(|| t.name())
            })
        })
}

/// What makes an answer (after a tool ran) no answer yet, if anything: it
/// stops at a colon, before what it announced ("Here is the call:"); it
/// says it will call an offered tool and calls none; it is one sentence
/// saying what it will do next ([`plans_a_step`]); or one of its
/// sentences is a sentence of the task of at least [`REPEATED_TASK_WORDS`]
/// words (a small model restating its task after a tool result). Measured
/// on a 1.5B instruction-tuned model, each of these ended tasks that a next
/// step would have finished. Linear: the task's sentences are a set.
fn unfinished(answer: &str, spec: &TaskSpec) -> Option<&'static str> {
    let trimmed = answer.trim_end_matches(|c: char| c.is_whitespace() || c == '`');
    if trimmed.ends_with(':') {
        return Some("it stopped at a colon, before what it announced");
    }
    if named_tool(answer, spec, true).is_some() {
        return Some("it said it would call a tool and made no call");
    }
    if plans_a_step(answer) {
        return Some("it said what it would do next and did not do it");
    }
    // A line break inside a paragraph is no sentence's end (task files
    // are wrapped); a blank line is.
    let sentences = |text: &str| -> Vec<String> {
        text.split("\n\n")
            .flat_map(|paragraph| paragraph.split(['.', '!', '?', ':']))
            .map(|s| s.split_whitespace().collect::<Vec<_>>())
            .filter(|words| words.len() >= REPEATED_TASK_WORDS)
            .map(|words| words.join(" ").to_lowercase())
            .collect()
    };
    let task: std::collections::HashSet<String> = sentences(&spec.body).into_iter().collect();
    sentences(answer)
        .iter()
        .any(|s| task.contains(s))
        .then_some("it repeated the task instead of doing it")
}

/// Whether `answer` is one sentence that only says what the model will do
/// next ("I need to attach a suggestion to the note."): it opens as a plan
/// does ([`PLAN_OPENINGS`]), holds no negation, and no answer follows a
/// colon or another sentence. A 1.5B model wrote this after a note was
/// read, where the attachment was its next call.
fn plans_a_step(answer: &str) -> bool {
    let text = answer.trim().trim_end_matches(['.', ':', '!']);
    // A typographic apostrophe is the plain one ("I’ll").
    let lower = text.to_ascii_lowercase().replace('\u{2019}', "'");
    let words: Vec<&str> = lower
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !(c.is_alphanumeric() || c == '\'')))
        .collect();
    PLAN_OPENINGS.iter().any(|o| lower.starts_with(o))
        && !text.contains(['.', '!', '?', ':', '\n'])
        && words.len() <= 40
        && !negated(&words)
}

/// Whether a sentence's words (lower case) hold a negation ([`NEGATIONS`],
/// or a word ending in "n't").
fn negated(words: &[&str]) -> bool {
    words
        .iter()
        .any(|w| NEGATIONS.contains(w) || w.ends_with("n't"))
}

/// The request once more with `note` appended (the answer not replayed),
/// sampled with a new seed: the same messages and seed gave the same
/// reply again.
fn noted(note: String, why: impl FnOnce(String) -> Why) -> AskAgain {
    AskAgain {
        messages: vec![Message::user(note.clone())],
        why: why(note),
        tweaks: Tweaks {
            seed: Some(u64::from(fastrand::u32(..))),
            thinking_off: false,
        },
    }
}

/// Asks again after an answer that is no answer yet: a note that says what
/// was wrong and what to do next. The answer is not replayed (as an empty
/// reply is not): shown its own restatement of the task, the stand-in wrote
/// it once more, 3 seeds of 3.
fn ask_to_finish(what: &'static str) -> AskAgain {
    let note = format!(
        "Your last reply was not a final answer: {what}. Do the next step now. If you need a tool, reply with only that call, as JSON: {{\"name\": \"...\", \"arguments\": {{...}}}}. If the tool results above answer the task, give your final answer from them."
    );
    noted(note, |note| Why::Unfinished { what, note })
}

/// Asks again after an answer given before a paged result was read to its
/// end: the note names the call that reads on, as JSON. Measured on a 1.5B
/// instruction-tuned model that answered from a note's first page: asked
/// with this note it wrote that call, 4 seeds of 4 (told only that the
/// result was cut, 0 of 4), and answered from the last page, 4 of 4. The
/// answer is not replayed.
fn ask_to_read_on(unread: &Unread) -> AskAgain {
    // The name first, as the model writes a call.
    let call = format!(
        "{{\"name\": {}, \"arguments\": {}}}",
        Value::from(unread.tool.as_str()),
        Value::Object(unread.arguments.clone())
    );
    // The arguments are the model's own (a URL it wrote): no control
    // string of them goes back whole.
    let note = defang(&format!(
        "Not yet: the result above was cut, {} more characters are not read. Reply with only the {} call, as JSON: {call}. Or, if what you read answers the task, give your final answer again.",
        unread.chars, unread.tool
    ))
    .into_owned();
    noted(note, |note| Why::Unfinished {
        what: "it answered before reading the rest of a cut result",
        note,
    })
}

/// Asks again after an answer that claims a call of `tool` no call made:
/// the answer replayed, then a note that says so and what to do.
fn claimed(tool: &str, reply: Reply, spec: &TaskSpec) -> AskAgain {
    // Measured on a 1.5B instruction-tuned model that described a webfetch
    // call it never made: asked "if you need it, call it now", it answered
    // that it had not called it (0 of 4 seeds); told that describing a
    // call makes none and shown the call's shape, it called (4 of 4).
    let note = format!(
        "That call never happened: no tool has run in this task, and describing a call does not make it. Reply with only the {tool} call, as JSON: {{\"name\": \"{tool}\", \"arguments\": {{...}}}}. Or, if no tool is needed, give your final answer."
    );
    AskAgain {
        messages: vec![
            replayed_assistant(&reply, spec.replay_thinking),
            Message::user(note.clone()),
        ],
        why: Why::Claimed {
            tool: tool.to_string(),
            note,
        },
        tweaks: Tweaks::default(),
    }
}

/// A reply cut at `max_tokens` while it repeated one block: no shorter
/// answer will come of asking again; the sampler is what stops a loop.
fn looped(block: &str, max_tokens: u32) -> Stop {
    let shown =
        harness_base::text::printable(&harness_base::text::clip(block.trim(), 60)).into_owned();
    Stop::failed(
        StopReason::Repetition,
        format!(
            "the reply was cut at max_tokens = {max_tokens} while it repeated one block over and over ({shown:?}); a model caught in a loop needs its sampler to stop it, not more tokens: set [model.extra] dry_multiplier = 0.8 (llama-server's DRY sampler) or repeat_penalty = 1.1"
        ),
    )
}
