//! The server's side of a connection, read for answers only: responses and
//! errors pass; requests and notifications a server sends on its own
//! (pings, sampling, progress, logging) are dropped as they are read, so a
//! server cannot make the client hold or answer a flood of them.

use rmcp::model::JsonRpcMessage;
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// A client transport that passes on only answers to its own requests.
pub struct Answers<T>(pub T);

impl<T: Transport<RoleClient>> Transport<RoleClient> for Answers<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.0.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let mut dropped = 0u32;
        loop {
            match self.0.receive().await? {
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
        self.0.close()
    }
}
