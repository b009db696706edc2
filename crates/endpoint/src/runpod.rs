//! The RunPod serverless envelope (docs/operating.md, "Endpoints and retries"):
//! the chat request goes out as `{"input": <request>}` to `/runsync`; the
//! answer is a job. `COMPLETED` carries the chat response in `output`;
//! `IN_QUEUE` / `IN_PROGRESS` means the sync wait ran out, so the job is polled
//! at `/status/{id}` (GET, or POST after a 405 — the `runpod` package's local
//! server only takes POST) until it is final. A job still pending when the
//! task's wall clock runs out, or when the run is interrupted, is cancelled at
//! `/cancel/{id}`.

use reqwest::Method;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Endpoint;
use super::errors::{AttemptError, parse_chat};
use super::exchange::{HttpAnswer, JobInfo, RawAttempt, until};
use harness_base::http::RawBody;
use harness_base::lenient;
use harness_base::redact::Redactor;
use harness_base::text::clip;

/// Consecutive failed status polls before the attempt is given up (and retried).
const MAX_POLL_ERRORS: u32 = 5;

/// A job as `/runsync` and `/status` return it. Fields may be missing, and
/// numbers of the wrong kind are read as absent, not as a broken answer.
#[derive(Debug, Default, Deserialize)]
struct Job {
    #[serde(default, deserialize_with = "lenient::text")]
    id: Option<String>,
    #[serde(default, deserialize_with = "lenient::text")]
    status: Option<String>,
    #[serde(default)]
    output: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<Box<RawValue>>,
    #[serde(default, rename = "delayTime", deserialize_with = "lenient::count")]
    delay_time: Option<u64>,
    #[serde(default, rename = "executionTime", deserialize_with = "lenient::count")]
    execution_time: Option<u64>,
}

/// RunPod's job states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobStatus {
    InQueue,
    InProgress,
    Completed,
    Failed,
    Cancelled,
    TimedOut,
}

impl JobStatus {
    fn parse(s: &str) -> Option<JobStatus> {
        Some(match s {
            "IN_QUEUE" => JobStatus::InQueue,
            // The docs also name `RUNNING`.
            "IN_PROGRESS" | "RUNNING" => JobStatus::InProgress,
            "COMPLETED" => JobStatus::Completed,
            "FAILED" => JobStatus::Failed,
            "CANCELLED" => JobStatus::Cancelled,
            "TIMED_OUT" => JobStatus::TimedOut,
            _ => return None,
        })
    }
}

/// A job id fit for a URL: 1–128 characters of `[A-Za-z0-9_-]`
/// (docs/untrusted-input.md).
pub(crate) fn is_job_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What one job answer means.
pub(crate) enum JobVerdict {
    /// The attempt is over: a chat response or why not.
    Final(Result<harness_wire::chat::ChatResponse, AttemptError>),
    /// Still pending; poll this id.
    Pending(String),
}

/// One `/runsync` call with its polling; `request` is the `{"input": …}` envelope.
pub(crate) async fn attempt(
    ep: &Endpoint,
    request: &Value,
    deadline: Instant,
    cancel: &CancellationToken,
) -> RawAttempt {
    let url = format!("{}/runsync", ep.base_url());
    let mut answer = until(deadline, cancel, ep.post_json(&url, request)).await;
    if let Err(e) = answer.result.clone() {
        return answer.into_raw(None, Err(e));
    }
    let mut info = JobInfo::default();
    let mut poller = Poller {
        method: Method::GET,
        errors: 0,
    };
    loop {
        let id = match judge(answer.body.as_ref(), &mut info, ep.redactor()) {
            JobVerdict::Final(result) => return answer.into_raw(Some(info), result),
            JobVerdict::Pending(id) => id,
        };
        match poller.poll(ep, &id, deadline, cancel).await {
            Polled::Answer(a) => {
                info.polls += 1;
                answer = a;
            }
            Polled::Again => info.polls += 1,
            Polled::Stop(e) => {
                if matches!(e, AttemptError::Interrupted | AttemptError::WallClock) {
                    cancel_job(ep, &id).await;
                }
                return answer.into_raw(Some(info), Err(e));
            }
        }
    }
}

/// Reads a job answer into `info` and decides what it means.
pub(crate) fn judge(body: Option<&RawBody>, info: &mut JobInfo, redactor: &Redactor) -> JobVerdict {
    let bad = |m: String| JobVerdict::Final(Err(AttemptError::BadBody(m)));
    let Some(Ok(job)) = body.map(RawBody::parse::<Job>) else {
        return bad("RunPod answered with something that is not a job".into());
    };
    if let Some(id) = &job.id
        && !is_job_id(id)
    {
        return bad(format!(
            "RunPod answered with a malformed job id ({} characters, not 1-128 of A-Z a-z 0-9 _ -); it is never put in a URL",
            id.chars().count()
        ));
    }
    // The first id seen is the job's: a status answer cannot redirect the polls.
    info.job_id = info.job_id.take().or(job.id);
    info.status = job.status.as_deref().map(|s| clip(s, 64));
    info.delay_time = job.delay_time.or(info.delay_time);
    info.execution_time = job.execution_time.or(info.execution_time);
    let status = job.status.as_deref().unwrap_or("");
    match JobStatus::parse(status) {
        Some(JobStatus::Completed) => JobVerdict::Final(read_output(job.output)),
        Some(JobStatus::Failed) => JobVerdict::Final(Err(AttemptError::JobFailed(format!(
            "the RunPod job failed: {}",
            job_error(job.error.as_deref(), redactor)
        )))),
        Some(s @ (JobStatus::Cancelled | JobStatus::TimedOut)) => {
            JobVerdict::Final(Err(AttemptError::JobEnded(format!(
                "the RunPod job ended {}",
                if s == JobStatus::Cancelled {
                    "CANCELLED"
                } else {
                    "TIMED_OUT"
                }
            ))))
        }
        Some(JobStatus::InQueue | JobStatus::InProgress) => match info.job_id.clone() {
            Some(id) => JobVerdict::Pending(id),
            None => bad("RunPod returned a pending job without an id".into()),
        },
        None => bad(format!(
            "RunPod answered with an unknown job status {:?}",
            clip(status, 64)
        )),
    }
}

/// The status polls of one pending job.
struct Poller {
    method: Method,
    errors: u32,
}

enum Polled {
    /// A job answer to judge.
    Answer(HttpAnswer),
    /// Nothing new (the method changed, or a passing error): poll again.
    Again,
    /// The attempt ends with this error.
    Stop(AttemptError),
}

impl Poller {
    /// Waits one poll interval, then asks for the job's status.
    async fn poll(
        &mut self,
        ep: &Endpoint,
        id: &str,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Polled {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Polled::Stop(AttemptError::Interrupted),
            _ = tokio::time::sleep_until(deadline) => return Polled::Stop(AttemptError::WallClock),
            _ = tokio::time::sleep(ep.poll_interval()) => {}
        }
        let url = format!("{}/status/{id}", ep.base_url());
        let answer = until(
            deadline,
            cancel,
            ep.send_json(self.method.clone(), &url, None),
        )
        .await;
        match answer.result.clone() {
            Ok(()) => {
                self.errors = 0;
                Polled::Answer(answer)
            }
            Err(AttemptError::Status { status: 405, .. }) if self.method == Method::GET => {
                self.method = Method::POST;
                Polled::Again
            }
            Err(AttemptError::Status { status: 404, .. }) => Polled::Stop(AttemptError::JobFailed(
                format!("RunPod no longer knows job {id} (results expire soon after completion)"),
            )),
            Err(
                e @ (AttemptError::Interrupted
                | AttemptError::WallClock
                | AttemptError::TooLarge(_)),
            ) => Polled::Stop(e),
            Err(e) => {
                self.errors += 1;
                if self.errors >= MAX_POLL_ERRORS {
                    Polled::Stop(polls_failed(e, id))
                } else {
                    Polled::Again
                }
            }
        }
    }
}

/// Status polls that kept failing. An error status there is never a
/// setup fault (the job was accepted, so the key and the route were right):
/// the job is given up, retryable in a later run, like a job that ended.
fn polls_failed(e: AttemptError, id: &str) -> AttemptError {
    match e {
        AttemptError::Status {
            status, message, ..
        } => AttemptError::JobEnded(format!(
            "the status of RunPod job {id} could not be read (HTTP {status}: {message})"
        )),
        e => e,
    }
}

/// The chat response inside a completed job's `output`: an object, a
/// one-element list (some workers wrap it), or a JSON string — unwrapped a
/// few times at most, each time from its text (no tree is built).
fn read_output(
    output: Option<Box<RawValue>>,
) -> Result<harness_wire::chat::ChatResponse, AttemptError> {
    let bad = |m: &str| Err(AttemptError::BadBody(m.into()));
    let mut output = output.map(RawBody::from);
    for _ in 0..4 {
        let Some(body) = output.take() else {
            return bad("the RunPod job completed without output");
        };
        output = match body.get().as_bytes().first() {
            Some(b'n') => None,
            Some(b'[') => match body.parse::<Head>() {
                Ok(Head(Some(first))) => Some(RawBody::from(first)),
                _ => return parse_chat(Some(&body)),
            },
            Some(b'"') => match body.as_text().map(|s| RawBody::json(s.into_bytes())) {
                Some(Ok(inner)) => Some(inner),
                _ => return bad("the RunPod job's output is text, not a chat completion"),
            },
            _ => return parse_chat(Some(&body)),
        };
    }
    bad("the RunPod job's output is wrapped too many times")
}

/// The first item of a list, the rest parsed past.
struct Head(Option<Box<RawValue>>);

impl<'de> Deserialize<'de> for Head {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Head(lenient::first(d, 1)?.items.into_iter().next()))
    }
}

/// A failed job's `error`: often a JSON string holding `error_type` and
/// `error_message` (the traceback is left out); redacted, then cut.
fn job_error(error: Option<&RawValue>, redactor: &Redactor) -> String {
    #[derive(Deserialize)]
    struct Detail {
        #[serde(default, deserialize_with = "lenient::text")]
        error_type: Option<String>,
        #[serde(default, deserialize_with = "lenient::text")]
        error_message: Option<String>,
    }
    let detail = |text: &str| -> Option<String> {
        // Only an object: serde would read a list into the fields in order.
        let d: Detail = serde_json::from_str(text)
            .ok()
            .filter(|_| text.trim_start().starts_with('{'))?;
        let message = d.error_message?;
        Some(match d.error_type {
            Some(t) => format!("{message} ({t})"),
            None => message,
        })
    };
    let text = match error.map(RawValue::get) {
        None | Some("null") => "no error given".to_string(),
        Some(raw) => match serde_json::from_str::<String>(raw) {
            Ok(s) => detail(&s).unwrap_or(s),
            Err(_) => detail(raw)
                .unwrap_or_else(|| harness_base::text::prefix_bytes(raw, 64 * 1024).to_string()),
        },
    };
    redactor.line(&text, 500)
}

/// Asks RunPod to cancel a pending job. Best effort: the outcome is logged.
async fn cancel_job(ep: &Endpoint, id: &str) {
    let url = format!("{}/cancel/{id}", ep.base_url());
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        ep.post_json(&url, &json!({})),
    )
    .await;
    match answer {
        Ok(HttpAnswer {
            status: Some(s), ..
        }) => {
            tracing::info!(job = id, status = s, "cancelled the pending RunPod job")
        }
        _ => tracing::warn!(job = id, "could not cancel the pending RunPod job"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_jobs_json_string_error_is_decoded_without_the_traceback() {
        let fixture: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/llama-server/runpod_local_failed_job.json"
        ))
        .unwrap();
        let raw = |v: &Value| serde_json::value::to_raw_value(v).unwrap();
        let msg = job_error(
            fixture["response"].get("error").map(raw).as_deref(),
            &Redactor::default(),
        );
        assert!(
            msg.starts_with("500 Server Error: Internal Server Error for url"),
            "{msg}"
        );
        assert!(
            msg.ends_with("(<class 'requests.exceptions.HTTPError'>)"),
            "{msg}"
        );
        assert!(!msg.contains("Traceback"));
        assert_eq!(
            job_error(
                Some(&raw(&Value::from("Job ID not found"))),
                &Redactor::default()
            ),
            "Job ID not found"
        );
        assert_eq!(
            job_error(
                Some(&raw(&json!({"error_message": "out of memory"}))),
                &Redactor::default()
            ),
            "out of memory"
        );
        assert_eq!(
            job_error(Some(&raw(&json!([1, 2]))), &Redactor::default()),
            "[1,2]"
        );
        assert_eq!(
            job_error(Some(&raw(&Value::Null)), &Redactor::default()),
            "no error given"
        );
    }

    #[test]
    fn job_ids_that_could_climb_a_url_are_malformed() {
        for bad in [
            "",
            "../../x/purge-queue",
            "a/b",
            "a b",
            "%2e",
            &"x".repeat(129),
            "é",
        ] {
            assert!(!is_job_id(bad), "{bad:?}");
            let mut info = JobInfo::default();
            let job = json!({"id": bad, "status": "IN_QUEUE"});
            assert!(
                matches!(
                    judge(
                        Some(&RawBody::from_value(&job)),
                        &mut info,
                        &Redactor::default()
                    ),
                    JobVerdict::Final(Err(AttemptError::BadBody(_)))
                ),
                "{bad:?}"
            );
            assert_eq!(info.job_id, None, "never kept");
        }
        for good in ["sync-4b0c-e1", "test_123", &"x".repeat(128)] {
            assert!(is_job_id(good), "{good:?}");
        }
    }

    #[test]
    fn absurd_timings_are_read_as_absent_or_saturated() {
        let mut info = JobInfo::default();
        let job = json!({"id": "j", "status": "IN_QUEUE", "delayTime": -5, "executionTime": 1e30});
        assert!(matches!(
            judge(
                Some(&RawBody::from_value(&job)),
                &mut info,
                &Redactor::default()
            ),
            JobVerdict::Pending(_)
        ));
        assert_eq!(info.delay_time, None);
        assert_eq!(info.execution_time, Some(u64::MAX));
    }

    #[test]
    fn completed_output_may_be_wrapped() {
        let fixture: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/llama-server/runpod_local_completed_job.json"
        ))
        .unwrap();
        let output = fixture["response"]["output"].clone();
        let raw = |v: &Value| Some(serde_json::value::to_raw_value(v).unwrap());
        let direct = read_output(raw(&output)).unwrap();
        assert_eq!(direct.choices[0].finish_reason.as_deref(), Some("length"));
        assert_eq!(
            read_output(raw(&json!([output.clone(), {"ignored": true}]))).unwrap(),
            direct
        );
        assert_eq!(
            read_output(raw(&Value::String(output.to_string()))).unwrap(),
            direct
        );
        let thrice = Value::String(Value::String(json!([output.clone()]).to_string()).to_string());
        assert_eq!(read_output(raw(&thrice)).unwrap(), direct);
        let five = (0..5).fold(output.clone(), |v, _| json!([v]));
        assert!(read_output(raw(&five)).is_err(), "wrapped too often");
        assert!(read_output(None).is_err());
        assert!(read_output(raw(&Value::Null)).is_err());
        assert!(read_output(raw(&json!("plain words"))).is_err());
    }
}
