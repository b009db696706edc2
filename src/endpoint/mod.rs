//! The chat client (SPEC §6). One client, two kinds: `openai` posts the
//! request to `{base_url}/chat/completions`; `runpod` wraps the same body in
//! `{"input": …}`, posts it to `/runsync` and follows the job (see
//! [`runpod`]). Request building is not here: the body arrives built.
//!
//! Retries live here too, because what is retryable is a property of the
//! wire: connection failures, timeouts, 408, 429, 500, 502, 503, 504 and
//! failed RunPod jobs are retried with exponential backoff and jitter,
//! honouring `Retry-After`, inside the task's deadline; a retry after a
//! server error sends a new `seed` (llama-server's 500 on output that did
//! not parse as a tool call is the model's fault, so the same request would
//! likely fail the same way). Every attempt is reported to the caller as it
//! ends, so the records show it even if the run is killed later.

mod count;
pub mod recorded;
pub mod runpod;

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::base::http::{Body, RawBody};
use crate::base::lenient;
use crate::base::text::clip;
use crate::config::{EndpointConfig, EndpointKind};
use crate::wire::chat::ChatResponse;
use recorded::{Recording, Source};
use std::sync::{Arc, Mutex};

/// How a call retries. The defaults are the product's; tests shrink them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// The first backoff; each retry doubles it.
    pub base: Duration,
    /// No single wait is longer (unless the server's `Retry-After` says so).
    pub cap: Duration,
    /// Retries after the first attempt of one call.
    pub max_retries: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(30),
            max_retries: 5,
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `n` (1-based): exponential with jitter in
    /// [50 %, 100 %], raised to the server's `Retry-After` when it asks for more.
    pub fn delay(&self, n: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << (n.saturating_sub(1)).min(16))
            .min(self.cap);
        let jittered = exp.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0));
        retry_after.map_or(jittered, |ra| ra.max(jittered))
    }
}

/// RunPod job facts of one attempt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobInfo {
    pub job_id: Option<String>,
    pub status: Option<String>,
    pub delay_time: Option<u64>,
    pub execution_time: Option<u64>,
    /// Status polls made after `/runsync` returned a pending job.
    pub polls: u32,
}

/// What kind of failure ended an attempt: enough, with the status and the
/// body, to judge it again when a recorded run is replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// A body over the size cap.
    TooLarge,
    /// The task's wall clock ran out.
    WallClock,
    /// The run is stopping.
    Interrupted,
    /// A replay found no recorded answer for the request.
    NotRecorded,
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
}

/// A successful call.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub response: ChatResponse,
    pub job: Option<JobInfo>,
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
    /// refused key, a wrong route: [`crate::config::setup::is_endpoint_fault`]).
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
    /// A response body passed [`crate::base::http::MAX_BODY_BYTES`]: not read
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
    },
    /// A RunPod job that ended FAILED (retried like a 500).
    JobFailed(String),
    /// A RunPod job CANCELLED or TIMED_OUT (not retried in the task; retryable).
    JobEnded(String),
    /// A 2xx whose body is not a chat response.
    BadBody(String),
    /// A body over the size cap.
    TooLarge(String),
    WallClock,
    Interrupted,
    /// A replay has no recorded answer for this request.
    NotRecorded(String),
}

impl AttemptError {
    fn failure(&self) -> Failure {
        match self {
            AttemptError::Transport(_) => Failure::Transport,
            AttemptError::Status { .. } => Failure::Status,
            AttemptError::JobFailed(_) => Failure::JobFailed,
            AttemptError::JobEnded(_) => Failure::JobEnded,
            AttemptError::BadBody(_) => Failure::BadBody,
            AttemptError::TooLarge(_) => Failure::TooLarge,
            AttemptError::WallClock => Failure::WallClock,
            AttemptError::Interrupted => Failure::Interrupted,
            AttemptError::NotRecorded(_) => Failure::NotRecorded,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            AttemptError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

enum Next {
    Retry {
        new_seed: bool,
        retry_after: Option<Duration>,
    },
    Fail(CallError),
}

impl AttemptError {
    fn next(self) -> Next {
        match self {
            AttemptError::Transport(_) | AttemptError::BadBody(_) => Next::Retry {
                new_seed: false,
                retry_after: None,
            },
            AttemptError::Status {
                context: Some((n_prompt, n_ctx)),
                ..
            } => Next::Fail(CallError::ContextExceeded { n_prompt, n_ctx }),
            AttemptError::Status {
                status,
                retry_after,
                message,
                ..
            } => match status {
                408 | 429 | 502 | 503 | 504 => Next::Retry {
                    new_seed: false,
                    retry_after,
                },
                500 => Next::Retry {
                    new_seed: true,
                    retry_after,
                },
                s if crate::config::setup::is_endpoint_fault(s) => {
                    Next::Fail(CallError::Setup { status: s, message })
                }
                s if (400..500).contains(&s) => {
                    Next::Fail(CallError::Rejected { status: s, message })
                }
                _ => Next::Retry {
                    new_seed: false,
                    retry_after,
                },
            },
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

    fn describe(&self) -> String {
        match self {
            AttemptError::Transport(m)
            | AttemptError::JobFailed(m)
            | AttemptError::JobEnded(m)
            | AttemptError::BadBody(m)
            | AttemptError::TooLarge(m)
            | AttemptError::NotRecorded(m) => m.clone(),
            AttemptError::Status {
                status, message, ..
            } => format!("HTTP {status}: {message}"),
            AttemptError::WallClock => "the task's wall clock ran out".into(),
            AttemptError::Interrupted => "interrupted".into(),
        }
    }
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
    fn failed(e: AttemptError) -> Self {
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

/// The chat client. Built once per run and shared by every task.
#[derive(Debug, Clone)]
pub struct Endpoint {
    http: reqwest::Client,
    cfg: EndpointConfig,
    retry: RetryPolicy,
    /// A replay: calls are answered from this recording, not the network.
    recording: Option<Arc<Mutex<Recording>>>,
    /// Whether the server counts prompts exactly, learnt once per run.
    counting: Arc<count::Counting>,
    /// A chat request of this run was answered: the key and the route work,
    /// so a later refusal is about that request, not the setup.
    answered: Arc<std::sync::atomic::AtomicBool>,
}

impl Endpoint {
    pub fn new(cfg: &EndpointConfig) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(cfg.request_timeout_secs))
            .connect_timeout(Duration::from_secs(cfg.request_timeout_secs.min(15)))
            .user_agent(concat!("agent-harness/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Endpoint {
            http,
            cfg: cfg.clone(),
            retry: RetryPolicy::default(),
            recording: None,
            counting: Arc::default(),
            answered: Arc::default(),
        })
    }

    /// This endpoint answering from a recorded run (see [`recorded`]).
    pub fn replaying(mut self, recording: Arc<Mutex<Recording>>) -> Self {
        self.recording = Some(recording);
        self
    }

    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sends one chat request, retrying what is retryable until `deadline`.
    /// `on_attempt` sees every attempt as it ends.
    pub async fn chat(
        &self,
        body: Value,
        deadline: Instant,
        cancel: &CancellationToken,
        clock: &(dyn Fn() -> DateTime<Utc> + Send + Sync),
        on_attempt: &mut (dyn FnMut(&Attempt<'_>) + Send),
    ) -> Result<Completion, CallError> {
        let mut source = match &self.recording {
            Some(r) => lock(r).next_call(),
            None => Source::Live,
        };
        let call = Call {
            deadline,
            cancel,
            clock,
        };
        let result = self.attempts(body, &call, &mut source, on_attempt).await;
        if let (Some(r), Source::Recorded { turn, attempts }) = (&self.recording, &source)
            && !attempts.is_empty()
        {
            lock(r).mismatches.push(recorded::Mismatch {
                turn: *turn,
                recorded: None,
                sent: None,
                note: format!(
                    "the recorded call made {} more attempt(s) than this one",
                    attempts.len()
                ),
            });
        }
        result
    }

    /// The attempts of one call: each judged, retried while retryable.
    async fn attempts(
        &self,
        body: Value,
        call: &Call<'_>,
        source: &mut Source,
        on_attempt: &mut (dyn FnMut(&Attempt<'_>) + Send),
    ) -> Result<Completion, CallError> {
        // What goes on the wire, built once: every attempt sends and records it.
        let mut sent = match self.cfg.kind {
            EndpointKind::Openai => body,
            EndpointKind::Runpod => json!({ "input": body }),
        };
        let mut retries = 0;
        loop {
            let started_at = (call.clock)();
            let t0 = Instant::now();
            let raw = self.one_attempt(source, &sent, call).await;
            on_attempt(&Attempt {
                attempt: retries + 1,
                started_at,
                finished_at: (call.clock)(),
                latency_ms: u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
                request: &sent,
                http_status: raw.http_status,
                response: raw.response,
                error: raw.result.as_ref().err().map(AttemptError::describe),
                failure: raw.result.as_ref().err().map(AttemptError::failure),
                retry_after: raw
                    .result
                    .as_ref()
                    .err()
                    .and_then(AttemptError::retry_after),
                runpod: raw.job.clone(),
                finish_reason: raw
                    .result
                    .as_ref()
                    .ok()
                    .and_then(|r| r.choices.first()?.finish_reason.as_deref())
                    .map(|f| clip(f, 32)),
            });
            let error = match raw.result {
                Ok(response) => {
                    self.answered
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    return Ok(Completion {
                        response,
                        job: raw.job,
                    });
                }
                Err(e) => e,
            };
            retries += 1;
            let new_seed = self
                .before_retry(error, retries, call, matches!(source, Source::Live))
                .await
                .map_err(|e| self.judged(e))?;
            let chat_body = match self.cfg.kind {
                EndpointKind::Openai => &mut sent,
                EndpointKind::Runpod => &mut sent["input"],
            };
            if new_seed && let Value::Object(map) = chat_body {
                map.insert("seed".into(), Value::from(fastrand::u32(..)));
            }
        }
    }

    /// A refusal that, once the endpoint has answered in this run, is about
    /// the request and not the setup ([`crate::config::setup::endpoint_refusal_stops`])
    /// is final for its task instead of stopping the run.
    fn judged(&self, e: CallError) -> CallError {
        match e {
            CallError::Setup { status, message }
                if !crate::config::setup::endpoint_refusal_stops(
                    status,
                    self.answered.load(std::sync::atomic::Ordering::Relaxed),
                ) =>
            {
                CallError::Rejected { status, message }
            }
            e => e,
        }
    }

    /// After a failed attempt: `Err` when the call fails for good, else
    /// waits out the backoff (not in a replay) and says whether the retry
    /// needs a new seed.
    async fn before_retry(
        &self,
        error: AttemptError,
        retries: u32,
        call: &Call<'_>,
        sleeps: bool,
    ) -> Result<bool, CallError> {
        let why = error.describe();
        let (new_seed, retry_after) = match error.next() {
            Next::Fail(e) => return Err(e),
            Next::Retry {
                new_seed,
                retry_after,
            } => (new_seed, retry_after),
        };
        if retries > self.retry.max_retries {
            return Err(CallError::Unavailable(format!(
                "the endpoint failed {retries} times; last: {why}"
            )));
        }
        let wait = self.retry.delay(retries, retry_after, fastrand::f64());
        // A server may ask for any wait: past the deadline (or past what
        // a clock can hold) the task ends now, retryable in a later run.
        if Instant::now()
            .checked_add(wait)
            .is_none_or(|resume| resume >= call.deadline)
        {
            return Err(CallError::Unavailable(format!(
                "the endpoint failed ({why}) and the next retry would start after the task's wall clock runs out"
            )));
        }
        tracing::warn!(attempt = retries, wait_ms = wait.as_millis() as u64, error = %why, "model call failed; retrying");
        if sleeps {
            tokio::select! {
                _ = call.cancel.cancelled() => return Err(CallError::Interrupted),
                _ = tokio::time::sleep(wait) => {}
            }
        }
        Ok(new_seed)
    }

    /// One attempt, from the network or the recording.
    async fn one_attempt(&self, source: &mut Source, sent: &Value, call: &Call<'_>) -> RawAttempt {
        match (source, &self.recording) {
            (Source::Recorded { turn, attempts }, Some(r)) => recorded::answer(
                r,
                *turn,
                attempts,
                sent,
                self.cfg.kind == EndpointKind::Runpod,
            ),
            (Source::Exhausted, _) => {
                recorded::not_recorded("the recorded run made no further model call")
            }
            _ => self.attempt(sent, call.deadline, call.cancel).await,
        }
    }

    async fn attempt(
        &self,
        sent: &Value,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> RawAttempt {
        match self.cfg.kind {
            EndpointKind::Openai => {
                let url = format!("{}/chat/completions", self.cfg.base_url);
                let answer = until(deadline, cancel, self.post_json(&url, sent)).await;
                let result = match &answer.result {
                    Ok(()) => parse_chat(answer.body.as_ref()),
                    Err(e) => Err(e.clone()),
                };
                answer.into_raw(None, result)
            }
            // RunPod watches the deadline and the cancel token itself: a
            // pending job must be cancelled on the server before giving up.
            EndpointKind::Runpod => runpod::attempt(self, sent, deadline, cancel).await,
        }
    }

    /// POSTs JSON and classifies the answer.
    pub(crate) async fn post_json(&self, url: &str, body: &Value) -> HttpAnswer {
        self.send_json(reqwest::Method::POST, url, Some(body)).await
    }

    /// Sends a request and classifies the answer; the body is read up to
    /// [`crate::base::http::MAX_BODY_BYTES`].
    pub(crate) async fn send_json(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
    ) -> HttpAnswer {
        let mut req = self.http.request(method, url);
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Some(key) = &self.cfg.api_key {
            req = req.bearer_auth(key.expose());
        }
        match req.send().await {
            Ok(resp) => read_answer(resp, url).await,
            Err(e) => HttpAnswer::failed(AttemptError::Transport(describe_transport(&e, url))),
        }
    }
    /// Checks that the endpoint answers HTTP at all (any status counts).
    /// Sends no credentials. `Err` says what failed, for the operator.
    pub async fn ping(&self) -> Result<u16, String> {
        let url = match self.cfg.kind {
            EndpointKind::Openai => format!("{}/models", self.cfg.base_url),
            EndpointKind::Runpod => format!("{}/health", self.cfg.base_url),
        };
        match self
            .http
            .get(&url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
        {
            Ok(r) => Ok(r.status().as_u16()),
            Err(e) => Err(describe_transport(&e, &url)),
        }
    }

    /// The server's context window from llama-server's `/props`
    /// (`default_generation_settings.n_ctx`), when it can be asked.
    pub async fn discover_context(&self) -> Option<u32> {
        if let Some(r) = &self.recording {
            return lock(r).window;
        }
        if self.cfg.kind != EndpointKind::Openai {
            return None;
        }
        let root = self.root();
        #[derive(Deserialize)]
        struct Props {
            default_generation_settings: Settings,
        }
        #[derive(Deserialize)]
        struct Settings {
            n_ctx: u32,
        }
        let resp = self
            .http
            .get(format!("{root}/props"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        let resp = resp.error_for_status().ok()?;
        let Body::Whole(bytes) = crate::base::http::read_capped(resp, 1024 * 1024)
            .await
            .ok()?
        else {
            return None;
        };
        let props: Props = serde_json::from_slice(&bytes).ok()?;
        let ceiling = crate::config::bounds::CONTEXT_TOKENS.1;
        let n = u64::from(props.default_generation_settings.n_ctx).min(ceiling);
        u32::try_from(n).ok().filter(|n| *n > 0)
    }

    /// One line for the operator saying what failed and what to fix; for a
    /// setup fault, the config key (SPEC §16).
    pub fn diagnose(&self, e: &CallError) -> String {
        match e {
            CallError::Setup { status, message } | CallError::Rejected { status, message }
                if crate::config::setup::is_endpoint_fault(*status) =>
            {
                let setup = crate::config::setup::EndpointSetup {
                    kind: self.cfg.kind,
                    key_var: Some(self.cfg.api_key_env.as_str()).filter(|v| !v.is_empty()),
                };
                crate::config::setup::endpoint_diagnosis(
                    setup,
                    *status,
                    &format!("HTTP {status}: {message}"),
                )
            }
            _ => e.to_string(),
        }
    }

    pub(crate) fn base_url(&self) -> &str {
        &self.cfg.base_url
    }

    /// llama-server's own routes hang off the URL without `/v1`.
    fn root(&self) -> &str {
        self.cfg
            .base_url
            .strip_suffix("/v1")
            .unwrap_or(&self.cfg.base_url)
    }

    pub(crate) fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.cfg.poll_interval_ms)
    }
}

/// Reads an HTTP answer up to [`crate::base::http::MAX_BODY_BYTES`] and classifies it.
async fn read_answer(resp: reqwest::Response, url: &str) -> HttpAnswer {
    let status = resp.status();
    let code = Some(status.as_u16());
    let retry_after = crate::base::http::retry_after(resp.headers());
    let bytes = match crate::base::http::read_capped(resp, crate::base::http::MAX_BODY_BYTES).await
    {
        Ok(Body::Whole(bytes)) => bytes,
        Ok(Body::TooLarge(first)) => {
            return HttpAnswer {
                status: code,
                body: Some(RawBody::text(&String::from_utf8_lossy(&first))),
                result: Err(AttemptError::TooLarge(format!(
                    "HTTP {status} with a body over {} MiB; it was not read further (the record keeps its first {} KiB)",
                    crate::base::http::MAX_BODY_BYTES >> 20,
                    crate::base::http::KEPT_OF_OVERSIZED >> 10
                ))),
            };
        }
        Err(e) => {
            return HttpAnswer {
                status: code,
                body: None,
                result: Err(AttemptError::Transport(describe_transport(&e, url))),
            };
        }
    };
    // What is not JSON is recorded and quoted only in part.
    let text = |bytes: &[u8]| {
        clip(
            &String::from_utf8_lossy(crate::base::text::prefix_bytes_of(bytes, 16 * 1024)),
            4000,
        )
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
            None => Err(AttemptError::BadBody(format!(
                "HTTP {status} with a body that is not JSON"
            ))),
        };
        return HttpAnswer {
            status: code,
            body: Some(body),
            result,
        };
    }
    let err = ServerError::read(parsed, &text, status);
    let context = (err.kind.as_deref() == Some("exceed_context_size_error"))
        .then_some((err.n_prompt_tokens, err.n_ctx));
    HttpAnswer {
        status: code,
        body: Some(body),
        result: Err(AttemptError::Status {
            status: status.as_u16(),
            message: err.message,
            retry_after,
            context,
        }),
    }
}

/// What one model call is bounded by.
struct Call<'a> {
    deadline: Instant,
    cancel: &'a CancellationToken,
    clock: &'a (dyn Fn() -> DateTime<Utc> + Send + Sync),
}

fn lock(r: &Mutex<Recording>) -> std::sync::MutexGuard<'_, Recording> {
    r.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
    message: String,
    kind: Option<String>,
    n_prompt_tokens: Option<u64>,
    n_ctx: Option<u64>,
}

impl ServerError {
    pub(crate) fn read(parsed: Option<&RawBody>, text: &str, status: StatusCode) -> Self {
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
        let error = parsed
            .and_then(|b| b.parse::<Envelope>().ok())
            .map(|e| e.error);
        let as_text = error.and_then(|e| serde_json::from_str::<String>(e.get()).ok());
        let detail = error.and_then(|e| serde_json::from_str::<Detail>(e.get()).ok());
        // The server's words reach logs and terminals: no control characters.
        let shown = |m: &str, n: usize| crate::base::text::printable(&clip(m, n)).into_owned();
        match (as_text, detail) {
            (Some(message), _) => ServerError {
                message: shown(&message, 500),
                ..Default::default()
            },
            (None, Some(d)) => ServerError {
                message: shown(&d.message, 500),
                kind: d.kind,
                n_prompt_tokens: d.n_prompt_tokens,
                n_ctx: d.n_ctx,
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

/// A transport failure in words an operator can act on: the host and port,
/// and for a refused connection, whether the server is running.
pub fn describe_transport(e: &reqwest::Error, url: &str) -> String {
    let target = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| Some(format!("{}:{}", u.host_str()?, u.port_or_known_default()?)))
        .unwrap_or_else(|| "the endpoint".into());
    if e.is_timeout() {
        format!("{target} did not answer in time (timeout)")
    } else if e.is_connect() {
        let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
        let (mut detail, mut refused) = (String::new(), false);
        while let Some(s) = source {
            detail = s.to_string();
            refused |= s
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
            source = s.source();
        }
        if refused {
            format!(
                "cannot connect to {target} (connection refused): is llama-server (or the RunPod worker) running there?"
            )
        } else {
            format!("cannot connect to {target} ({detail})")
        }
    } else {
        format!(
            "the connection to {target} failed ({})",
            if e.is_body() || e.is_decode() {
                "dropped mid-answer"
            } else {
                "request error"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_caps_and_honours_retry_after() {
        let p = RetryPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(30),
            max_retries: 5,
        };
        assert_eq!(p.delay(1, None, 1.0), Duration::from_secs(1));
        assert_eq!(p.delay(3, None, 1.0), Duration::from_secs(4));
        assert_eq!(p.delay(3, None, 0.0), Duration::from_secs(2));
        assert_eq!(p.delay(10, None, 1.0), Duration::from_secs(30));
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(7)), 1.0),
            Duration::from_secs(7)
        );
        assert_eq!(
            p.delay(4, Some(Duration::from_secs(1)), 1.0),
            Duration::from_secs(8)
        );
    }

    #[test]
    fn statuses_are_classified_without_reading_messages() {
        let status = |s: u16| AttemptError::Status {
            status: s,
            message: "x".into(),
            retry_after: None,
            context: None,
        };
        for s in [408, 429, 502, 503, 504] {
            assert!(
                matches!(
                    status(s).next(),
                    Next::Retry {
                        new_seed: false,
                        ..
                    }
                ),
                "{s}"
            );
        }
        assert!(matches!(
            status(500).next(),
            Next::Retry { new_seed: true, .. }
        ));
        for s in [400, 409, 413, 422] {
            assert!(
                matches!(status(s).next(), Next::Fail(CallError::Rejected { .. })),
                "{s}"
            );
        }
        for s in [401, 402, 403, 404, 405, 407] {
            assert!(
                matches!(status(s).next(), Next::Fail(CallError::Setup { status, .. }) if status == s),
                "{s}"
            );
        }
        let ctx = AttemptError::Status {
            status: 400,
            message: "x".into(),
            retry_after: None,
            context: Some((Some(3253), Some(2048))),
        };
        assert!(matches!(
            ctx.next(),
            Next::Fail(CallError::ContextExceeded {
                n_prompt: Some(3253),
                n_ctx: Some(2048)
            })
        ));
        assert!(matches!(
            AttemptError::JobEnded("c".into()).next(),
            Next::Fail(CallError::Unavailable(_))
        ));
        assert!(matches!(
            AttemptError::JobFailed("f".into()).next(),
            Next::Retry { new_seed: true, .. }
        ));
    }

    #[test]
    fn llama_server_error_bodies_are_read() {
        let fixture: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/llama-server/context_exceeded.json"
        ))
        .unwrap();
        let e = ServerError::read(
            Some(&RawBody::from_value(&fixture["response"])),
            "",
            StatusCode::BAD_REQUEST,
        );
        assert_eq!(e.kind.as_deref(), Some("exceed_context_size_error"));
        assert_eq!((e.n_prompt_tokens, e.n_ctx), (Some(3253), Some(2048)));
        let e = ServerError::read(None, "<html>bad gateway</html>", StatusCode::BAD_GATEWAY);
        assert_eq!(e.message, "<html>bad gateway</html>");
    }
}
