//! Sending: one task on the runtime takes each task's encoded trace from a
//! queue, joins what waits into one request (up to [`MAX_REQUEST_BYTES`])
//! and POSTs it to `[traces] endpoint`. A request has `flush_secs`; a
//! collector that refuses, fails or is not one loses that batch, which is
//! counted and warned about, never retried, never waited for past the
//! flush at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::otlp;
use harness_base::http::{Body, TransportFailure, TransportKind, Trust, read_capped};
use harness_config::TracesConfig;

/// One request's body at most (OTLP collectors take 4 MiB and more).
pub(crate) const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// Encoded traces waiting at most; a trace past it is dropped and counted.
pub(crate) const MAX_QUEUED_BYTES: usize = 16 * 1024 * 1024;
/// A collector's answer read at most.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What the exporter is given.
pub(super) enum Msg {
    /// One task's trace, encoded.
    Trace(Vec<u8>),
    /// Answer when everything before this is sent.
    Flush(oneshot::Sender<()>),
}

/// What the sender and the handle share.
#[derive(Debug, Default)]
pub(super) struct Counts {
    /// Bytes queued and not yet taken.
    pub(super) queued: AtomicUsize,
    /// Traces queued and not yet settled (sent or lost).
    pub(super) pending: AtomicU64,
    /// Traces that did not reach the collector.
    pub(super) lost: AtomicU64,
    /// Failed requests, to warn about the first only.
    pub(super) failed_requests: AtomicU64,
    /// Traces dropped because too many waited, to warn about the first only.
    pub(super) dropped: AtomicU64,
}

impl Counts {
    /// `traces` are settled: sent, or given up.
    pub(super) fn settle(&self, traces: u64) {
        let _ = self
            .pending
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| {
                Some(p.saturating_sub(traces))
            });
    }

    /// `traces` are settled without reaching the collector.
    pub(super) fn lose(&self, traces: u64) {
        self.lost.fetch_add(traces, Ordering::Relaxed);
        self.settle(traces);
    }
}

/// The sending half, run as one task.
pub(super) struct Sender {
    pub(super) http: reqwest::Client,
    pub(super) url: String,
    pub(super) headers: reqwest::header::HeaderMap,
    pub(super) shown: String,
    pub(super) counts: Arc<Counts>,
    /// `[traces] flush_secs`: what one request may take.
    pub(super) flush: Duration,
}

impl Sender {
    pub(super) fn new(
        cfg: &TracesConfig,
        trust: &Trust,
        counts: Arc<Counts>,
    ) -> anyhow::Result<Sender> {
        let http = harness_base::http::client(trust)?
            .timeout(cfg.flush)
            .connect_timeout(cfg.flush.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &cfg.headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())?;
            let mut value = reqwest::header::HeaderValue::from_str(value.expose())?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        Ok(Sender {
            http,
            url: cfg.endpoint.clone(),
            headers,
            shown: cfg.shown_endpoint(),
            counts,
            flush: cfg.flush,
        })
    }

    /// Takes batches until every handle is gone.
    pub(super) async fn run(self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut carried: Option<Msg> = None;
        loop {
            let msg = match carried.take() {
                Some(msg) => msg,
                None => match rx.recv().await {
                    Some(msg) => self.taken(msg),
                    None => return,
                },
            };
            let mut body = match msg {
                Msg::Flush(done) => {
                    let _ = done.send(());
                    continue;
                }
                Msg::Trace(bytes) => bytes,
            };
            let mut traces = 1u64;
            // Protobuf messages joined are one message with the lists
            // joined: each trace is its own `ResourceSpans`.
            while body.len() < MAX_REQUEST_BYTES {
                match rx.try_recv().map(|msg| self.taken(msg)) {
                    Ok(Msg::Trace(more)) if body.len() + more.len() <= MAX_REQUEST_BYTES => {
                        body.extend_from_slice(&more);
                        traces += 1;
                    }
                    Ok(other) => {
                        carried = Some(other);
                        break;
                    }
                    Err(_) => break,
                }
            }
            self.send(body, traces).await;
        }
    }

    /// A message out of the queue: its bytes no longer wait.
    fn taken(&self, msg: Msg) -> Msg {
        if let Msg::Trace(bytes) = &msg {
            self.counts.queued.fetch_sub(bytes.len(), Ordering::Relaxed);
        }
        msg
    }

    async fn send(&self, body: Vec<u8>, traces: u64) {
        match self.post(body).await {
            Ok(refused) => {
                self.counts.settle(traces);
                match refused {
                    Some((0, warning)) => {
                        tracing::warn!(endpoint = %self.shown, warning = %warning, "[traces] endpoint: the collector took the traces with a warning");
                    }
                    Some((rejected, why)) => {
                        // A refused span spoils at most its own trace.
                        let spoiled = traces.min(rejected);
                        self.counts.lost.fetch_add(spoiled, Ordering::Relaxed);
                        self.failed(
                            &format!("the collector refused {rejected} span(s): {why}"),
                            spoiled,
                        );
                    }
                    None => {}
                }
            }
            Err(why) => {
                self.counts.lose(traces);
                self.failed(&why, traces);
            }
        }
    }

    /// A failure: warned about the first time in a run, the rest counted
    /// and summed up by [`super::Traces::finish`].
    fn failed(&self, why: &str, traces: u64) {
        let first = self.counts.failed_requests.fetch_add(1, Ordering::Relaxed) == 0;
        if first {
            tracing::warn!(endpoint = %self.shown, error = %why, traces, "[traces] endpoint: cannot export the trace; tasks, records and the exit code are unchanged");
        } else {
            tracing::debug!(endpoint = %self.shown, error = %why, traces, "[traces] endpoint: cannot export the trace");
        }
    }

    /// One request; `Ok` with the spans a collector refused and why (a
    /// partial success), `Err` with why it did not take the batch.
    async fn post(&self, body: Vec<u8>) -> Result<Option<(u64, String)>, String> {
        let resp = self
            .http
            .post(&self.url)
            .headers(self.headers.clone())
            .header(reqwest::header::CONTENT_TYPE, otlp::CONTENT_TYPE)
            .body(body)
            .send()
            .await
            .map_err(|e| transport(&e, self.flush))?;
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| harness_base::text::clip(&harness_base::text::printable(v), 64))
            .unwrap_or_default();
        match status {
            413 => return Err("the collector answered 413: the batch is larger than it takes (raise its request size limit, or set [traces] content = false)".into()),
            404 | 405 => return Err(format!("the server answered {status}: is [traces] endpoint the collector's OTLP/HTTP traces URL (…/v1/traces on its HTTP port, 4318)?")),
            200..=299 => {}
            _ => return Err(format!("the collector answered {status}")),
        }
        if !content_type.is_empty()
            && !content_type.starts_with(otlp::CONTENT_TYPE)
            && !content_type.starts_with("application/json")
        {
            return Err(format!(
                "the server answered {status} with {content_type}, not as an OTLP/HTTP collector: is [traces] endpoint the collector's /v1/traces?"
            ));
        }
        if !content_type.starts_with(otlp::CONTENT_TYPE) {
            return Ok(None);
        }
        let body = match read_capped(resp, MAX_ANSWER_BYTES).await {
            Ok(Body::Whole(b)) => b,
            Ok(Body::TooLarge(_)) | Err(_) => Vec::new(),
        };
        Ok(otlp::rejected(&body).map(|(rejected, why)| {
            let why = harness_base::text::clip(&harness_base::text::printable(&why), 200);
            (rejected, why)
        }))
    }
}

/// A request the collector did not answer, in words naming its host and
/// port, never the rest of the URL (it may hold a key); a timeout names
/// the setting that bounds it.
fn transport(e: &reqwest::Error, flush: Duration) -> String {
    let failure = TransportFailure::of(e, None);
    match failure.kind {
        TransportKind::Timeout => format!(
            "{failure}: a request has [traces] flush_secs = {}",
            flush.as_secs()
        ),
        _ => failure.to_string(),
    }
}
