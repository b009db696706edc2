//! The RunPod serverless envelope (SPEC §6): the chat request goes out as
//! `{"input": <request>}` to `/runsync`; the answer is a job. `COMPLETED`
//! carries the chat response in `output`; `IN_QUEUE` / `IN_PROGRESS` means
//! the sync wait ran out, so the job is polled at `/status/{id}` (GET, or
//! POST after a 405 — the `runpod` package's local server only takes POST)
//! until it is final. A job still pending when the task's wall clock runs
//! out, or when the run is interrupted, is cancelled at `/cancel/{id}`.

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{AttemptError, Endpoint, JobInfo, RawAttempt, parse_chat};
use crate::tools::text::clip;

/// Consecutive failed status polls before the attempt is given up (and retried).
const MAX_POLL_ERRORS: u32 = 5;

/// A job as `/runsync` and `/status` return it. Fields may be missing.
#[derive(Debug, Default, Deserialize)]
struct Job {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    output: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default, rename = "delayTime")]
    delay_time: Option<u64>,
    #[serde(default, rename = "executionTime")]
    execution_time: Option<u64>,
}

/// One `/runsync` call with its polling; `request` is the `{"input": …}` envelope.
pub(crate) async fn attempt(
    ep: &Endpoint,
    request: &Value,
    deadline: Instant,
    cancel: &CancellationToken,
) -> RawAttempt {
    let url = format!("{}/runsync", ep.base_url());
    let (mut http_status, mut raw, result) = tokio::select! {
        biased;
        _ = cancel.cancelled() => (None, None, Err(AttemptError::Interrupted)),
        _ = tokio::time::sleep_until(deadline) => (None, None, Err(AttemptError::WallClock)),
        answer = ep.post_json(&url, request) => answer,
    };
    let done = |http_status, raw, job, result| RawAttempt {
        http_status,
        response: raw,
        job,
        result,
    };
    let mut value = match result {
        Ok(v) => v,
        Err(e) => return done(http_status, raw, None, Err(e)),
    };
    let mut info = JobInfo::default();
    let mut poll_method = Method::GET;
    let mut poll_errors = 0;
    loop {
        let job = Job::deserialize(&value).unwrap_or_default();
        info.job_id = job.id.clone().or(info.job_id.take());
        info.status = job.status.clone();
        info.delay_time = job.delay_time.or(info.delay_time);
        info.execution_time = job.execution_time.or(info.execution_time);
        let status = job.status.as_deref().unwrap_or("");
        let result = match status {
            "COMPLETED" => Some(read_output(job.output)),
            "FAILED" => Some(Err(AttemptError::JobFailed(format!(
                "the RunPod job failed: {}",
                job_error(job.error.as_ref())
            )))),
            "CANCELLED" | "TIMED_OUT" => Some(Err(AttemptError::JobEnded(format!(
                "the RunPod job ended {status}"
            )))),
            "IN_QUEUE" | "IN_PROGRESS" | "RUNNING" => None,
            other => Some(Err(AttemptError::BadBody(format!(
                "RunPod answered with an unknown job status {other:?}"
            )))),
        };
        if let Some(result) = result {
            return done(http_status, raw, Some(info), result);
        }
        let Some(id) = info.job_id.clone() else {
            return done(
                http_status,
                raw,
                Some(info),
                Err(AttemptError::BadBody(
                    "RunPod returned a pending job without an id".into(),
                )),
            );
        };

        // Pending: wait one poll interval, then ask for the job's status.
        let stop = tokio::select! {
            biased;
            _ = cancel.cancelled() => Some(AttemptError::Interrupted),
            _ = tokio::time::sleep_until(deadline) => Some(AttemptError::WallClock),
            _ = tokio::time::sleep(ep.poll_interval()) => None,
        };
        if let Some(e) = stop {
            cancel_job(ep, &id).await;
            return done(http_status, raw, Some(info), Err(e));
        }
        let status_url = format!("{}/status/{id}", ep.base_url());
        let (s, r, result) = tokio::select! {
            biased;
            _ = cancel.cancelled() => (None, None, Err(AttemptError::Interrupted)),
            _ = tokio::time::sleep_until(deadline) => (None, None, Err(AttemptError::WallClock)),
            answer = ep.send_json(poll_method.clone(), &status_url, None) => answer,
        };
        info.polls += 1;
        match result {
            Ok(v) => {
                poll_errors = 0;
                (http_status, raw, value) = (s, r, v);
            }
            Err(AttemptError::Status { status: 405, .. }) if poll_method == Method::GET => {
                poll_method = Method::POST
            }
            Err(e @ (AttemptError::Interrupted | AttemptError::WallClock)) => {
                cancel_job(ep, &id).await;
                return done(s, r, Some(info), Err(e));
            }
            Err(AttemptError::Status { status: 404, .. }) => {
                return done(
                    s,
                    r,
                    Some(info),
                    Err(AttemptError::JobFailed(format!(
                        "RunPod no longer knows job {id} (results expire soon after completion)"
                    ))),
                );
            }
            Err(e) => {
                poll_errors += 1;
                if poll_errors >= MAX_POLL_ERRORS {
                    return done(s, r, Some(info), Err(e));
                }
            }
        }
    }
}

/// The chat response inside a completed job's `output`: an object, a
/// one-element list (some workers wrap it), or a JSON string.
fn read_output(output: Option<Value>) -> Result<crate::chat::ChatResponse, AttemptError> {
    match output {
        Some(Value::Array(mut items)) if !items.is_empty() => {
            read_output(Some(items.swap_remove(0)))
        }
        Some(Value::String(s)) => match serde_json::from_str::<Value>(&s) {
            Ok(v) => parse_chat(&v),
            Err(_) => Err(AttemptError::BadBody(
                "the RunPod job's output is text, not a chat completion".into(),
            )),
        },
        Some(v) => parse_chat(&v),
        None => Err(AttemptError::BadBody(
            "the RunPod job completed without output".into(),
        )),
    }
}

/// A failed job's `error`: often a JSON string holding `error_type` and
/// `error_message` (the traceback is left out).
fn job_error(error: Option<&Value>) -> String {
    #[derive(Deserialize)]
    struct Detail {
        #[serde(default)]
        error_type: Option<String>,
        #[serde(default)]
        error_message: Option<String>,
    }
    let detail = |v: &Value| -> Option<String> {
        let d: Detail = serde_json::from_value(v.clone()).ok()?;
        let message = d.error_message?;
        Some(match d.error_type {
            Some(t) => format!("{message} ({t})"),
            None => message,
        })
    };
    let text = match error {
        None | Some(Value::Null) => "no error given".to_string(),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .ok()
            .as_ref()
            .and_then(detail)
            .unwrap_or_else(|| s.clone()),
        Some(v) => detail(v).unwrap_or_else(|| v.to_string()),
    };
    clip(&text, 500)
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
        Ok((Some(s), _, _)) => {
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
            "../../tests/fixtures/llama-server/runpod_local_failed_job.json"
        ))
        .unwrap();
        let msg = job_error(fixture["response"].get("error"));
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
            job_error(Some(&Value::from("Job ID not found"))),
            "Job ID not found"
        );
    }

    #[test]
    fn completed_output_may_be_wrapped() {
        let fixture: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/llama-server/runpod_local_completed_job.json"
        ))
        .unwrap();
        let output = fixture["response"]["output"].clone();
        let direct = read_output(Some(output.clone())).unwrap();
        assert_eq!(direct.choices[0].finish_reason.as_deref(), Some("length"));
        assert_eq!(
            read_output(Some(Value::Array(vec![output.clone()]))).unwrap(),
            direct
        );
        assert_eq!(
            read_output(Some(Value::String(output.to_string()))).unwrap(),
            direct
        );
        assert!(read_output(None).is_err());
    }
}
