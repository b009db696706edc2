//! The chat client (docs/operating.md, "Endpoints and retries"). One client,
//! two kinds: `openai` posts the request to `{base_url}/chat/completions`;
//! `runpod` wraps the same body in `{"input": …}`, posts it to `/runsync` and
//! follows the job (see [`runpod`]). Request building is not here: the body
//! arrives built.
//!
//! What is retried is decided here, because it is a property of the wire:
//! connection failures, timeouts, 408, 429, 500, 502, 503, 504 and failed
//! RunPod jobs are retried on the shared [`RetryPolicy`] (exponential
//! backoff and jitter, honouring `Retry-After`, inside the task's
//! deadline); a retry after a server error sends a new `seed`
//! (llama-server's 500 on output that did not parse as a tool call is the
//! model's fault, so the same request would likely fail the same way).
//! Every attempt is reported to the caller as it ends, so the records show
//! it even if the run is killed later.
//!
//! This is also where spend is charged (docs/budget-and-traces.md, "Budget"):
//! an endpoint [`metered`](Endpoint::metered) by the run's [`Budget`] asks it
//! before every live attempt (a limit reached is [`CallError::OverBudget`], and
//! nothing is sent) and charges it each live attempt as it ends: its GPU time
//! (RunPod's `executionTime` when the job reports one, else the attempt's wall
//! time), so a failed attempt counts before its retry is asked, and an answered
//! one's `usage` tokens with it. Attempts answered from a recording are neither
//! asked nor charged.

mod count;
mod errors;
mod exchange;
mod probe;
pub mod recorded;
pub mod runpod;

pub use count::Counter;
pub use errors::{CallError, Failure};
pub use exchange::{Attempt, CallEvent, Completion, JobInfo};
pub use harness_base::retry::RetryPolicy;
pub use probe::{Fit, Probe, Prober, Reach, Unanswered};

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use errors::{AttemptError, Next, parse_chat, too_slow, unanswered};
use exchange::{HttpAnswer, RawAttempt, read_answer, until};
use harness_base::http::{Body, Trust};
use harness_base::redact::Redactor;
use harness_base::retry::{Backoff, GiveUp, pause};
use harness_base::sync::lock;
use harness_base::text::clip;
use harness_base::time::millis;
use harness_config::{EndpointConfig, EndpointKind};
use harness_state::Budget;
use harness_wire::chat::ChatResponse;
use recorded::{Answerer, Recording};
use std::sync::{Arc, Mutex};

/// The chat client. Built once per run and shared by every task.
#[derive(Debug, Clone)]
pub struct Endpoint {
    http: reqwest::Client,
    cfg: EndpointConfig,
    retry: RetryPolicy,
    /// A replay: calls are answered from this recording, not the network.
    recording: Option<Arc<Mutex<Recording>>>,
    /// Whether the server counts prompts exactly, learnt once per run.
    counting: Arc<count::TokenCounting>,
    /// A chat request of this run was answered: the key and the route work,
    /// so a later refusal is about that request, not the setup.
    answered: Arc<std::sync::atomic::AtomicBool>,
    /// The run's `[budget]`, asked before and charged for every live
    /// attempt; `None` spends freely (`test-runpod`, a probe).
    budget: Option<Arc<Budget>>,
    /// Takes the secrets out of the server's words before they are cut to
    /// a message's length: the endpoint's key at least, the config's every
    /// secret once [`Endpoint::redacting`] is given them.
    redactor: Redactor,
}

impl Endpoint {
    /// The client of `cfg`'s endpoint, checking its certificate against
    /// `trust` (`[tls]`).
    pub fn new(cfg: &EndpointConfig, trust: &Trust) -> anyhow::Result<Self> {
        let http = harness_base::http::client(trust)?
            .timeout(Duration::from_secs(cfg.request_timeout_secs))
            .connect_timeout(Duration::from_secs(cfg.request_timeout_secs.min(15)))
            .build()?;
        // A key goes as the one `Authorization`: a user and password in
        // the URL would make reqwest send a second, Basic, beside it.
        let key = cfg.api_key.iter().cloned().collect();
        let mut cfg = cfg.clone();
        if cfg.api_key.is_some()
            && let Ok(mut url) = reqwest::Url::parse(&cfg.base_url)
            && (!url.username().is_empty() || url.password().is_some())
        {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            cfg.base_url = url.as_str().trim_end_matches('/').to_string();
        }
        Ok(Endpoint {
            http,
            cfg,
            retry: RetryPolicy::default(),
            recording: None,
            counting: Arc::default(),
            answered: Arc::default(),
            budget: None,
            redactor: Redactor::new(key),
        })
    }

    /// This endpoint taking every secret of `redactor` (the config's: a
    /// notes token, a key in a URL) out of what the server says, beside its
    /// own key.
    pub fn redacting(mut self, redactor: Redactor) -> Self {
        self.redactor = redactor;
        self
    }

    /// What takes the secrets out of the server's words.
    pub(crate) fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// This endpoint asking `budget` before every live attempt and
    /// charging it for each (one budget a run, shared by its tasks).
    pub fn metered(mut self, budget: Arc<Budget>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// This endpoint answering from a recorded run (see [`recorded`]).
    pub fn replaying(mut self, recording: Arc<Mutex<Recording>>) -> Self {
        self.recording = Some(recording);
        self
    }

    /// `openai` or `runpod`.
    pub fn kind(&self) -> EndpointKind {
        self.cfg.kind
    }

    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sends one chat request, retrying what is retryable until `deadline`.
    /// `on_event` is told when the call goes out (after the budget let its
    /// first attempt start: nothing is reported as sent that was not) and
    /// sees every attempt as it ends. The budget is asked before every live
    /// attempt, the first one too: a limit reached ends the call with
    /// [`CallError::OverBudget`].
    pub async fn chat(
        &self,
        body: Value,
        deadline: Instant,
        cancel: &CancellationToken,
        clock: &(dyn Fn() -> DateTime<Utc> + Send + Sync),
        on_event: &mut (dyn FnMut(CallEvent<'_>) + Send),
    ) -> Result<Completion, CallError> {
        let mut source = match &self.recording {
            Some(r) => lock(r).next_call(),
            None => Answerer::Live,
        };
        let call = Call {
            deadline,
            cancel,
            clock,
        };
        let result = self.attempts(body, &call, &mut source, on_event).await;
        if let (Some(r), Answerer::Recorded { turn, attempts }) = (&self.recording, &source)
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
    #[allow(clippy::disallowed_methods, reason = "a seam of spend")]
    async fn attempts(
        &self,
        body: Value,
        call: &Call<'_>,
        source: &mut Answerer,
        on_event: &mut (dyn FnMut(CallEvent<'_>) + Send),
    ) -> Result<Completion, CallError> {
        // What goes on the wire, built once: every attempt sends and records it.
        let mut sent = match self.cfg.kind {
            EndpointKind::Openai => body,
            EndpointKind::Runpod => json!({ "input": body }),
        };
        let mut backoff = self.retry.start(call.deadline);
        loop {
            let live = matches!(source, Answerer::Live);
            if live && let Some(budget) = &self.budget {
                budget.check().map_err(CallError::OverBudget)?;
            }
            if backoff.retries() == 0 {
                on_event(CallEvent::Sending);
            }
            let started_at = (call.clock)();
            let t0 = Instant::now();
            let raw = self.one_attempt(source, &sent, call).await;
            let attempt = Attempt {
                attempt: backoff.retries() + 1,
                started_at,
                finished_at: (call.clock)(),
                latency_ms: millis(t0.elapsed()),
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
                recorded: !live,
            };
            if live {
                self.charge(&attempt, raw.result.as_ref().ok());
            }
            on_event(CallEvent::Ended(&attempt));
            let error = match raw.result {
                Ok(response) => {
                    // Only the network tells that the key and route work.
                    if live {
                        self.answered
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    return Ok(Completion {
                        response,
                        job: raw.job,
                        recorded: !live,
                    });
                }
                Err(e) => e,
            };
            let new_seed = self.before_retry(error, &mut backoff, call, live).await?;
            let chat_body = match self.cfg.kind {
                EndpointKind::Openai => &mut sent,
                EndpointKind::Runpod => &mut sent["input"],
            };
            if new_seed && let Value::Object(map) = chat_body {
                map.insert("seed".into(), Value::from(fastrand::u32(..)));
            }
        }
    }

    /// Charges the budget one live attempt as it ended: its GPU time
    /// (RunPod's `executionTime` when the job reports one — a timed-out or
    /// cancelled job may not — else the attempt's wall time) and, answered,
    /// its reply's `usage` tokens, in one addition.
    #[allow(clippy::disallowed_methods, reason = "a seam of spend")]
    fn charge(&self, attempt: &Attempt<'_>, answered: Option<&ChatResponse>) {
        let Some(budget) = &self.budget else {
            return;
        };
        let execution = attempt.runpod.as_ref().and_then(|job| job.execution_time);
        let gpu_ms = match (self.cfg.kind, execution) {
            (EndpointKind::Runpod, Some(ms)) => ms,
            _ => attempt.latency_ms,
        };
        let tokens = answered
            .and_then(|r| r.usage)
            .map_or(0, |u| u.prompt_tokens.saturating_add(u.completion_tokens));
        budget.spend(tokens, gpu_ms);
    }

    /// A live reply the server sent without `usage`: its tokens as the
    /// caller estimated them go to the budget (its GPU time already did).
    /// A recorded reply, or one the server counted, charges nothing here.
    #[allow(clippy::disallowed_methods, reason = "a seam of spend")]
    pub fn charge_estimate(&self, reply: &Completion, tokens: u64) {
        if let Some(budget) = &self.budget
            && !reply.recorded
            && reply.response.usage.is_none()
        {
            budget.spend(tokens, 0);
        }
    }

    /// After a failed attempt: `Err` when the call fails for good, else
    /// waits out the backoff (not in a replay) and says whether the retry
    /// needs a new seed.
    async fn before_retry(
        &self,
        error: AttemptError,
        backoff: &mut Backoff,
        call: &Call<'_>,
        sleeps: bool,
    ) -> Result<bool, CallError> {
        let why = error.describe();
        // A RunPod job whose output is no chat completion is that job's
        // (or its worker's) fault, retried: only the openai kind's answer
        // says what listens on the port.
        let answered = self.answered.load(std::sync::atomic::Ordering::Relaxed)
            || (self.cfg.kind == EndpointKind::Runpod && matches!(error, AttemptError::BadBody(_)));
        let (new_seed, retry_after) = match error.next(answered) {
            Next::Fail(e) => return Err(e),
            Next::Retry {
                new_seed,
                retry_after,
            } => (new_seed, retry_after),
        };
        // A server may ask for any wait: past the deadline the task ends
        // now, retryable in a later run.
        let wait = backoff.next(retry_after).map_err(|give_up| match give_up {
            GiveUp::Spent { failures } => CallError::Unavailable(format!(
                "the endpoint failed {failures} times; last: {why}"
            )),
            GiveUp::PastDeadline | GiveUp::Cancelled => CallError::Unavailable(format!(
                "the endpoint failed ({why}) and the next retry would start after the task's wall clock runs out"
            )),
        })?;
        tracing::warn!(attempt = backoff.retries(), wait_ms = millis(wait), error = %why, "model call failed; retrying");
        if sleeps {
            pause(wait, Some(call.cancel))
                .await
                .map_err(|_| CallError::Interrupted)?;
        }
        Ok(new_seed)
    }

    /// One attempt, from the network or the recording.
    async fn one_attempt(
        &self,
        source: &mut Answerer,
        sent: &Value,
        call: &Call<'_>,
    ) -> RawAttempt {
        match (source, &self.recording) {
            (Answerer::Recorded { turn, attempts }, Some(r)) => recorded::answer(
                r,
                *turn,
                attempts,
                sent,
                self.cfg.kind == EndpointKind::Runpod,
                &self.redactor,
            ),
            (Answerer::Exhausted, _) => {
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
    /// [`harness_base::http::MAX_BODY_BYTES`].
    pub(crate) async fn send_json(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
    ) -> HttpAnswer {
        // A chat request to llama-server runs as long as the model writes.
        let slow = (method == reqwest::Method::POST && self.cfg.kind == EndpointKind::Openai)
            .then(|| too_slow(self.cfg.request_timeout_secs));
        let mut req = self.http.request(method, url);
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Some(key) = &self.cfg.api_key {
            req = req.bearer_auth(key.expose());
        }
        match req.send().await {
            Ok(resp) => read_answer(resp, url, slow.as_deref(), &self.redactor).await,
            Err(e) => HttpAnswer::failed(AttemptError::Transport(unanswered(
                &e,
                url,
                slow.as_deref(),
            ))),
        }
    }
    /// Checks that the endpoint answers HTTP at all (any status counts).
    /// Sends no credentials. `Err` says what failed, for the operator.
    pub async fn ping(&self) -> Result<u16, Unanswered> {
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
            Err(e) => Err(Unanswered::of(&e, &url)),
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
        let Body::Whole(bytes) = harness_base::http::read_capped(resp, 1024 * 1024)
            .await
            .ok()?
        else {
            return None;
        };
        let props: Props = serde_json::from_slice(&bytes).ok()?;
        let ceiling = harness_config::bounds::CONTEXT_TOKENS.1;
        let n = u64::from(props.default_generation_settings.n_ctx).min(ceiling);
        u32::try_from(n).ok().filter(|n| *n > 0)
    }

    /// One line for the operator saying what failed and what to fix; for a
    /// setup fault, the config key (docs/operating.md, "Setup faults").
    pub fn diagnose(&self, e: &CallError) -> String {
        match e {
            CallError::Setup { status, message } => self.diagnosis(*status, message),
            CallError::Rejected { status, message }
                if harness_config::setup::is_endpoint_fault(*status) =>
            {
                self.diagnosis(*status, message)
            }
            _ => e.to_string(),
        }
    }

    /// [`harness_config::setup::endpoint_diagnosis`] of this endpoint's answer.
    fn diagnosis(&self, status: u16, message: &str) -> String {
        let setup = harness_config::setup::EndpointSetup {
            kind: self.cfg.kind,
            key_var: Some(self.cfg.api_key_env.as_str()).filter(|v| !v.is_empty()),
        };
        harness_config::setup::endpoint_diagnosis(setup, status, message)
    }

    pub(crate) fn base_url(&self) -> &str {
        &self.cfg.base_url
    }

    /// What answers at the address: [`Prober::probe`], [`Prober::reach`].
    pub fn prober(&self) -> Prober<'_> {
        Prober(self)
    }

    /// A prompt counted exactly: [`Counter::count_prompt`].
    pub fn counter(&self) -> Counter<'_> {
        Counter(self)
    }

    /// llama-server's own routes hang off the URL without `/v1`.
    pub(crate) fn root(&self) -> &str {
        self.cfg
            .base_url
            .strip_suffix("/v1")
            .unwrap_or(&self.cfg.base_url)
    }

    pub(crate) fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.cfg.poll_interval_ms)
    }
}

/// What one model call is bounded by.
struct Call<'a> {
    deadline: Instant,
    cancel: &'a CancellationToken,
    clock: &'a (dyn Fn() -> DateTime<Utc> + Send + Sync),
}

#[cfg(test)]
mod tests;
