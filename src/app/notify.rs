//! Telling someone how a run ended (SPEC §22): `[notify] ping_url` speaks
//! the healthchecks.io ping protocol — `GET <url>/start` as a run starts,
//! `POST <url>` on exit 0, `POST <url>/<exit code>` otherwise, the run's
//! last status lines as the body — so a run that never comes (a timer
//! that stopped) is noticed by the dead-man's switch; `[notify]
//! on_failure_url` gets the run's result as JSON when it exits non-zero.
//! A notification never changes the run: each request has 5 s, at most two
//! retries, and a failure is a warning and a count in the metrics. Every
//! URL and body passes through the redactor.

use std::time::Duration;

use serde::Serialize;

use crate::config::{Config, NotifyConfig, Redactor};
use crate::drain::{RunEnd, RunOutcome};
use crate::records::Status;

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Retries after a failed request.
const RETRIES: u32 = 2;
/// The ping body's cap (healthchecks.io keeps 10 KB of a self-hosted ping).
const MAX_BODY_BYTES: usize = 10 * 1024;

/// The notifications of one run.
pub(super) struct Notifier {
    http: reqwest::Client,
    cfg: NotifyConfig,
    redactor: Redactor,
    /// Requests that failed for good.
    pub(super) failures: u64,
}

/// `on_failure_url`'s body.
#[derive(Debug, Serialize)]
struct FailureReport<'a> {
    exit_code: u8,
    started_at: chrono::DateTime<chrono::Utc>,
    duration_secs: f64,
    succeeded: usize,
    failed: usize,
    left_in_inbox: usize,
    setup_fault: Option<&'a str>,
    problems: &'a [String],
    failed_tasks: Vec<FailedTask<'a>>,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct FailedTask<'a> {
    task: &'a str,
    run_id: &'a str,
    status: Status,
    stop_reason: &'a str,
    error: Option<&'a str>,
}

impl Notifier {
    /// The notifier of `cfg`, when it names a URL.
    pub(super) fn new(cfg: &Config) -> Option<Notifier> {
        if cfg.notify.ping_url.is_none() && cfg.notify.on_failure_url.is_none() {
            return None;
        }
        let http = crate::base::http::client()
            .ok()?
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .user_agent(concat!("agent-harness/", env!("CARGO_PKG_VERSION")))
            .build()
            .ok()?;
        Some(Notifier {
            http,
            cfg: cfg.notify.clone(),
            redactor: cfg.redactor(),
            failures: 0,
        })
    }

    /// `GET <ping_url>/start`.
    pub(super) async fn start(&mut self) {
        if let Some(url) = self
            .cfg
            .ping_url
            .clone()
            .and_then(|u| with_segment(&u, "start"))
        {
            self.send(reqwest::Method::GET, &url, None, "text/plain")
                .await;
        }
    }

    /// A run that did nothing of its own (another run holds the lock): a
    /// `POST <ping_url>/log`, which leaves the check as the run holding the
    /// lock will leave it — so a run that hangs with the lock held is
    /// still noticed.
    pub(super) async fn log(&mut self, last_line: &str) {
        if let Some(url) = self
            .cfg
            .ping_url
            .clone()
            .and_then(|u| with_segment(&u, "log"))
        {
            let body = capped(&self.redactor.redact_str(last_line), MAX_BODY_BYTES);
            self.send(
                reqwest::Method::POST,
                &url,
                Some(body),
                "text/plain; charset=utf-8",
            )
            .await;
        }
    }

    /// The end of the run, exiting with `code`: the ping, and the failure
    /// report when the code is not 0.
    pub(super) async fn end(&mut self, code: u8, end: &RunEnd, last_line: &str) {
        if let Some(ping) = self.cfg.ping_url.clone() {
            let url = match code {
                0 => Some(ping),
                n => with_segment(&ping, &n.to_string()),
            };
            let body = capped(&self.redactor.redact_str(last_line), MAX_BODY_BYTES);
            if let Some(url) = url {
                self.send(
                    reqwest::Method::POST,
                    &url,
                    Some(body),
                    "text/plain; charset=utf-8",
                )
                .await;
            }
        }
        if code != 0
            && let Some(url) = self.cfg.on_failure_url.clone()
        {
            let report = failure_report(code, end);
            let body = serde_json::to_string(&report).unwrap_or_default();
            let body = self.redactor.redact(body);
            self.send(reqwest::Method::POST, &url, Some(body), "application/json")
                .await;
        }
    }

    /// One notification, tried at most three times; a failure is logged
    /// (the URL redacted) and counted, never more.
    async fn send(&mut self, method: reqwest::Method, url: &str, body: Option<String>, kind: &str) {
        let mut last = String::new();
        for attempt in 0..=RETRIES {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
            }
            let mut req = self
                .http
                .request(method.clone(), url)
                .header(reqwest::header::CONTENT_TYPE, kind);
            if let Some(b) = &body {
                req = req.body(b.clone());
            }
            match req.send().await {
                Ok(r) if r.status().is_success() => return,
                Ok(r) => last = format!("HTTP {}", r.status().as_u16()),
                Err(e) if e.is_timeout() => {
                    last = format!("no answer within {} s", TIMEOUT.as_secs())
                }
                Err(e) if e.is_connect() => last = "cannot connect".into(),
                Err(_) => last = "the request failed".into(),
            }
        }
        self.failures += 1;
        tracing::warn!(
            url = %self.redactor.redact_str(url),
            error = %self.redactor.redact_str(&last),
            "a notification failed ([notify]); the run's exit code stands"
        );
    }
}

/// `url` with one more path segment (`…/start`, `…/1`), its query kept.
fn with_segment(url: &str, segment: &str) -> Option<String> {
    let mut u = reqwest::Url::parse(url).ok()?;
    u.path_segments_mut().ok()?.pop_if_empty().push(segment);
    Some(u.to_string())
}

/// At most `max` bytes of `text`, cut at a character.
fn capped(text: &str, max: usize) -> String {
    crate::base::text::prefix_bytes(text, max).to_string()
}

fn failure_report(code: u8, end: &RunEnd) -> FailureReport<'_> {
    let tally = match &end.result {
        Ok(RunOutcome::Finished(t)) => Some(t),
        _ => None,
    };
    let failed_tasks = end
        .summaries
        .iter()
        .filter(|s| s.status != Status::Succeeded)
        .map(|s| FailedTask {
            task: &s.task,
            run_id: &s.run_id,
            status: s.status,
            stop_reason: s.stop_reason.as_str(),
            error: s.error.as_deref(),
        })
        .collect();
    FailureReport {
        exit_code: code,
        started_at: end.started,
        duration_secs: end.duration.as_secs_f64(),
        succeeded: tally.map_or(0, |t| t.succeeded),
        failed: tally.map_or(0, |t| t.failed),
        left_in_inbox: tally.map_or(0, |t| t.retry_later + t.interrupted + t.not_started),
        setup_fault: tally.and_then(|t| t.setup_fault.as_deref()),
        problems: tally.map_or(&[], |t| t.problems.as_slice()),
        failed_tasks,
        error: match &end.result {
            Err(e) => Some(format!("{e:#}")),
            Ok(RunOutcome::Unreachable(why)) => Some(format!("the endpoint is unreachable: {why}")),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_goes_before_the_query_and_never_doubles_a_slash() {
        assert_eq!(
            with_segment("https://hc-ping.com/abc", "start").as_deref(),
            Some("https://hc-ping.com/abc/start")
        );
        assert_eq!(
            with_segment("https://hc-ping.com/abc/?create=1", "75").as_deref(),
            Some("https://hc-ping.com/abc/75?create=1")
        );
        assert_eq!(capped("ééé", 3), "é");
    }
}
