//! The conversation and its token window (docs/tasks.md, "The loop").
//!
//! The prompt size is estimated from the server's own count when there is
//! one — `usage.prompt_tokens` of the previous request plus that reply's
//! completion — and a conservative character estimate for what was added
//! since. When a request would not fit `context_tokens − max_tokens`, the
//! bodies of the oldest tool results are replaced by a placeholder saying
//! what was removed and how to get it back.

use harness_base::text::chars;
use harness_wire::chat::Message;

/// Tokens per message for role markers and template overhead.
const MESSAGE_OVERHEAD: u64 = 8;

/// A deliberately pessimistic estimate: about 3 characters a token (English
/// prose runs nearer 4; JSON and code nearer 3).
pub(crate) fn estimate_tokens(text: &str) -> u64 {
    (chars(text) as u64).div_ceil(3)
}

/// The most bytes one token covers, as far as any server's count is
/// believed (the longest piece of Gemma's vocabulary is 48 bytes; measured
/// on llama-server, runs of spaces take 31 bytes a token).
const MAX_BYTES_PER_TOKEN: u64 = 64;

/// The bytes of `m` a chat template always renders: replayed thinking is
/// not among them (Gemma 4's template drops it before the last user turn).
fn message_bytes(m: &Message) -> u64 {
    let calls: usize = m
        .tool_calls
        .iter()
        .map(|c| c.function.name.len() + c.function.arguments.len())
        .sum();
    (m.content.len() + calls) as u64
}

fn message_tokens(m: &Message) -> u64 {
    let calls: u64 = m
        .tool_calls
        .iter()
        .map(|c| estimate_tokens(&c.function.name) + estimate_tokens(&c.function.arguments) + 6)
        .sum();
    MESSAGE_OVERHEAD
        + estimate_tokens(&m.content)
        + m.reasoning_content.as_deref().map_or(0, estimate_tokens)
        + calls
}

/// How a prompt's size was known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Counted {
    /// By the server's own template and tokenizer.
    Exact,
    /// From the server's last count and ~3 characters a token since.
    #[default]
    Estimated,
}

/// What the context manager did before a request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContextNote {
    /// The context window managed, when it is.
    pub window: Option<u32>,
    /// Prompt tokens of the request as sent: counted or estimated.
    pub prompt_tokens: u64,
    pub counted: Counted,
    /// The estimate before any count.
    pub estimated_prompt_tokens: u64,
    /// Every exact count made before this request, in order (a replay
    /// answers its counts from these).
    pub counts: Vec<u64>,
    /// `context_tokens − max_tokens`, when the context is managed.
    pub room: Option<u64>,
    /// What was removed to fit before this request.
    pub elided: Elided,
}

/// What one fit removed: replayed thinking (turns), then tool results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Elided {
    /// Assistant turns whose replayed `reasoning_content` was dropped.
    pub reasoning: u32,
    /// Tool results whose bodies were replaced by a placeholder.
    pub call_ids: Vec<String>,
}

impl Elided {
    pub fn is_empty(&self) -> bool {
        self.reasoning == 0 && self.call_ids.is_empty()
    }

    pub fn extend(&mut self, more: Elided) {
        self.reasoning += more.reasoning;
        self.call_ids.extend(more.call_ids);
    }
}

/// What a tool message answered, for its placeholder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolOrigin {
    pub call_id: String,
    pub call: String,
}

#[derive(Debug, Clone)]
pub(crate) struct Conversation {
    messages: Vec<Message>,
    /// For each message: where a tool result came from, and whether it was elided.
    origins: Vec<Option<(ToolOrigin, bool)>>,
    /// Tokens of the tool definitions sent with every request.
    tools_tokens: u64,
    /// The server's count for `messages[..n]`, when known.
    anchor: Option<(usize, u64)>,
    /// Multiplies estimates after the server said our estimate was low.
    correction: f64,
}

impl Conversation {
    pub(crate) fn new(system: &str, user: &str, tools_json: &str) -> Self {
        Conversation {
            messages: vec![Message::system(system), Message::user(user)],
            origins: vec![None, None],
            tools_tokens: estimate_tokens(tools_json),
            anchor: None,
            correction: 1.0,
        }
    }

    pub(crate) fn messages(&self) -> &[Message] {
        &self.messages
    }

    pub(crate) fn push(&mut self, m: Message) {
        self.messages.push(m);
        self.origins.push(None);
    }

    pub(crate) fn push_tool(&mut self, m: Message, origin: ToolOrigin) {
        self.messages.push(m);
        self.origins.push(Some((origin, false)));
    }

    /// The fewest tokens the messages can take: a server's count below it
    /// is not believed.
    pub(crate) fn min_tokens(&self) -> u64 {
        self.messages.iter().map(message_bytes).sum::<u64>() / MAX_BYTES_PER_TOKEN
    }

    /// Records the server's prompt count for the request just answered
    /// (which held every message so far) and the reply's length. A count
    /// under [`Self::min_tokens`] is ignored.
    pub(crate) fn anchor(&mut self, prompt_tokens: u64, completion_tokens: u64) {
        if prompt_tokens > 0 && prompt_tokens >= self.min_tokens() {
            self.anchor = Some((
                self.messages.len(),
                prompt_tokens.saturating_add(completion_tokens),
            ));
        }
    }

    /// The server's exact count of the whole conversation as it is now:
    /// later estimates start from it, unscaled.
    pub(crate) fn set_exact(&mut self, prompt_tokens: u64) {
        self.anchor = Some((self.messages.len(), prompt_tokens));
        self.correction = 1.0;
    }

    /// The estimated prompt size of the next request.
    pub(crate) fn estimate(&self) -> u64 {
        self.scaled(self.raw_estimate())
    }

    fn raw_estimate(&self) -> u64 {
        match self.anchor {
            Some((n, tokens)) if n <= self.messages.len() => self.messages[n..]
                .iter()
                .map(message_tokens)
                .fold(tokens, u64::saturating_add),
            _ => self
                .messages
                .iter()
                .map(message_tokens)
                .fold(self.tools_tokens, u64::saturating_add),
        }
    }

    fn scaled(&self, raw: u64) -> u64 {
        (raw as f64 * self.correction).ceil() as u64
    }

    /// After the server reported `actual` tokens for a prompt we estimated
    /// lower, scales every later estimate up to match (with a margin).
    pub(crate) fn calibrate(&mut self, actual: u64) {
        let estimated = self.estimate().max(1);
        if actual > estimated {
            // A server may claim any count: the factor stays finite.
            self.correction =
                (self.correction * actual as f64 / estimated as f64 * 1.05).min(100.0);
        }
    }

    /// Elides until the estimate fits `room`: replayed thinking first,
    /// then tool results, oldest first. `Err` says what was removed when
    /// even removing all of it does not make it fit. One pass over the
    /// messages, however many are elided.
    pub(crate) fn fit(&mut self, room: u64) -> Result<Elided, Elided> {
        let mut elided = Elided::default();
        let mut raw = self.raw_estimate();
        let thinking = (0..self.messages.len()).filter(|&i| {
            self.messages[i]
                .reasoning_content
                .as_deref()
                .is_some_and(|r| !r.is_empty())
        });
        let results =
            (0..self.origins.len()).filter(|&i| matches!(self.origins[i], Some((_, false))));
        let order: Vec<(usize, bool)> = thinking
            .map(|i| (i, true))
            .chain(results.map(|i| (i, false)))
            .collect();
        let mut order = order.into_iter();
        while self.scaled(raw) > room {
            let Some((i, is_thinking)) = order.next() else {
                return Err(elided);
            };
            let (removed, added) = if is_thinking {
                elided.reasoning += 1;
                self.elide_thinking(i)
            } else {
                let (call_id, removed, added) = self.elide(i);
                elided.call_ids.push(call_id);
                (removed, added)
            };
            raw = raw.saturating_sub(removed).saturating_add(added);
        }
        Ok(elided)
    }

    /// Drops the replayed thinking of message `i`; returns the tokens this
    /// takes from the raw estimate.
    fn elide_thinking(&mut self, i: usize) -> (u64, u64) {
        let old = self.messages[i]
            .reasoning_content
            .take()
            .map_or(0, |r| estimate_tokens(&r));
        (self.shrink_anchor(i, old), 0)
    }

    /// `tokens` fewer in message `i`: the server's count shrinks when `i`
    /// is inside it; returns how much the raw estimate drops.
    fn shrink_anchor(&mut self, i: usize, tokens: u64) -> u64 {
        match &mut self.anchor {
            Some((n, count)) if i < *n => {
                let before = *count;
                *count = count.saturating_sub(tokens);
                before - *count
            }
            _ => tokens,
        }
    }

    /// Replaces tool result `i` by a placeholder; returns its call id and
    /// the tokens this takes from and adds to the raw estimate.
    fn elide(&mut self, i: usize) -> (String, u64, u64) {
        let Some((origin, done)) = self.origins[i].as_mut() else {
            return (String::new(), 0, 0);
        };
        *done = true;
        let old = std::mem::take(&mut self.messages[i].content);
        let placeholder = format!(
            "[Removed to fit the context window: the result of {} ({} characters). Call the tool again if you still need it.]",
            origin.call,
            chars(&old)
        );
        let (old, new) = (estimate_tokens(&old), estimate_tokens(&placeholder));
        self.messages[i].content = placeholder;
        let call_id = origin.call_id.clone();
        let anchored = self.anchor.is_some_and(|(n, _)| i < n);
        if anchored {
            (call_id, self.shrink_anchor(i, old.saturating_sub(new)), 0)
        } else {
            (call_id, old, new)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool_result(conv: &mut Conversation, id: &str, len: usize) {
        conv.push_tool(
            Message::tool(id, "x".repeat(len)),
            ToolOrigin {
                call_id: id.into(),
                call: format!("noteworx_read_note {{\"slug\":\"{id}\"}}"),
            },
        );
    }

    #[test]
    fn oldest_tool_results_are_elided_first_until_it_fits() {
        let mut c = Conversation::new("sys", "task", "");
        for id in ["a", "b", "c"] {
            tool_result(&mut c, id, 3000);
        }
        assert!(c.estimate() > 2000);
        let elided = c.fit(1500).unwrap();
        assert_eq!(elided.call_ids, ["a", "b"]);
        assert_eq!(elided.reasoning, 0);
        assert!(c.estimate() <= 1500);
        assert!(c.messages()[2].content.starts_with("[Removed to fit the context window: the result of noteworx_read_note {\"slug\":\"a\"} (3000 characters)."));
        assert_eq!(c.messages()[4].content.len(), 3000);
    }

    #[test]
    fn it_fails_when_nothing_is_left_to_elide() {
        let mut c = Conversation::new("sys", &"y".repeat(9000), "");
        tool_result(&mut c, "a", 300);
        assert_eq!(
            c.fit(1000),
            Err(Elided {
                reasoning: 0,
                call_ids: vec!["a".to_string()]
            })
        );
    }

    #[test]
    fn the_servers_count_anchors_the_estimate_and_elision_lowers_it() {
        let mut c = Conversation::new("sys", "task", "");
        tool_result(&mut c, "a", 3000);
        c.anchor(1500, 20);
        assert_eq!(c.estimate(), 1520);
        c.push(Message::user("more"));
        assert_eq!(c.estimate(), 1520 + 8 + 2);
        c.fit(600).unwrap();
        assert!(c.estimate() < 600, "{}", c.estimate());
    }

    #[test]
    fn a_server_count_below_what_the_text_can_tokenize_to_is_ignored() {
        let mut c = Conversation::new("system", "user", "[]");
        tool_result(&mut c, "a", 64_000);
        let estimate = c.estimate();
        assert_eq!(c.min_tokens(), (6 + 4 + 64_000) / 64);
        c.anchor(3, 1);
        assert_eq!(
            c.estimate(),
            estimate,
            "3 tokens for 64,000 bytes: not believed"
        );
        // Replayed thinking may not be rendered at all: it sets no floor.
        c.push(Message {
            reasoning_content: Some("t".repeat(64_000)),
            ..Message::system("")
        });
        assert_eq!(c.min_tokens(), (6 + 4 + 64_000) / 64);
        c.anchor(c.min_tokens(), 0);
        assert_eq!(
            c.estimate(),
            c.min_tokens(),
            "the floor itself is believable"
        );
    }

    #[test]
    fn replayed_thinking_goes_before_any_tool_result_oldest_first() {
        let mut c = Conversation::new("sys", "task", "");
        let thinking_turn = |c: &mut Conversation, thought: &str| {
            c.push(Message {
                reasoning_content: Some(thought.repeat(1500)),
                ..Message::system("")
            });
        };
        thinking_turn(&mut c, "a");
        tool_result(&mut c, "r1", 1500);
        thinking_turn(&mut c, "b");
        tool_result(&mut c, "r2", 1500);
        // Four blocks of ~500 tokens: removing one thinking block fits 1700.
        let e = c.fit(1700).unwrap();
        assert_eq!((e.reasoning, e.call_ids.len()), (1, 0));
        assert_eq!(c.messages()[2].reasoning_content, None, "the oldest first");
        assert!(c.messages()[4].reasoning_content.is_some());
        let e = c.fit(700).unwrap();
        assert_eq!((e.reasoning, e.call_ids), (1, vec!["r1".to_string()]));
        assert!(c.messages()[3].content.starts_with("[Removed"));
        assert_eq!(c.messages()[5].content.len(), 1500);
    }

    #[test]
    fn an_exact_count_replaces_the_estimate_and_later_text_is_estimated_on_top() {
        let mut c = Conversation::new("sys", &"z".repeat(3000), "");
        c.calibrate(c.estimate() * 3);
        c.set_exact(700);
        assert_eq!(c.estimate(), 700, "no correction on an exact count");
        c.push(Message::user("x".repeat(300)));
        assert_eq!(c.estimate(), 700 + 8 + 100);
        tool_result(&mut c, "a", 3000);
        c.set_exact(1500);
        // The result is inside the exact count: eliding it lowers that count.
        let e = c.fit(1000).unwrap();
        assert_eq!(e.call_ids, ["a"]);
        assert!(c.estimate() <= 1000, "{}", c.estimate());
        assert!(c.estimate() > 1500 - 1000, "{}", c.estimate());
    }

    #[test]
    fn calibration_scales_later_estimates_up() {
        let mut c = Conversation::new("sys", &"z".repeat(3000), "");
        let before = c.estimate();
        c.calibrate(before * 2);
        assert!(
            c.estimate() >= before * 2,
            "{} < {}",
            c.estimate(),
            before * 2
        );
    }

    proptest::proptest! {
        /// Whatever the results, anchor and correction: `fit` stops as soon
        /// as a fresh estimate fits, eliding the oldest results in order.
        #[test]
        fn fit_elides_the_oldest_and_its_running_count_matches_a_fresh_one(
            lens in proptest::collection::vec(0usize..5000, 0..40),
            anchor_at in proptest::option::of((0usize..45, 0u64..20_000)),
            actual in proptest::option::of(0u64..50_000),
            room in 0u64..20_000,
        ) {
            let mut c = Conversation::new("sys", "task", "[]");
            for (k, len) in lens.iter().enumerate() {
                tool_result(&mut c, &k.to_string(), *len);
                if anchor_at.is_some_and(|(at, _)| at == k) {
                    c.anchor(anchor_at.unwrap().1, 3);
                }
            }
            if let Some(a) = actual {
                c.calibrate(a);
            }
            let before = c.clone();
            let result = c.fit(room);
            let elided = match &result {
                Ok(e) | Err(e) => e.call_ids.clone(),
            };
            let expected: Vec<String> = (0..elided.len()).map(|k| k.to_string()).collect();
            proptest::prop_assert_eq!(&elided, &expected);
            match result {
                Ok(e) => {
                    proptest::prop_assert!(c.estimate() <= room, "{} > {room}", c.estimate());
                    if let Some(fewer) = e.call_ids.len().checked_sub(1) {
                        // One result fewer would not have fitted.
                        let mut c0 = before;
                        for i in 0..fewer {
                            c0.elide(2 + i);
                        }
                        proptest::prop_assert!(c0.estimate() > room);
                    }
                }
                Err(e) => proptest::prop_assert_eq!(e.call_ids.len(), lens.len()),
            }
        }
    }
}
