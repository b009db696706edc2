//! What can go wrong with a model call, and what follows from it: each
//! attempt's failure kind (what a replay needs to judge it again), whether
//! to retry, the final [`CallError`], and llama-server's error bodies read
//! into words an operator can act on.

use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;

use harness_base::http::{RawBody, TransportFailure, TransportKind};
use harness_base::lenient;
use harness_base::redact::Redactor;
use harness_wire::chat::ChatResponse;

/// What kind of failure ended an attempt: enough, with the status and the
/// body, to judge it again when a recorded run is replayed. Its name in
/// `conversation.jsonl`'s `error_kind` is derived (snake_case).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString, strum::EnumIter,
)]
#[strum(serialize_all = "snake_case")]
pub enum Failure {
    /// No HTTP answer (refused, DNS, reset, timeout).
    Transport,
    /// An HTTP error status.
    Status,
    /// A RunPod job that ended FAILED.
    JobFailed,
    /// A RunPod job CANCELLED or TIMED_OUT.
    JobEnded,
    /// A 2xx whose body is not a chat response.
    BadBody,
    /// A 2xx whose body is not JSON at all (an HTML page): before the
    /// endpoint answered in this run, another service on its port.
    NotJson,
    /// A body over the size cap.
    TooLarge,
    /// The task's wall clock ran out.
    WallClock,
    /// The run is stopping.
    Interrupted,
    /// A replay found no recorded answer for the request.
    NotRecorded,
}

/// Why a call failed for good.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The task's wall clock ran out while a call was in flight or a job pending.
    #[error("the task's wall clock ran out during a model call")]
    WallClock,
    /// The endpoint stayed unavailable through the retries (or the next retry
    /// would start after the deadline). Retryable in a later run.
    #[error("{0}")]
    Unavailable(String),
    /// The endpoint rejected the request itself (a 4xx other than 408 and 429). Final.
    #[error("the endpoint rejected the request (HTTP {status}): {message}")]
    Rejected { status: u16, message: String },
    /// The endpoint's answer says the setup is wrong, not the task (a
    /// refused key, a wrong route: [`harness_config::setup::is_endpoint_fault`]).
    /// The run stops; see [`Endpoint::diagnose`].
    #[error("HTTP {status}: {message}")]
    Setup { status: u16, message: String },
    /// llama-server's `exceed_context_size_error`.
    #[error("the prompt ({n_prompt:?} tokens) exceeds the server's context ({n_ctx:?} tokens)")]
    ContextExceeded {
        n_prompt: Option<u64>,
        n_ctx: Option<u64>,
    },
    /// The run is shutting down.
    #[error("interrupted")]
    Interrupted,
    /// A `[budget]` limit was reached before an attempt could start
    /// (docs/budget-and-traces.md, "Budget"): nothing was sent.
    #[error("{0}")]
    OverBudget(String),
    /// A response body passed [`harness_base::http::MAX_BODY_BYTES`]: not read
    /// further, and final (the same server would send it again).
    #[error("{0}")]
    TooLarge(String),
    /// A replay found no recorded answer for a request. Final.
    #[error("{0}")]
    NotRecorded(String),
}

/// What went wrong in one attempt, and so whether to retry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AttemptError {
    /// No HTTP answer (refused, DNS, reset, timeout).
    Transport(String),
    /// An HTTP error status.
    Status {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
        context: Option<(Option<u64>, Option<u64>)>,
        /// The body was an error envelope (`{"error": …}`), as OpenAI-style
        /// servers and RunPod send: a chat server's refusal, not another
        /// service's answer.
        enveloped: bool,
    },
    /// A RunPod job that ended FAILED (retried like a 500).
    JobFailed(String),
    /// A RunPod job CANCELLED or TIMED_OUT (not retried in the task; retryable).
    JobEnded(String),
    /// A 2xx whose body is not a chat response.
    BadBody(String),
    /// A 2xx whose body is not JSON at all.
    NotJson {
        status: u16,
        message: String,
    },
    /// A body over the size cap.
    TooLarge(String),
    WallClock,
    Interrupted,
    /// A replay has no recorded answer for this request.
    NotRecorded(String),
}

impl AttemptError {
    pub(super) fn failure(&self) -> Failure {
        match self {
            AttemptError::Transport(_) => Failure::Transport,
            AttemptError::Status { .. } => Failure::Status,
            AttemptError::JobFailed(_) => Failure::JobFailed,
            AttemptError::JobEnded(_) => Failure::JobEnded,
            AttemptError::BadBody(_) => Failure::BadBody,
            AttemptError::NotJson { .. } => Failure::NotJson,
            AttemptError::TooLarge(_) => Failure::TooLarge,
            AttemptError::WallClock => Failure::WallClock,
            AttemptError::Interrupted => Failure::Interrupted,
            AttemptError::NotRecorded(_) => Failure::NotRecorded,
        }
    }

    pub(super) fn retry_after(&self) -> Option<Duration> {
        match self {
            AttemptError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

pub(super) enum Next {
    Retry {
        new_seed: bool,
        retry_after: Option<Duration>,
    },
    Fail(CallError),
}

/// Reads a chat response; a body without choices is not one.
pub(crate) fn parse_chat(body: Option<&RawBody>) -> Result<ChatResponse, AttemptError> {
    let body = body.ok_or_else(|| AttemptError::BadBody("the reply has no body".into()))?;
    let r = body
        .parse::<ChatResponse>()
        .map_err(|e| AttemptError::BadBody(format!("the reply is not a chat completion: {e}")))?;
    if r.choices.is_empty() {
        return Err(AttemptError::BadBody("the reply has no choices".into()));
    }
    Ok(r)
}

/// llama-server's (and OpenAI's) error body: `{"error": {"message", "type", …}}`.
#[derive(Debug, Default)]
pub(crate) struct ServerError {
    pub(super) message: String,
    pub(super) kind: Option<String>,
    pub(super) n_prompt_tokens: Option<u64>,
    pub(super) n_ctx: Option<u64>,
    /// The body was a chat server's error: `{"error": …}`, or the flat
    /// `{"object": "error", "message": …}` of vLLM and SGLang.
    pub(super) enveloped: bool,
}

/// Whether `body` is a chat server's error: `{"error": …}`, or the flat
/// `{"object": "error", "message": …}`.
pub(crate) fn is_error_envelope(body: &[u8]) -> bool {
    ServerError::read(
        Some(&RawBody::json(body.to_vec()).unwrap_or_else(|_| RawBody::text(""))),
        "",
        StatusCode::BAD_REQUEST,
        &Redactor::default(),
    )
    .enveloped
}

impl ServerError {
    /// The server's words, redacted of `redactor`'s secrets before they are
    /// cut (a key straddling the cut is never half shown).
    pub(crate) fn read(
        parsed: Option<&RawBody>,
        text: &str,
        status: StatusCode,
        redactor: &Redactor,
    ) -> Self {
        #[derive(Deserialize)]
        struct Envelope<'a> {
            #[serde(borrow)]
            error: &'a RawValue,
        }
        #[derive(Deserialize)]
        struct Detail {
            #[serde(default, deserialize_with = "lenient::text_or_empty")]
            message: String,
            #[serde(default, rename = "type", deserialize_with = "lenient::text")]
            kind: Option<String>,
            #[serde(default, deserialize_with = "lenient::count")]
            n_prompt_tokens: Option<u64>,
            #[serde(default, deserialize_with = "lenient::count")]
            n_ctx: Option<u64>,
        }
        /// vLLM's and SGLang's flat error: `{"object": "error", "message": …}`.
        #[derive(Deserialize)]
        struct Flat {
            object: String,
            #[serde(flatten)]
            detail: Detail,
        }
        let error = parsed
            .and_then(|b| b.parse::<Envelope>().ok())
            .map(|e| e.error);
        let as_text = error.and_then(|e| serde_json::from_str::<String>(e.get()).ok());
        let detail = error
            .and_then(|e| serde_json::from_str::<Detail>(e.get()).ok())
            .or_else(|| {
                let flat = parsed?.parse::<Flat>().ok()?;
                (flat.object == "error").then_some(flat.detail)
            });
        // The server's words reach logs and terminals: no secret, no
        // control characters.
        let shown = |m: &str, n: usize| redactor.line(m, n);
        match (as_text, detail) {
            (Some(message), _) => ServerError {
                message: shown(&message, 500),
                enveloped: true,
                ..Default::default()
            },
            (None, Some(d)) => ServerError {
                message: shown(&d.message, 500),
                kind: d.kind,
                n_prompt_tokens: d.n_prompt_tokens,
                n_ctx: d.n_ctx,
                enveloped: true,
            },
            (None, None) => ServerError {
                message: if text.trim().is_empty() {
                    status.canonical_reason().unwrap_or("error").to_string()
                } else {
                    shown(text.trim(), 300)
                },
                ..Default::default()
            },
        }
    }
}

impl AttemptError {
    /// An HTTP error status with the server's error body read.
    pub(super) fn status(status: u16, err: ServerError, retry_after: Option<Duration>) -> Self {
        let context = (err.kind.as_deref() == Some("exceed_context_size_error"))
            .then_some((err.n_prompt_tokens, err.n_ctx));
        AttemptError::Status {
            status,
            message: err.message,
            retry_after,
            context,
            enveloped: err.enveloped,
        }
    }
}

/// A request to the endpoint that got no answer, in words an operator can
/// act on ([`TransportFailure`]: the host and port), and for a refused
/// connection, whether the server is running; `on_timeout` is said after a
/// request that ran out of time.
pub(crate) fn unanswered(e: &reqwest::Error, url: &str, on_timeout: Option<&str>) -> String {
    unanswered_words(&TransportFailure::of(e, Some(url)), on_timeout)
}

/// [`unanswered`] of a failure already read.
pub(crate) fn unanswered_words(failure: &TransportFailure, on_timeout: Option<&str>) -> String {
    match (failure.kind, on_timeout) {
        (TransportKind::Refused, _) => {
            format!("{failure}: is llama-server (or the RunPod worker) running there?")
        }
        (TransportKind::Timeout, Some(what)) => format!("{failure}: {what}"),
        _ => failure.to_string(),
    }
}

/// What a chat request that ran out of time most often means, and the fix:
/// a model writing `max_tokens` tokens more slowly than the timeout allows.
pub(crate) fn too_slow(timeout_secs: u64) -> String {
    format!(
        "no answer within request_timeout_secs = {timeout_secs}; a model this slow (a small one on a CPU) answers sooner with a lower [model] max_tokens, or raise request_timeout_secs"
    )
}

/// What follows an HTTP error status that is neither a context overflow
/// nor a setup fault found before the endpoint answered.
fn status_next(
    status: u16,
    message: String,
    retry_after: Option<Duration>,
    answered: bool,
) -> Next {
    match status {
        408 | 429 | 502 | 503 | 504 => Next::Retry {
            new_seed: false,
            retry_after,
        },
        500 => Next::Retry {
            new_seed: true,
            retry_after,
        },
        s if harness_config::setup::endpoint_refusal_stops(s, answered) => {
            Next::Fail(CallError::Setup { status: s, message })
        }
        // Once the route has answered, a 501 is a passing fault of
        // something between; a 403, 404 or 405 is about the request.
        501 => Next::Retry {
            new_seed: false,
            retry_after,
        },
        s if (400..500).contains(&s) => Next::Fail(CallError::Rejected { status: s, message }),
        _ => Next::Retry {
            new_seed: false,
            retry_after,
        },
    }
}

impl AttemptError {
    /// What follows this failure, once it is known whether the endpoint
    /// already answered a chat request in this run (`answered`): before
    /// that, an answer that is no chat server's at all (a 2xx that is not
    /// JSON, a 404, 405 or 501) says the URL points at another service.
    pub(super) fn next(self, answered: bool) -> Next {
        match self {
            AttemptError::NotJson { status, message } if !answered => {
                Next::Fail(CallError::Setup { status, message })
            }
            // JSON that is no chat completion, before any was: a catch-all
            // service, not a chat server having a bad moment.
            AttemptError::BadBody(message) if !answered => Next::Fail(CallError::Setup {
                status: 200,
                message,
            }),
            AttemptError::Transport(_)
            | AttemptError::BadBody(_)
            | AttemptError::NotJson { .. } => Next::Retry {
                new_seed: false,
                retry_after: None,
            },
            AttemptError::Status {
                context: Some((n_prompt, n_ctx)),
                ..
            } => Next::Fail(CallError::ContextExceeded { n_prompt, n_ctx }),
            // llama-server without `--jinja` refuses the first request with
            // tools; after an answer, its words could be quoted from anywhere.
            AttemptError::Status {
                status, message, ..
            } if !answered && harness_config::setup::is_server_refusal(status, &message) => {
                Next::Fail(CallError::Setup { status, message })
            }
            // Before a chat request was answered, a refusal that is no chat
            // server's (a FastAPI 422, another API's JSON 404) says the URL
            // points at another service.
            AttemptError::Status {
                status,
                message,
                enveloped: false,
                ..
            } if !answered
                && (400..500).contains(&status)
                && !matches!(status, 408 | 413 | 429) =>
            {
                Next::Fail(CallError::Setup { status, message })
            }
            AttemptError::Status {
                status,
                retry_after,
                message,
                ..
            } => status_next(status, message, retry_after, answered),
            AttemptError::JobFailed(_) => Next::Retry {
                new_seed: true,
                retry_after: None,
            },
            AttemptError::JobEnded(m) => Next::Fail(CallError::Unavailable(m)),
            AttemptError::TooLarge(m) => Next::Fail(CallError::TooLarge(m)),
            AttemptError::NotRecorded(m) => Next::Fail(CallError::NotRecorded(m)),
            AttemptError::WallClock => Next::Fail(CallError::WallClock),
            AttemptError::Interrupted => Next::Fail(CallError::Interrupted),
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            AttemptError::Transport(m)
            | AttemptError::JobFailed(m)
            | AttemptError::JobEnded(m)
            | AttemptError::BadBody(m)
            | AttemptError::TooLarge(m)
            | AttemptError::NotRecorded(m) => m.clone(),
            AttemptError::Status {
                status, message, ..
            }
            | AttemptError::NotJson { status, message } => format!("HTTP {status}: {message}"),
            AttemptError::WallClock => "the task's wall clock ran out".into(),
            AttemptError::Interrupted => "interrupted".into(),
        }
    }
}
