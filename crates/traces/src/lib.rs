//! OpenTelemetry traces (documented under "Traces" in docs/): each task's
//! events become one trace ([`TaskTrace`], `spans`), its root closed as the
//! task's summary says, encoded as OTLP protobuf (`otlp`) as the task ends and
//! sent in batches while the run goes (`export`); the end of the run waits at
//! most `[traces] flush_secs` for the rest ([`Traces::finish`]). A collector
//! that is down, slow or wrong costs a warning and a count, never a task's
//! outcome or the exit code. Nothing here runs, or is allocated, on a run
//! without `[traces]`.

mod data;
mod export;
mod otlp;
mod spans;

pub use data::{Model, Trace};
pub use spans::{CONTENT_CAP, CONTENT_TOTAL, MAX_SPANS, TaskTrace};

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use export::{Counts, MAX_QUEUED_BYTES, Msg, Sender};
use harness_config::{Config, EndpointKind, Redactor};

/// The run's exporter: a cheap handle every task of the run shares.
#[derive(Clone)]
pub struct Traces(Arc<Inner>);

struct Inner {
    tx: mpsc::UnboundedSender<Msg>,
    counts: Arc<Counts>,
    model: Model,
    content: bool,
    redactor: Redactor,
    /// Attributes every root span of this handle carries (an eval's variant).
    labels: Vec<(&'static str, String)>,
    flush: Duration,
    shown: String,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Traces({})", self.0.shown)
    }
}

impl Traces {
    /// The exporter of `cfg`'s `[traces]`, started on the current runtime;
    /// `None` when no endpoint is set. A client that cannot be built is a
    /// warning: the run goes on without traces.
    pub fn start(cfg: &Config) -> Option<Traces> {
        let t = cfg.traces.as_ref()?;
        let counts = Arc::new(Counts::default());
        let sender = match Sender::new(t, &cfg.tls.trust, counts.clone()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "[traces] endpoint: cannot set up the exporter; no trace is sent");
                return None;
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(sender.run(rx));
        Some(Traces(Arc::new(Inner {
            tx,
            counts,
            model: model_of(cfg),
            content: t.content,
            redactor: cfg.redactor(),
            labels: Vec::new(),
            flush: t.flush,
            shown: t.shown_endpoint(),
        })))
    }

    /// The same exporter for tasks run with another config (an eval's
    /// variant): its model, its secrets, and `labels` on each root span.
    pub fn for_config(&self, cfg: &Config, labels: Vec<(&'static str, String)>) -> Traces {
        let inner = &self.0;
        Traces(Arc::new(Inner {
            tx: inner.tx.clone(),
            counts: inner.counts.clone(),
            model: model_of(cfg),
            content: inner.content,
            redactor: cfg.redactor(),
            labels,
            flush: inner.flush,
            shown: inner.shown.clone(),
        }))
    }

    /// A new task's trace, its root span starting at `started`.
    pub fn task(&self, task: &str, run_id: &str, started: DateTime<Utc>) -> TaskTrace {
        let inner = &self.0;
        TaskTrace::new(
            task,
            run_id,
            started,
            inner.model.clone(),
            inner.content,
            inner.redactor.clone(),
        )
        .labelled(&inner.labels)
    }

    /// A finished task's trace, queued for the next batch; `false` when it
    /// would take the queue past [`MAX_QUEUED_BYTES`] (or the sender has
    /// stopped): it is dropped and counted lost.
    pub fn send(&self, trace: &Trace) -> bool {
        let bytes = otlp::encode(std::slice::from_ref(trace));
        let counts = &self.0.counts;
        if counts.queued.load(Ordering::Relaxed) + bytes.len() > MAX_QUEUED_BYTES {
            counts.lost.fetch_add(1, Ordering::Relaxed);
            if counts.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(endpoint = %self.0.shown, "[traces] endpoint: the collector is too far behind (the traces waiting would pass {} MiB); traces are dropped until it catches up", MAX_QUEUED_BYTES >> 20);
            }
            return false;
        }
        counts.queued.fetch_add(bytes.len(), Ordering::Relaxed);
        counts.pending.fetch_add(1, Ordering::Relaxed);
        if self.0.tx.send(Msg::Trace(bytes)).is_err() {
            counts.lose(1);
            return false;
        }
        true
    }

    /// Waits at most `[traces] flush_secs` for every queued trace to be
    /// sent — at most a second once `stop` is cancelled (a signal: the
    /// service manager's stop timeout is near) — and what is still unsent
    /// then counts as lost. The traces that did not reach the collector in
    /// this run.
    pub async fn finish(&self, stop: Option<&CancellationToken>) -> u64 {
        let (done, sent) = oneshot::channel();
        let counts = &self.0.counts;
        let stopped = async {
            match stop {
                Some(stop) => {
                    stop.cancelled().await;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                None => std::future::pending().await,
            }
        };
        let flushed = self.0.tx.send(Msg::Flush(done)).is_ok()
            && tokio::select! {
                sent = tokio::time::timeout(self.0.flush, sent) => matches!(sent, Ok(Ok(()))),
                () = stopped => false,
            };
        if !flushed {
            counts.lose(counts.pending.load(Ordering::Relaxed));
        }
        let lost = counts.lost.load(Ordering::Relaxed);
        if lost > 0 {
            tracing::warn!(endpoint = %self.0.shown, lost, "[traces] endpoint: {lost} task trace(s) did not reach the collector ({})", if flushed { "see the first warning for why" } else { "still unsent when the flush ended: [traces] flush_secs ran out, or a signal came" });
        }
        lost
    }
}

/// The endpoint as the GenAI conventions name it.
fn model_of(cfg: &Config) -> Model {
    let provider = match cfg.endpoint.kind {
        EndpointKind::Runpod => "runpod",
        EndpointKind::Openai => "llama.cpp",
    };
    let server = reqwest::Url::parse(&cfg.endpoint.base_url)
        .ok()
        .and_then(|u| {
            let host = u.host_str()?.to_string();
            Some((host, u.port_or_known_default()?))
        });
    Model {
        provider,
        name: cfg.endpoint.model.clone(),
        server,
    }
}

#[cfg(test)]
mod tests;
