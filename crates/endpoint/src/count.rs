//! Counting a prompt exactly (docs/tasks.md, "The loop": context): llama-server
//! renders the request with its own template (`POST /apply-template`) and
//! tokenizes the result with special tokens on (`POST /tokenize`, `add_special`
//! and `parse_special`), which gives the `usage.prompt_tokens` the chat request
//! then reports. Only the `openai` kind can ask (RunPod forwards only the chat
//! route). The first failure turns counting off for the rest of the run, and
//! the caller estimates instead.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::errors::AttemptError;
use super::exchange::until;
use super::recorded::Count;
use super::{Endpoint, lock};
use harness_base::lenient;
use harness_config::EndpointKind;

/// Whether the server counts: 0 not asked yet, then [`ON`] or [`OFF`] for the run.
#[derive(Debug, Default)]
pub(crate) struct TokenCounting(AtomicU8);

const ON: u8 = 1;
const OFF: u8 = 2;

/// How long one of the two calls may take: they are quick next to a generation.
const COUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// The endpoint as it counts prompts ([`Endpoint::counter`]).
pub struct Counter<'a>(pub(crate) &'a Endpoint);

impl Counter<'_> {
    /// The exact prompt tokens of `body` (a chat request), or `None` when
    /// the server cannot say. A count under `at_least` (what the request's
    /// text cannot tokenize to less than) is not believed, for this request
    /// only: it would let an endless prompt through as a small one. In a
    /// replay, the count the recorded run made.
    pub async fn count_prompt(
        &self,
        body: &Value,
        at_least: u64,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Option<u64> {
        if let Some(r) = &self.0.recording {
            match lock(r).next_count() {
                Count::Recorded(n) => return Some(n),
                Count::None => return None,
                Count::Live => {}
            }
        }
        if self.0.cfg.kind != EndpointKind::Openai
            || self.0.counting.0.load(Ordering::Relaxed) == OFF
        {
            return None;
        }
        let limit = deadline.min(Instant::now() + COUNT_TIMEOUT);
        match self.count_live(body, limit, cancel).await {
            Ok(n) if n < at_least => {
                tracing::warn!(
                    counted = n,
                    at_least,
                    "the server counted fewer prompt tokens than the text can hold: not believed, this request is estimated"
                );
                None
            }
            Ok(n) => {
                self.0.counting.0.store(ON, Ordering::Relaxed);
                Some(n)
            }
            // A stop, or the task's own clock: no verdict on the server.
            Err(AttemptError::Interrupted) => None,
            Err(AttemptError::WallClock) if Instant::now() >= deadline => None,
            Err(e) => {
                self.turn_counting_off(e.describe());
                None
            }
        }
    }

    fn turn_counting_off(&self, why: String) {
        if self.0.counting.0.swap(OFF, Ordering::Relaxed) != OFF {
            tracing::warn!(
                error = %why,
                "the server cannot count prompts (/apply-template, /tokenize): estimating them for the rest of the run"
            );
        }
    }

    async fn count_live(
        &self,
        body: &Value,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<u64, AttemptError> {
        #[derive(Deserialize)]
        struct Applied {
            prompt: String,
        }
        #[derive(Deserialize)]
        struct Tokens {
            #[serde(deserialize_with = "how_many")]
            tokens: u64,
        }
        let root = self.0.root();
        let applied: Applied = self
            .post_for(&format!("{root}/apply-template"), body, deadline, cancel)
            .await?;
        let tokenize =
            json!({"content": applied.prompt, "add_special": true, "parse_special": true});
        drop(applied);
        let tokens: Tokens = self
            .post_for(&format!("{root}/tokenize"), &tokenize, deadline, cancel)
            .await?;
        Ok(tokens.tokens)
    }

    /// POSTs `body` and reads the answer as `T`.
    async fn post_for<T: for<'de> Deserialize<'de>>(
        &self,
        url: &str,
        body: &Value,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<T, AttemptError> {
        let answer = until(deadline, cancel, self.0.post_json(url, body)).await;
        answer.result?;
        let body = answer
            .body
            .ok_or_else(|| AttemptError::BadBody("no body".into()))?;
        body.parse::<T>()
            .map_err(|e| AttemptError::BadBody(format!("{url} answered {e}")))
    }
}

/// The length of a list, counted as it is parsed past.
fn how_many<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(lenient::first::<D, serde::de::IgnoredAny>(d, 0)?.beyond)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_list_is_counted_not_kept() {
        #[derive(Deserialize)]
        struct Tokens {
            #[serde(deserialize_with = "how_many")]
            tokens: u64,
        }
        let t: Tokens =
            serde_json::from_str(r#"{"tokens": [2, 105, 2364, {"id": 1, "piece": "x"}]}"#).unwrap();
        assert_eq!(t.tokens, 4);
        let t: Tokens = serde_json::from_str(r#"{"tokens": []}"#).unwrap();
        assert_eq!(t.tokens, 0);
        assert!(serde_json::from_str::<Tokens>(r#"{"tokens": 7}"#).is_err());
    }
}
