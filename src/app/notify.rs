//! Telling someone how a run ended (SPEC §22, §25): `[notify] ping_url`
//! speaks the healthchecks.io ping protocol — `GET <url>/start` once the
//! run holds its lock, `POST <url>` on exit 0, `POST <url>/<exit code>`
//! otherwise, the run's last status lines as the body — so a run that
//! never comes (a timer that stopped) is noticed by the dead-man's switch;
//! `[notify] on_failure_url` gets the run's result as JSON when it exits
//! non-zero.
//!
//! A notification never changes the run, and belongs to the operator, not
//! to the receiver: no redirect is followed and no `Referer` sent; logs
//! show a URL as scheme, host and port only. `/start` goes out beside the
//! first task, never before it (a second more at the end, then it is given
//! up); the end's notifications take at most 10 s together, at most 1 s
//! once a signal came. Each request has 5 s and at
//! most two retries within that; a failure is a warning and a count in the
//! metrics. Bodies are in the harness's own words (a task's error clipped,
//! the model's text never quoted), capped, and pass through the redactor.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::agent::StopReason;
use crate::config::{Config, NotifyConfig, Redactor};
use crate::drain::{RunEnd, RunOutcome};
use crate::records::{Status, Summary};

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Retries after a failed request.
const RETRIES: u32 = 2;
/// What the end's notifications may take together.
const END_WITHIN: Duration = Duration::from_secs(10);
/// What `/start`, still unanswered when the run ends, may still take
/// (nothing once a signal came).
const START_GRACE: Duration = Duration::from_secs(1);
/// What they may take once a signal came.
const AFTER_SIGNAL: Duration = Duration::from_secs(1);
/// The ping body's cap (healthchecks.io keeps 10 KB of a self-hosted ping).
const MAX_PING_BYTES: usize = 10 * 1024;
/// `on_failure_url`'s body's cap.
const MAX_REPORT_BYTES: usize = 64 * 1024;
/// Tasks (and problems) a body names; the rest are counted.
const MAX_NAMED: usize = 50;
/// Characters of a task's error or a problem a body carries.
const MAX_ERROR_CHARS: usize = 300;

/// The notifications of one run; clones share it.
#[derive(Clone)]
pub(super) struct Notifier(Arc<Inner>);

struct Inner {
    http: reqwest::Client,
    cfg: NotifyConfig,
    redactor: Redactor,
    /// Requests that failed for good (a cut one included).
    failures: AtomicU64,
    /// `/start`, sent beside the run's first task.
    start: Mutex<Option<tokio::task::JoinHandle<()>>>,
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
    setup_fault: Option<String>,
    problems: Vec<String>,
    /// Problems past the first 50.
    more_problems: usize,
    failed_tasks: Vec<FailedTask<'a>>,
    /// Tasks that did not succeed past the first 50.
    more_failed_tasks: usize,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct FailedTask<'a> {
    task: &'a str,
    run_id: &'a str,
    status: Status,
    stop_reason: &'a str,
    error: Option<String>,
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
            .redirect(reqwest::redirect::Policy::none())
            .referer(false)
            .user_agent(concat!("agent-harness/", env!("CARGO_PKG_VERSION")))
            .build()
            .ok()?;
        Some(Notifier(Arc::new(Inner {
            http,
            cfg: cfg.notify.clone(),
            redactor: cfg.redactor(),
            failures: AtomicU64::new(0),
            start: Mutex::new(None),
        })))
    }

    /// Requests that failed for good so far.
    pub(super) fn failures(&self) -> u64 {
        self.0.failures.load(Ordering::Relaxed)
    }

    /// `GET <ping_url>/start`, in the background: the run holds its lock
    /// and its first task goes on meanwhile.
    pub(super) fn start(&self) {
        let Some(url) = self
            .0
            .cfg
            .ping_url
            .as_deref()
            .and_then(|u| with_segment(u, "start"))
        else {
            return;
        };
        let me = self.clone();
        let task = tokio::spawn(async move {
            me.send(reqwest::Method::GET, &url, None, "text/plain")
                .await;
        });
        *lock(&self.0.start) = Some(task);
    }

    /// A run that did nothing of its own (another run holds the lock): a
    /// `POST <ping_url>/log`, which leaves the check as the run holding the
    /// lock will leave it — so a run that hangs with the lock held is
    /// still noticed.
    pub(super) async fn log(&self, last_line: &str, cancel: &CancellationToken) {
        let Some(url) = self
            .0
            .cfg
            .ping_url
            .as_deref()
            .and_then(|u| with_segment(u, "log"))
        else {
            return;
        };
        let body = self.ping_body(last_line);
        let left = AtomicUsize::new(1);
        let work = self.counted(
            &left,
            reqwest::Method::POST,
            url,
            body,
            "text/plain; charset=utf-8",
        );
        self.within(work, &left, cancel).await;
    }

    /// The end of the run, exiting with `code`: the ping, and the failure
    /// report when the code is not 0, at the same time and within
    /// [`END_WITHIN`] ([`AFTER_SIGNAL`] once `cancel` fired).
    pub(super) async fn end(
        &self,
        code: u8,
        end: &RunEnd,
        last_line: &str,
        cancel: &CancellationToken,
    ) {
        let start = lock(&self.0.start).take();
        let ping = self.0.cfg.ping_url.as_deref().and_then(|u| match code {
            0 => Some(u.to_string()),
            n => with_segment(u, &n.to_string()),
        });
        let report = self.0.cfg.on_failure_url.clone().filter(|_| code != 0);
        let left = AtomicUsize::new(usize::from(ping.is_some()) + usize::from(report.is_some()));
        // `/start` before the end, as the protocol wants, but it never
        // costs the end's own notifications more than a second.
        let grace = if cancel.is_cancelled() {
            Duration::ZERO
        } else {
            START_GRACE
        };
        if let Some(mut start) = start
            && tokio::time::timeout(grace, &mut start).await.is_err()
        {
            start.abort();
            self.0.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "a notification failed ([notify]): /start had no answer when the run ended; the run's exit code stands"
            );
        }
        let work = async {
            let ping = async {
                if let Some(url) = ping {
                    let body = self.ping_body(last_line);
                    self.counted(
                        &left,
                        reqwest::Method::POST,
                        url,
                        body,
                        "text/plain; charset=utf-8",
                    )
                    .await;
                }
            };
            let report = async {
                if let Some(url) = report {
                    let body = self.0.redactor.redact(failure_report(code, end));
                    self.counted(&left, reqwest::Method::POST, url, body, "application/json")
                        .await;
                }
            };
            futures::join!(ping, report);
        };
        self.within(work, &left, cancel).await;
    }

    /// Runs `work` (notifications, `left` of them not finished) for at most
    /// [`END_WITHIN`], or [`AFTER_SIGNAL`] after `cancel` fired; what it
    /// did not finish by then failed.
    async fn within(
        &self,
        work: impl Future<Output = ()>,
        left: &AtomicUsize,
        cancel: &CancellationToken,
    ) {
        let after_signal = async {
            cancel.cancelled().await;
            tokio::time::sleep(AFTER_SIGNAL).await;
        };
        let cut = tokio::select! {
            () = work => None,
            () = tokio::time::sleep(END_WITHIN) => Some(END_WITHIN),
            () = after_signal => Some(AFTER_SIGNAL),
        };
        let unsent = left.load(Ordering::Relaxed);
        if let Some(limit) = cut
            && unsent > 0
        {
            self.0.failures.fetch_add(unsent as u64, Ordering::Relaxed);
            tracing::warn!(
                notifications = unsent,
                "notifications cut after {:.0} s ([notify]){}; the run's exit code stands",
                limit.as_secs_f64(),
                if limit == AFTER_SIGNAL {
                    ", a signal came"
                } else {
                    ""
                }
            );
        }
    }

    /// One notification of `left`, which counts it off when it is done.
    async fn counted(
        &self,
        left: &AtomicUsize,
        method: reqwest::Method,
        url: String,
        body: String,
        kind: &str,
    ) {
        self.send(method, &url, Some(body), kind).await;
        left.fetch_sub(1, Ordering::Relaxed);
    }

    /// One notification, tried at most three times; a failure is logged
    /// (the URL as scheme, host and port) and counted, never more.
    async fn send(&self, method: reqwest::Method, url: &str, body: Option<String>, kind: &str) {
        let mut last = String::new();
        for attempt in 0..=RETRIES {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
            }
            let mut req = self
                .0
                .http
                .request(method.clone(), url)
                .header(reqwest::header::CONTENT_TYPE, kind);
            if let Some(b) = &body {
                req = req.body(b.clone());
            }
            match req.send().await {
                Ok(r) if r.status().is_success() => return,
                Ok(r) if r.status().is_redirection() => {
                    // Not followed: the receiver does not choose where the
                    // run's status goes. Its host only, never its path.
                    let to = r
                        .headers()
                        .get(reqwest::header::LOCATION)
                        .and_then(|l| l.to_str().ok())
                        .and_then(|l| r.url().join(l).ok())
                        .and_then(|l| l.host_str().map(str::to_string))
                        .unwrap_or_else(|| "nowhere readable".into());
                    last = format!(
                        "HTTP {}, a redirect to {} (not followed)",
                        r.status().as_u16(),
                        crate::base::text::printable(&crate::base::text::clip(&to, 100))
                    );
                    break;
                }
                Ok(r) => last = format!("HTTP {}", r.status().as_u16()),
                Err(e) if e.is_timeout() => {
                    last = format!("no answer within {} s", TIMEOUT.as_secs())
                }
                Err(e) if e.is_connect() => last = "cannot connect".into(),
                Err(_) => last = "the request failed".into(),
            }
        }
        self.0.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            url = %shown(url),
            error = %last,
            "a notification failed ([notify]); the run's exit code stands"
        );
    }

    fn ping_body(&self, last_line: &str) -> String {
        let body = self.0.redactor.redact_str(last_line);
        crate::base::text::prefix_bytes(&body, MAX_PING_BYTES).to_string()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `url` as logs show it: scheme, host and port — never a user, a
/// password, a path or a query, where receivers keep their secrets.
fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!(
            "{}://{}{}",
            u.scheme(),
            u.host_str().unwrap_or(""),
            u.port().map(|p| format!(":{p}")).unwrap_or_default()
        ),
        Err(_) => "(not a URL)".into(),
    }
}

/// `url` with one more path segment (`…/start`, `…/1`), its query kept.
fn with_segment(url: &str, segment: &str) -> Option<String> {
    let mut u = reqwest::Url::parse(url).ok()?;
    u.path_segments_mut().ok()?.pop_if_empty().push(segment);
    Some(u.to_string())
}

/// A task's error in the harness's own words: where it would quote the
/// model (a value off the schema, a repeated block or call, a missed
/// expectation), what happened instead; otherwise the error, one line,
/// clipped.
fn own_words(s: &Summary) -> Option<String> {
    let instead = match s.stop_reason {
        StopReason::InvalidAnswer => "the answer did not match the output schema",
        StopReason::Repetition => "a reply repeated one block until max_tokens",
        StopReason::LoopDetected => "the model kept repeating the same call",
        StopReason::ExpectationFailed => "the answer missed its [expect] checks",
        _ => return s.error.as_deref().map(one_line),
    };
    Some(format!("{instead} (its summary.json says more)"))
}

/// `text` on one line, control characters escaped, at most
/// [`MAX_ERROR_CHARS`] characters.
fn one_line(text: &str) -> String {
    crate::base::text::clip(&crate::base::text::printable(text), MAX_ERROR_CHARS)
}

/// The tasks that did not succeed, the first [`MAX_NAMED`] of them, and
/// how many more.
fn not_succeeded(end: &RunEnd) -> (Vec<&Summary>, usize) {
    let all: Vec<&Summary> = end
        .summaries
        .iter()
        .filter(|s| s.status != Status::Succeeded)
        .collect();
    let more = all.len().saturating_sub(MAX_NAMED);
    (all.into_iter().take(MAX_NAMED).collect(), more)
}

/// What a run's end says, for a ping's body: its last line, then a line
/// for each task that did not succeed (50 at most, then how many more).
pub(super) fn last_lines(end: &RunEnd) -> String {
    let mut lines = vec![match &end.result {
        Ok(RunOutcome::Finished(tally)) => tally.describe(end.duration),
        Ok(RunOutcome::Locked { .. }) => "another run holds the lock; nothing to do".into(),
        Ok(RunOutcome::Unreachable(why)) => {
            format!("the endpoint is unreachable, no task was touched: {why}")
        }
        Err(e) => format!("{e:#}"),
    }];
    let (named, more) = not_succeeded(end);
    for s in named {
        lines.push(format!(
            "{}: {} ({}): {}",
            s.task,
            s.status.as_str(),
            s.stop_reason.as_str(),
            own_words(s).unwrap_or_else(|| "-".into())
        ));
    }
    if more > 0 {
        lines.push(format!("and {more} more"));
    }
    lines.join("\n")
}

/// `on_failure_url`'s body as JSON, at most [`MAX_REPORT_BYTES`].
fn failure_report(code: u8, end: &RunEnd) -> String {
    let tally = match &end.result {
        Ok(RunOutcome::Finished(t)) => Some(t),
        _ => None,
    };
    let (named, more_failed_tasks) = not_succeeded(end);
    let problems = tally.map_or(&[][..], |t| t.problems.as_slice());
    let mut report = FailureReport {
        exit_code: code,
        started_at: end.started,
        duration_secs: end.duration.as_secs_f64(),
        succeeded: tally.map_or(0, |t| t.succeeded),
        failed: tally.map_or(0, |t| t.failed),
        left_in_inbox: tally.map_or(0, |t| t.retry_later + t.interrupted + t.not_started),
        setup_fault: tally.and_then(|t| t.setup_fault.as_deref()).map(one_line),
        problems: problems
            .iter()
            .take(MAX_NAMED)
            .map(|p| one_line(p))
            .collect(),
        more_problems: problems.len().saturating_sub(MAX_NAMED),
        failed_tasks: named
            .into_iter()
            .map(|s| FailedTask {
                task: &s.task,
                run_id: &s.run_id,
                status: s.status,
                stop_reason: s.stop_reason.as_str(),
                error: own_words(s),
            })
            .collect(),
        more_failed_tasks,
        error: match &end.result {
            Err(e) => Some(one_line(&format!("{e:#}"))),
            Ok(RunOutcome::Unreachable(why)) => {
                Some(one_line(&format!("the endpoint is unreachable: {why}")))
            }
            _ => None,
        },
    };
    loop {
        let body = serde_json::to_string(&report).unwrap_or_default();
        if body.len() <= MAX_REPORT_BYTES
            || (report.failed_tasks.is_empty() && report.problems.is_empty())
        {
            return body;
        }
        // Names that long (255 bytes each) are an attack: fewer of them.
        let keep = report.failed_tasks.len() / 2;
        report.more_failed_tasks += report.failed_tasks.len() - keep;
        report.failed_tasks.truncate(keep);
        let keep = report.problems.len() / 2;
        report.more_problems += report.problems.len() - keep;
        report.problems.truncate(keep);
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
    }

    #[test]
    fn a_url_is_shown_as_scheme_host_and_port_only() {
        assert_eq!(
            shown(
                "http://ghp_TOKENUSERNAME42:x-oauth-basic@127.0.0.1:19009/p/short?sig=SIG&code=C"
            ),
            "http://127.0.0.1:19009"
        );
        assert_eq!(
            shown("https://hc-ping.com/0d338dcc-a054/start"),
            "https://hc-ping.com"
        );
        assert_eq!(shown("not a url"), "(not a URL)");
    }
}
