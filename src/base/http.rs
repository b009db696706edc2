//! Reading HTTP bodies from servers that may be hostile (SPEC §12.3): never
//! more than a cap, whatever `Content-Length` says, so no answer sets the
//! harness's memory.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The most any endpoint or noteworx body may hold.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// How much of a refused, oversized body a record keeps.
pub const KEPT_OF_OVERSIZED: usize = 64 * 1024;

/// A new HTTP client, on the one TLS configuration every client of the
/// harness shares (the endpoint, webfetch, noteworx, notifications, MCP
/// over HTTP): rustls with the `ring` provider, the bundled webpki roots
/// (no system store to go missing under a sandboxed unit), HTTP/2 and
/// HTTP/1.1 offered by ALPN. Callers set their own timeouts and names.
pub fn client() -> Result<reqwest::ClientBuilder, rustls::Error> {
    let tls = tls().clone()?;
    Ok(reqwest::Client::builder().tls_backend_preconfigured(tls))
}

/// The shared rustls configuration, built once.
fn tls() -> &'static Result<rustls::ClientConfig, rustls::Error> {
    static TLS: OnceLock<Result<rustls::ClientConfig, rustls::Error>> = OnceLock::new();
    TLS.get_or_init(|| {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    })
}

/// A body read up to a cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// The whole body.
    Whole(Vec<u8>),
    /// The body went past the cap: its first [`KEPT_OF_OVERSIZED`] bytes.
    TooLarge(Vec<u8>),
}

/// A response body as it came: JSON kept as its text, so a record holds it
/// at its own size and not at the many times a parsed tree of small values
/// takes (SPEC §12.3), or text that was not JSON, kept as a JSON string.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawBody(Box<RawValue>);

impl PartialEq for RawBody {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl From<Box<RawValue>> for RawBody {
    fn from(raw: Box<RawValue>) -> Self {
        RawBody(raw)
    }
}

impl RawBody {
    /// `bytes` when they are one JSON value, else the bytes back. Line
    /// breaks between tokens become spaces so the body stays on one JSONL
    /// line (a JSON string cannot hold a raw line break, so no content changes).
    pub fn json(mut bytes: Vec<u8>) -> Result<RawBody, Vec<u8>> {
        // Validated without building anything: serde_json skips a value
        // with a byte stack, not recursion.
        if serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_err() {
            return Err(bytes);
        }
        for b in &mut bytes {
            if matches!(*b, b'\n' | b'\r') {
                *b = b' ';
            }
        }
        let text = String::from_utf8(bytes).map_err(std::string::FromUtf8Error::into_bytes)?;
        let trimmed = text.trim();
        let text = if trimmed.len() == text.len() {
            text
        } else {
            trimmed.to_owned()
        };
        RawValue::from_string(text)
            .map(RawBody)
            .map_err(|_| Vec::new())
    }

    /// Text that is not JSON, as a JSON string.
    pub fn text(text: &str) -> RawBody {
        RawBody(serde_json::value::to_raw_value(text).unwrap_or_else(|_| RawValue::NULL.to_owned()))
    }

    /// A parsed value, written back as text (for bodies read from records).
    pub fn from_value(v: &serde_json::Value) -> RawBody {
        RawBody(serde_json::value::to_raw_value(v).unwrap_or_else(|_| RawValue::NULL.to_owned()))
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The body read as `T`: typed, so only what `T` keeps is built.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> serde_json::Result<T> {
        serde_json::from_str(self.0.get())
    }

    /// The body when it is a JSON string (text that was not JSON).
    pub fn as_text(&self) -> Option<String> {
        self.get()
            .starts_with('"')
            .then(|| self.parse::<String>().ok())
            .flatten()
    }
}

/// Reads `resp`'s body, stopping as soon as it passes `cap` bytes (the rest
/// is never downloaded).
pub async fn read_capped(mut resp: reqwest::Response, cap: usize) -> reqwest::Result<Body> {
    let hint = resp
        .content_length()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let mut body = Vec::with_capacity(hint.min(cap).min(1024 * 1024));
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > cap {
            let room = KEPT_OF_OVERSIZED.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..room.min(chunk.len())]);
            body.truncate(KEPT_OF_OVERSIZED);
            return Ok(Body::TooLarge(body));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Body::Whole(body))
}

/// `Retry-After` as a delay: whole seconds (a number too large for any
/// clock is `Duration::MAX`, i.e. "longer than you can wait"). An HTTP date
/// or garbage is no hint at all.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.parse::<u64>().map_or(Duration::MAX, Duration::from_secs))
}

/// About what a JSON tree of `text` would take in memory, counted from its
/// separators (each value after the first follows a `,`, `:`, `[` or `{`)
/// at a generous 80 bytes a value, plus the text itself.
pub fn tree_cost(text: &str) -> usize {
    let values = text
        .bytes()
        .filter(|b| matches!(b, b',' | b':' | b'[' | b'{'))
        .count();
    values
        .saturating_add(1)
        .saturating_mul(80)
        .saturating_add(text.len())
}

/// `text` as a JSON tree, unless that would take more than `budget` bytes
/// (which it then spends).
pub fn parse_tree(text: &str, budget: &mut usize) -> Option<serde_json::Value> {
    let cost = tree_cost(text);
    if cost > *budget {
        return None;
    }
    *budget -= cost;
    serde_json::from_str(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_of_small_values_costs_its_values_not_its_bytes() {
        assert!(tree_cost("[0,0,0,0]") >= 4 * 80);
        let mut budget = 1000;
        assert_eq!(
            parse_tree("[1,2]", &mut budget),
            Some(serde_json::json!([1, 2]))
        );
        assert!(budget < 1000);
        let zeros = format!("[{}0]", "0,".repeat(100));
        let mut budget = 1000;
        assert_eq!(parse_tree(&zeros, &mut budget), None, "over the budget");
        assert_eq!(budget, 1000, "nothing spent");
    }

    use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};

    fn with(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn retry_after_reads_seconds_and_saturates() {
        assert_eq!(retry_after(&with("7")), Some(Duration::from_secs(7)));
        assert_eq!(
            retry_after(&with("18446744073709551615")),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            retry_after(&with("99999999999999999999999999")),
            Some(Duration::MAX)
        );
        assert_eq!(retry_after(&with("-1")), None);
        assert_eq!(retry_after(&with("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }
}
