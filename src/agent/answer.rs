//! A reply without tool calls: the final answer, or — when it is empty, cut
//! at `max_tokens`, or does not match the output schema — asked for once
//! more, in the way that fixes it.

use super::TaskRun;
use crate::agent::events::TaskEvent;
use crate::agent::outcome::{Stop, StopReason};
use crate::base::schema::OutputSchema;
use crate::tools::text::{defang, without_control_strings};
use crate::wire::chat::{Message, Tweaks};
use crate::wire::reply::repeated_block;
use crate::wire::reply::{Reply, replayed_assistant};

/// How much of an answer cut at `max_tokens` is sent back when it is asked
/// for again (SPEC §16).
const CUT_ANSWER_REPLAYED_CHARS: usize = 1000;

impl TaskRun<'_, '_> {
    /// A reply without calls: the final answer, or — when it is empty, or
    /// nothing but chat-template debris (SPEC §22) — the request once more
    /// (without thinking if thinking used up `max_tokens`), and
    /// `empty_response` the second time. A reply cut while it repeated one
    /// block over and over ends the task as `repetition`.
    pub(super) fn answer_or_ask_again(&mut self, mut reply: Reply) -> Result<Tweaks, Stop> {
        let empty = without_control_strings(&reply.content).trim().is_empty();
        if reply.cut_off {
            let text = if empty {
                reply.thinking.as_deref().unwrap_or_default()
            } else {
                &reply.content
            };
            if let Some(block) = repeated_block(text) {
                return Err(self.looped(&block));
            }
        }
        // What the model wrote goes on to the records and stdout: no
        // control string in it stays whole.
        reply.content = defang(&reply.content).into_owned();
        if !empty && reply.cut_off {
            return self.ask_shorter(reply);
        }
        if !empty {
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

    /// A reply cut at `max_tokens` while it repeated one block: no shorter
    /// answer will come of asking again; the sampler is what stops a loop.
    fn looped(&self, block: &str) -> Stop {
        let shown =
            crate::base::text::printable(&crate::base::text::clip(block.trim(), 60)).into_owned();
        Stop::failed(
            StopReason::Repetition,
            format!(
                "the reply was cut at max_tokens = {} while it repeated one block over and over ({shown:?}); a model caught in a loop needs its sampler to stop it, not more tokens: set [model.extra] dry_multiplier = 0.8 (llama-server's DRY sampler) or repeat_penalty = 1.1",
                self.spec.sampling.max_tokens
            ),
        )
    }

    /// An answer cut at `max_tokens` is no answer (SPEC §16): it is asked
    /// for once more — complete, shorter, thinking off — and a second cut
    /// (or no turn left to ask in) ends the task as `answer_truncated`.
    pub(super) fn ask_shorter(&mut self, reply: Reply) -> Result<Tweaks, Stop> {
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
    pub(super) fn check_answer(
        &mut self,
        schema: &OutputSchema,
        reply: Reply,
    ) -> Result<Tweaks, Stop> {
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
}
