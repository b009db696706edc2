//! The `webfetch` tool. Placeholder until the guarded fetcher lands: it
//! answers the model with a clear error so the loop around it is real.

use super::ToolOutput;
use crate::config::WebfetchConfig;

#[derive(Debug, Clone)]
pub struct Webfetch {
    pub config: WebfetchConfig,
}

impl Webfetch {
    pub async fn fetch(&self, _url: &str, _offset: usize, _max_chars: usize) -> ToolOutput {
        ToolOutput::error("webfetch is not configured in this harness; do not call it again.")
    }
}
