//! One HTTP exchange of a model call: the attempt as it ended, the body
//! read up to its cap and classified, and the race with the run's
//! cancellation and the task's deadline.

use std::time::Duration;

use super::errors::{AttemptError, ServerError};
use crate::errors::{Failure, unanswered};
use chrono::{DateTime, Utc};
use harness_base::http::{Body, RawBody};
use harness_base::redact::Redactor;
use harness_base::text::clip;
use harness_wire::chat::ChatResponse;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// RunPod job facts of one attempt; the `runpod` object of a
/// conversation line, in RunPod's own names (docs/operating.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobInfo {
    pub job_id: Option<String>,
    pub status: Option<String>,
    #[serde(rename = "delayTime")]
    pub delay_time: Option<u64>,
    #[serde(rename = "executionTime")]
    pub execution_time: Option<u64>,
    /// Status polls made after `/runsync` returned a pending job.
    pub polls: u32,
}

/// What a caller of [`Endpoint::chat`](super::Endpoint::chat) is told,
/// in order: the call is going out (once, after the budget let its first
/// attempt start), then each attempt as it ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CallEvent<'a> {
    Sending,
    Ended(&'a Attempt<'a>),
}

/// One HTTP attempt of a model call, as it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt<'a> {
    pub attempt: u32,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub latency_ms: u64,
    /// The body sent (for RunPod, the `{"input": …}` envelope).
    pub request: &'a Value,
    pub http_status: Option<u16>,
    /// The raw response body: JSON when it parsed, else a string.
    pub response: Option<RawBody>,
    pub error: Option<String>,
    pub failure: Option<Failure>,
    /// The server's `Retry-After` on an error status.
    pub retry_after: Option<Duration>,
    pub runpod: Option<JobInfo>,
    /// The reply's `finish_reason` (`stop`, `tool_calls`, `length`), when it is one.
    pub finish_reason: Option<String>,
    /// Answered from a recording (a replay, or the records a task resumes
    /// from), not from the network.
    pub recorded: bool,
}

/// A successful call.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub response: ChatResponse,
    pub job: Option<JobInfo>,
    /// Answered from a recording: it cost nothing.
    pub recorded: bool,
}

/// The raw outcome of one attempt before it is judged.
pub(crate) struct RawAttempt {
    pub http_status: Option<u16>,
    pub response: Option<RawBody>,
    pub job: Option<JobInfo>,
    pub result: Result<ChatResponse, AttemptError>,
}

/// One HTTP exchange: `result` is `Ok` for a 2xx whose `body` is JSON.
/// The body is kept once, for the record and for reading.
pub(crate) struct HttpAnswer {
    pub status: Option<u16>,
    pub body: Option<RawBody>,
    pub result: Result<(), AttemptError>,
}

impl HttpAnswer {
    pub(super) fn failed(e: AttemptError) -> Self {
        HttpAnswer {
            status: None,
            body: None,
            result: Err(e),
        }
    }

    pub(crate) fn into_raw(
        self,
        job: Option<JobInfo>,
        result: Result<ChatResponse, AttemptError>,
    ) -> RawAttempt {
        RawAttempt {
            http_status: self.status,
            response: self.body,
            job,
            result,
        }
    }
}

/// Runs an HTTP exchange unless the run is cancelled or the deadline passes first.
pub(crate) async fn until(
    deadline: Instant,
    cancel: &CancellationToken,
    exchange: impl std::future::Future<Output = HttpAnswer>,
) -> HttpAnswer {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => HttpAnswer::failed(AttemptError::Interrupted),
        _ = tokio::time::sleep_until(deadline) => HttpAnswer::failed(AttemptError::WallClock),
        answer = exchange => answer,
    }
}

/// Reads an HTTP answer up to [`harness_base::http::MAX_BODY_BYTES`] and classifies it.
pub(super) async fn read_answer(
    resp: reqwest::Response,
    url: &str,
    on_timeout: Option<&str>,
    redactor: &Redactor,
) -> HttpAnswer {
    let status = resp.status();
    let code = Some(status.as_u16());
    let retry_after = harness_base::http::retry_after(resp.headers());
    let bytes = match harness_base::http::read_capped(resp, harness_base::http::MAX_BODY_BYTES)
        .await
    {
        Ok(Body::Whole(bytes)) => bytes,
        Ok(Body::TooLarge(first)) => {
            return HttpAnswer {
                status: code,
                body: Some(RawBody::text(&String::from_utf8_lossy(&first))),
                result: Err(AttemptError::TooLarge(format!(
                    "HTTP {status} with a body over {} MiB; it was not read further (the record keeps its first {} KiB)",
                    harness_base::http::MAX_BODY_BYTES >> 20,
                    harness_base::http::KEPT_OF_OVERSIZED >> 10
                ))),
            };
        }
        Err(e) => {
            return HttpAnswer {
                status: code,
                body: None,
                result: Err(AttemptError::Transport(unanswered(&e, url, on_timeout))),
            };
        }
    };
    // What is not JSON is recorded and quoted only in part, redacted
    // before it is cut (a key across the cut would be half kept).
    let text = |bytes: &[u8]| {
        let head = String::from_utf8_lossy(harness_base::text::prefix_bytes_of(bytes, 16 * 1024));
        clip(&redactor.redact_str(&head), 4000)
    };
    let (body, text) = match RawBody::json(bytes) {
        Ok(body) => (body, String::new()),
        Err(bytes) => {
            let text = text(&bytes);
            (RawBody::text(&text), text)
        }
    };
    let parsed = text.is_empty().then_some(&body);
    if status.is_success() {
        let result = match parsed {
            Some(_) => Ok(()),
            None => Err(AttemptError::NotJson {
                status: status.as_u16(),
                message: format!(
                    "a body that is not JSON: {}",
                    redactor.line(text.trim(), 120)
                ),
            }),
        };
        return HttpAnswer {
            status: code,
            body: Some(body),
            result,
        };
    }
    let err = ServerError::read(parsed, &text, status, redactor);
    HttpAnswer {
        status: code,
        body: Some(body),
        result: Err(AttemptError::status(status.as_u16(), err, retry_after)),
    }
}
