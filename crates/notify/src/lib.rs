//! Telling someone how a run ended (docs/operating.md, "Notify"):
//! `[notify] ping_url` speaks the healthchecks.io ping protocol —
//! `GET <url>/start` once the run holds its lock, `POST <url>` on exit 0,
//! `POST <url>/<exit code>` otherwise, the run's last status lines as the body
//! — so a run that never comes (a timer that stopped) is noticed by the
//! dead-man's switch; `[notify] on_failure_url` gets the run's result (JSON,
//! text, or Slack's `{"text": …}`: `on_failure_format`) when it exits
//! non-zero. Through `[mail]` (docs/operating.md, "Digest and mail"), the
//! first run at or after `digest_at` each day mails the digest to
//! `digest_to` at its end, so it includes that run — the run decides and
//! takes the digest's mark while it still holds the lock
//! ([`Notifier::claim_digest`]) — and with `on_failure_mail` a run where a
//! task failed or the setup is wrong (exit 1 or 2) mails its result too.
//!
//! A notification never changes the run, and belongs to the operator, not
//! to the receiver: no redirect is followed and no `Referer` sent; logs
//! show a URL as scheme, host and port only. `/start` goes out beside the
//! first task, never before it (a second more at the end, then it is given
//! up); the end's notifications go at once, each counted off as it ends
//! ([`Notifier::deliver`]), and take at most 10 s together, at most 1 s
//! once a signal came. Each request has 5 s and at most two retries
//! ([`RETRY`]), a mail 10 s an attempt (`mail`); a failure is a warning and
//! a count in the metrics. Bodies are in the harness's own words (a task's
//! error as `Summary::error_in_own_words` says it, the model's text never
//! quoted; the digest quotes each answer's first line), each text redacted
//! before it is clipped or escaped (`bodies::Words`), and capped.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use harness_base::http::TransportFailure;
use harness_base::retry::{Attempted, RetryPolicy};
use harness_base::sync::lock;
use harness_config::{Config, Redactor};
use harness_drain::RunEnd;

mod bodies;
mod daily_digest;
mod mail;

use bodies::{Words, failure_body, failure_text, last_lines, whole_lines};
use daily_digest::Claim;
use mail::Mailer;

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// How a failed request retries: at most twice, after 0.25–0.5 s and
/// 0.5–1 s (longer when the receiver's `Retry-After` asks), none starting
/// later than [`END_WITHIN`] after the first.
const RETRY: RetryPolicy = RetryPolicy {
    base: Duration::from_millis(500),
    cap: Duration::from_secs(1),
    max_retries: 2,
};
/// What the end's notifications may take together.
const END_WITHIN: Duration = Duration::from_secs(10);
/// What `/start`, still unanswered when the run ends, may still take
/// (nothing once a signal came).
const START_GRACE: Duration = Duration::from_secs(1);
/// What they may take once a signal came.
const AFTER_SIGNAL: Duration = Duration::from_secs(1);
/// The ping body's cap (healthchecks.io keeps 10 KB of a self-hosted ping).
const MAX_PING_BYTES: usize = 10 * 1024;
/// The content type of a ping's body.
const PLAIN_TEXT: &str = "text/plain; charset=utf-8";

/// One notification on its way: [`Notifier::deliver`] sends them at once.
type Delivery<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// How the process exits, as `app` decides it: its code (the ping names
/// it), whether that is success, and whether it is a failure to report — a
/// task failed or the setup is wrong (`on_failure_mail`), not what a later
/// run retries by itself.
#[derive(Debug, Clone, Copy)]
pub struct Ending {
    pub code: u8,
    pub ok: bool,
    pub failed: bool,
}

/// The notifications of one run; clones share it.
#[derive(Clone)]
pub struct Notifier(Arc<Inner>);

struct Inner {
    http: reqwest::Client,
    cfg: Config,
    /// `[mail]`'s server, when `[notify] digest_to` names someone.
    mailer: Option<Mailer>,
    redactor: Redactor,
    /// Requests that failed for good (a cut one included).
    failures: AtomicU64,
    /// Requests started, and why the last one that failed did (for
    /// `status`, docs/operating.md, "The morning after").
    attempts: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// `/start`, sent beside the run's first task.
    start: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Whether this run sends the day's digest, decided under the lock.
    digest: Mutex<Claim>,
}

impl Notifier {
    /// The notifier of `cfg`, when it names a URL or someone to mail.
    pub fn new(cfg: &Config) -> Option<Notifier> {
        let mailer = cfg
            .mail
            .as_ref()
            .filter(|_| !cfg.notify.digest_to.is_empty())
            .map(|m| Mailer::new(m, &cfg.tls.trust));
        if cfg.notify.ping_url.is_none() && cfg.notify.on_failure_url.is_none() && mailer.is_none()
        {
            return None;
        }
        let http = harness_base::http::client(&cfg.tls.trust)
            .ok()?
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .referer(false)
            .build()
            .ok()?;
        Some(Notifier(Arc::new(Inner {
            http,
            cfg: cfg.clone(),
            mailer,
            redactor: cfg.redactor(),
            failures: AtomicU64::new(0),
            attempts: AtomicU64::new(0),
            last_error: Mutex::new(None),
            start: Mutex::new(None),
            digest: Mutex::new(Claim::Undecided),
        })))
    }

    /// Requests that failed for good so far.
    pub fn failures(&self) -> u64 {
        self.0.failures.load(Ordering::Relaxed)
    }

    /// Requests started so far.
    pub fn attempts(&self) -> u64 {
        self.0.attempts.load(Ordering::Relaxed)
    }

    /// Why the last request that failed did.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.0.last_error).clone()
    }

    /// `<ping_url>/<segment>`, when a ping URL is set.
    fn ping_at(&self, segment: &str) -> Option<String> {
        with_segment(self.0.cfg.notify.ping_url.as_deref()?, segment)
    }

    /// `n` requests failed for good, the last for `why`.
    fn failed(&self, n: u64, why: String) {
        self.0.failures.fetch_add(n, Ordering::Relaxed);
        *lock(&self.0.last_error) = Some(why);
    }

    /// `GET <ping_url>/start`, in the background: the run holds its lock
    /// and its first task goes on meanwhile.
    pub fn start(&self) {
        let Some(url) = self.ping_at("start") else {
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
    pub async fn log(&self, end: &RunEnd, cancel: &CancellationToken) {
        let Some(url) = self.ping_at("log") else {
            return;
        };
        let ping = self.post(url, self.ping_body(end), PLAIN_TEXT);
        self.deliver(vec![Box::pin(ping)], cancel).await;
    }

    /// The end of the run, exiting with `code` at `now`: the ping, the
    /// failure report and mail when the code says so, and the day's
    /// digest when this run took its mark — at the same time, within
    /// [`END_WITHIN`] ([`AFTER_SIGNAL`] once `cancel` fired). A digest that
    /// did not go out gives its mark back.
    pub async fn end(
        &self,
        ending: Ending,
        end: &RunEnd,
        now: DateTime<Utc>,
        cancel: &CancellationToken,
    ) {
        let code = ending.code;
        let start = lock(&self.0.start).take();
        self.settle_start(start, cancel).await;
        let notify = &self.0.cfg.notify;
        let words = Words(&self.0.redactor);
        let turn = self.digest_turn(now);
        let digest_sent = AtomicBool::new(false);
        let mut deliveries: Vec<Delivery<'_>> = Vec::new();
        if let Some(url) = notify.ping_url.as_deref().and_then(|u| ping_url(u, ending)) {
            deliveries.push(Box::pin(self.post(url, self.ping_body(end), PLAIN_TEXT)));
        }
        if let Some(url) = notify.on_failure_url.clone().filter(|_| !ending.ok) {
            let (body, kind) = failure_body(notify.on_failure_format, code, end, words);
            deliveries.push(Box::pin(self.post(url, body, kind)));
        }
        if self.failure_mailed(ending) {
            let subject = format!("agent-harness: a run failed (exit {code})");
            let body = failure_text(code, end, words);
            deliveries.push(Box::pin(async move {
                self.mail(&subject, &body).await;
            }));
        }
        if let Some(turn) = turn {
            let digest_sent = &digest_sent;
            deliveries.push(Box::pin(async move {
                if self.send_digest(turn, code, end).await {
                    digest_sent.store(true, Ordering::Relaxed);
                }
            }));
        }
        self.deliver(deliveries, cancel).await;
        if let Some(turn) = turn
            && !digest_sent.load(Ordering::Relaxed)
        {
            self.give_back(turn);
        }
    }

    /// Whether a run that ends so mails its result: with
    /// `on_failure_mail`, when it is a failure to report.
    fn failure_mailed(&self, ending: Ending) -> bool {
        self.0.cfg.notify.on_failure_mail && self.0.mailer.is_some() && ending.failed
    }

    /// `deliveries` at once, each counted off as it ends, for at most
    /// [`END_WITHIN`], or [`AFTER_SIGNAL`] after `cancel` fired; each one
    /// not finished by then failed (a warning and a count).
    async fn deliver(&self, deliveries: Vec<Delivery<'_>>, cancel: &CancellationToken) {
        let left = AtomicUsize::new(deliveries.len());
        let counted = deliveries.into_iter().map(|delivery| {
            let left = &left;
            async move {
                delivery.await;
                left.fetch_sub(1, Ordering::Relaxed);
            }
        });
        let all = async {
            futures::future::join_all(counted).await;
        };
        self.within(all, &left, cancel).await;
    }

    /// `/start` before the end, as the protocol wants, but it never costs
    /// the end's own notifications more than [`START_GRACE`]: then it
    /// failed.
    async fn settle_start(
        &self,
        start: Option<tokio::task::JoinHandle<()>>,
        cancel: &CancellationToken,
    ) {
        let Some(mut start) = start else {
            return;
        };
        let done = tokio::select! {
            _ = &mut start => true,
            () = tokio::time::sleep(START_GRACE) => false,
            () = cancel.cancelled() => start.is_finished(),
        };
        if !done {
            start.abort();
            self.failed(1, "/start had no answer when the run ended".into());
            tracing::warn!(
                "a notification failed ([notify]): /start had no answer when the run ended; the run's exit code stands"
            );
        }
    }

    /// `body` mailed to `[notify] digest_to` with `subject` (both made of
    /// redacted words already, and redacted once more whole); a failure is
    /// logged and counted. Whether it went.
    async fn mail(&self, subject: &str, body: &str) -> bool {
        let Some(mailer) = &self.0.mailer else {
            return false;
        };
        let redactor = &self.0.redactor;
        self.0.attempts.fetch_add(1, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + END_WITHIN;
        let sent = mailer
            .send(
                &self.0.cfg.notify.digest_to,
                &redactor.redact_str(subject),
                &redactor.redact_str(body),
                deadline,
            )
            .await;
        match sent {
            Ok(()) => true,
            Err(why) => {
                self.failed(1, format!("mail through {}: {why}", mailer.shown()));
                tracing::warn!(
                    server = %mailer.shown(),
                    error = %why,
                    "a mail failed ([mail]); the run's exit code stands"
                );
                false
            }
        }
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
            self.failed(
                unsent as u64,
                format!("cut after {:.0} s", limit.as_secs_f64()),
            );
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

    /// A `POST` of `body` to `url`.
    async fn post(&self, url: String, body: String, kind: &str) {
        self.send(reqwest::Method::POST, &url, Some(body), kind)
            .await;
    }

    /// One notification, retried on [`RETRY`]; a failure is logged (the
    /// URL as scheme, host and port) and counted, never more.
    async fn send(&self, method: reqwest::Method, url: &str, body: Option<String>, kind: &str) {
        let request = || {
            let req = self.0.http.request(method.clone(), url);
            let req = req.header(reqwest::header::CONTENT_TYPE, kind);
            match &body {
                Some(b) => req.body(b.clone()),
                None => req,
            }
        };
        self.0.attempts.fetch_add(1, Ordering::Relaxed);
        let backoff = RETRY.start(tokio::time::Instant::now() + END_WITHIN);
        let Err(last) = backoff.run(|| attempt(request())).await else {
            return;
        };
        self.failed(1, format!("{}: {last}", shown(url)));
        tracing::warn!(
            url = %shown(url),
            error = %last,
            "a notification failed ([notify]); the run's exit code stands"
        );
    }

    /// The ping's body: the run's last lines (redacted), whole lines
    /// within [`MAX_PING_BYTES`].
    fn ping_body(&self, end: &RunEnd) -> String {
        whole_lines(&last_lines(end, Words(&self.0.redactor)), MAX_PING_BYTES)
    }
}

/// Where the end's ping goes: `<url>` on success, `<url>/<exit code>` else.
fn ping_url(url: &str, ending: Ending) -> Option<String> {
    match ending.ok {
        true => Some(url.to_string()),
        false => with_segment(url, &ending.code.to_string()),
    }
}

/// One attempt of a notification: a redirect is not tried again.
async fn attempt(req: reqwest::RequestBuilder) -> Attempted<(), String> {
    match req.send().await {
        Ok(r) if r.status().is_success() => Attempted::Done(Ok(())),
        Ok(r) if r.status().is_redirection() => {
            // Not followed: the receiver does not choose where the run's
            // status goes. Its host only, never its path.
            let to = r
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| r.url().join(l).ok())
                .and_then(|l| l.host_str().map(str::to_string))
                .unwrap_or_else(|| "nowhere readable".into());
            Attempted::Done(Err(format!(
                "HTTP {}, a redirect to {} (not followed)",
                r.status().as_u16(),
                harness_base::text::printable(&harness_base::text::clip(&to, 100))
            )))
        }
        Ok(r) => Attempted::Again(
            format!("HTTP {}", r.status().as_u16()),
            harness_base::http::retry_after(r.headers()),
        ),
        Err(e) => Attempted::Again(TransportFailure::of(&e, None).to_string(), None),
    }
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
    fn a_long_body_keeps_whole_lines_and_counts_the_rest() {
        let text: Vec<String> = (0..100)
            .map(|i| format!("{i:03} {}", "x".repeat(96)))
            .collect();
        let text = text.join("\n");
        let body = whole_lines(&text, 1024);
        assert!(body.len() <= 1024, "{}", body.len());
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(lines.len(), 10, "{body}");
        assert!(lines[..9].iter().all(|l| l.len() == 100));
        assert_eq!(lines[9], "and 91 more line(s)");
        assert_eq!(whole_lines("short\nbody", 1024), "short\nbody");
        let one = "y".repeat(5000);
        let body = whole_lines(&one, 1024);
        assert!(
            body.len() <= 1024 && body.ends_with("and 0 more line(s)"),
            "{body}"
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
