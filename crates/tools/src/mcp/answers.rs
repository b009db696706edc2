//! The server's side of a connection, read mostly for answers: responses
//! and errors pass; notifications a server sends on its own (progress,
//! logging, list changes) are dropped as they are read; its requests
//! (ping, sampling, roots) pass to the SDK, which answers them, at a
//! bounded rate — a flood of them is dropped, so a server cannot make the
//! client hold or answer any number of them.

use std::time::Instant;

use rmcp::model::JsonRpcMessage;
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// Requests of a server answered per second, and in a burst.
const RATE: f64 = 16.0;
const BURST: f64 = 64.0;
/// Requests of a server answered in all (a ping every 15 s for 40 hours).
const LIFETIME: u32 = 10_000;

/// A client transport that passes on answers, and the server's requests
/// within a rate limit.
pub(super) struct AnswersOnly<T> {
    inner: T,
    tokens: f64,
    refilled: Instant,
    passed: u32,
}

impl<T> AnswersOnly<T> {
    pub(super) fn new(inner: T) -> AnswersOnly<T> {
        AnswersOnly {
            inner,
            tokens: BURST,
            refilled: Instant::now(),
            passed: 0,
        }
    }

    /// Whether one more request of the server may be answered now.
    fn take(&mut self) -> bool {
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * RATE;
        self.tokens = (self.tokens + earned).min(BURST);
        self.refilled = now;
        if self.tokens < 1.0 || self.passed >= LIFETIME {
            return false;
        }
        self.tokens -= 1.0;
        self.passed += 1;
        true
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for AnswersOnly<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let mut dropped = 0u32;
        loop {
            match self.inner.receive().await? {
                JsonRpcMessage::Request(r) if self.take() => {
                    return Some(JsonRpcMessage::Request(r));
                }
                JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => {
                    dropped = dropped.wrapping_add(1);
                    if dropped.is_multiple_of(256) {
                        // A flood must not hold a worker thread.
                        tokio::task::yield_now().await;
                    }
                }
                answer => return Some(answer),
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
