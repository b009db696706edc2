//! Outbound HTTP: the one client builder (one user agent, one TLS
//! configuration for each [`Trust`]: the bundled roots, and a private CA's
//! certificates beside them when the operator names some), bodies read
//! from servers that may be hostile (docs/untrusted-input.md) never past a
//! cap, whatever `Content-Length` says, so no answer sets the harness's
//! memory; `Retry-After` read; and a request that got no answer described
//! in words an operator acts on ([`TransportFailure`]), a certificate no
//! trusted root vouches for with what to set.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The most any endpoint or noteworx body may hold.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// How much of a refused, oversized body a record keeps.
pub const KEPT_OF_OVERSIZED: usize = 64 * 1024;

/// What every request says it comes from: `agent-harness/<version>`.
pub(crate) const USER_AGENT: &str = concat!("agent-harness/", env!("CARGO_PKG_VERSION"));

/// A new HTTP client checking certificates against `trust`: every client
/// of the harness is built here (the endpoint, webfetch, noteworx,
/// notifications, traces, MCP over HTTP), on rustls with the `ring`
/// provider, TLS 1.2 and 1.3, HTTP/2 and HTTP/1.1 offered by ALPN; and an
/// honest [`USER_AGENT`]. Callers set their own timeouts and redirect
/// rules.
pub fn client(trust: &Trust) -> Result<reqwest::ClientBuilder, rustls::Error> {
    builder(trust, USER_AGENT.to_owned())
}

/// [`client`] for requests made on someone else's behalf: the user agent
/// says for whom (`agent-harness/<version> (<role>)`).
pub fn client_acting_as(
    role: &str,
    trust: &Trust,
) -> Result<reqwest::ClientBuilder, rustls::Error> {
    builder(trust, format!("{USER_AGENT} ({role})"))
}

// The one place a client is made (clippy.toml's disallowed-methods).
#[allow(clippy::disallowed_methods)]
fn builder(trust: &Trust, user_agent: String) -> Result<reqwest::ClientBuilder, rustls::Error> {
    let tls = trust.tls().clone()?;
    Ok(reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .user_agent(user_agent))
}

/// The most a file of trusted certificates may hold: far more than any
/// chain of CAs, far less than a file named by mistake.
pub const MAX_TRUST_BYTES: u64 = 1024 * 1024;

/// What a certificate is checked against: the Mozilla roots bundled in the
/// binary (`webpki-roots`; no system store to go missing under a sandboxed
/// unit), and the operator's own certificates beside them when there are
/// any (a private CA). Given once, at start-up, to every client that is to
/// trust it; its rustls configuration is built once, at the first client,
/// and shared by every client built from the same `Trust` (a clone is the
/// same set).
#[derive(Clone)]
pub struct Trust(Arc<Roots>);

struct Roots {
    /// Trusted beside the bundled roots, each parsed once as X.509.
    added: Vec<CertificateDer<'static>>,
    /// The rustls configuration of this set, built at its first client.
    tls: OnceLock<Result<rustls::ClientConfig, rustls::Error>>,
}

/// Why a PEM text gives no certificate to trust.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PemProblem {
    #[error("it is empty")]
    Empty,
    /// Not one PEM block in it (a DER file, another kind of text).
    #[error(
        "it is not PEM: no `-----BEGIN CERTIFICATE-----` block (a DER certificate converts with `openssl x509 -inform der -in FILE -out FILE.pem`)"
    )]
    NotPem,
    /// A block that does not read: an unended block, bad base64. Fixed
    /// words: the reader's own message quotes the file's bytes.
    #[error("it is not valid PEM ({0})")]
    BadPem(&'static str),
    /// A private key beside the certificates: the wrong file (a server's
    /// combined PEM), and one the service user should not read.
    #[error(
        "it holds a private key beside the certificate(s): name a file holding the CA's certificate alone"
    )]
    PrivateKey,
    /// PEM blocks, none of them a certificate (a key, a request).
    #[error("it holds no CERTIFICATE block, only {0}: name the CA's certificate")]
    NoCertificate(String),
    /// A CERTIFICATE block whose content is no X.509 certificate.
    #[error("its certificate {number} does not parse ({why})")]
    BadCertificate { number: usize, why: String },
}

impl Trust {
    /// The bundled roots alone.
    pub fn bundled() -> Trust {
        static BUNDLED: OnceLock<Trust> = OnceLock::new();
        BUNDLED.get_or_init(|| Trust::with(Vec::new())).clone()
    }

    /// The bundled roots and every certificate of `pem` (one or more
    /// `CERTIFICATE` blocks; a private key beside them is refused, other
    /// blocks are passed over), each checked to parse as X.509 now, not at
    /// the first connection.
    pub fn with_pem(pem: &[u8]) -> Result<Trust, PemProblem> {
        use rustls::pki_types::pem::{PemObject, SectionKind};
        if pem.iter().all(u8::is_ascii_whitespace) {
            return Err(PemProblem::Empty);
        }
        let mut added = Vec::new();
        let mut others = Vec::new();
        for block in <(SectionKind, Vec<u8>) as PemObject>::pem_slice_iter(pem) {
            let kind = match block.map_err(|e| PemProblem::BadPem(pem_words(&e)))? {
                (SectionKind::Certificate, der) => {
                    added.push(CertificateDer::from(der));
                    continue;
                }
                (
                    SectionKind::PrivateKey
                    | SectionKind::RsaPrivateKey
                    | SectionKind::EcPrivateKey,
                    _,
                ) => "a private key",
                (SectionKind::PublicKey, _) => "a public key",
                (SectionKind::Csr, _) => "a certificate request",
                (SectionKind::Crl, _) => "a revocation list",
                _ => "another kind of block",
            };
            if !others.contains(&kind) {
                others.push(kind);
            }
        }
        if !added.is_empty() && (others.contains(&"a private key") || holds_any_private_key(pem)) {
            return Err(PemProblem::PrivateKey);
        }
        if added.is_empty() {
            return Err(if others.is_empty() {
                PemProblem::NotPem
            } else {
                PemProblem::NoCertificate(others.join(" and "))
            });
        }
        for (i, der) in added.iter().enumerate() {
            rustls::RootCertStore::empty()
                .add(der.clone())
                .map_err(|e| PemProblem::BadCertificate {
                    number: i + 1,
                    why: e.to_string(),
                })?;
        }
        Ok(Trust::with(added))
    }

    fn with(added: Vec<CertificateDer<'static>>) -> Trust {
        Trust(Arc::new(Roots {
            added,
            tls: OnceLock::new(),
        }))
    }

    /// The certificates trusted beside the bundled roots (DER), for a
    /// client that is not HTTP (mail) to add to its own.
    pub fn added(&self) -> &[CertificateDer<'static>] {
        &self.0.added
    }

    /// This set's rustls configuration, built once.
    fn tls(&self) -> &Result<rustls::ClientConfig, rustls::Error> {
        self.0.tls.get_or_init(|| {
            let mut roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            for der in &self.0.added {
                roots.add(der.clone())?;
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            Ok(config)
        })
    }
}

impl Default for Trust {
    fn default() -> Self {
        Trust::bundled()
    }
}

impl PartialEq for Trust {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.added == other.0.added
    }
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Trust(bundled roots + {} certificate(s))",
            self.0.added.len()
        )
    }
}

/// Whether a `-----BEGIN … PRIVATE KEY-----` line is in `pem`: the kinds
/// the PEM reader passes over unread too (`ENCRYPTED PRIVATE KEY`,
/// `OPENSSH PRIVATE KEY`, `DSA PRIVATE KEY`).
fn holds_any_private_key(pem: &[u8]) -> bool {
    pem.split(|b| *b == b'\n').any(|line| {
        let line = line.trim_ascii();
        line.starts_with(b"-----BEGIN ") && line.ends_with(b"PRIVATE KEY-----")
    })
}

/// Why a PEM block does not read, in words that quote nothing of the file.
fn pem_words(e: &rustls::pki_types::pem::Error) -> &'static str {
    use rustls::pki_types::pem::Error;
    match e {
        Error::MissingSectionEnd { .. } => "a block has no END line",
        Error::IllegalSectionStart { .. } => "a BEGIN line is malformed",
        Error::Base64Decode(_) => "a block's base64 does not decode",
        _ => "it cannot be read as PEM",
    }
}

/// What to do about a certificate no trusted root vouches for, said
/// wherever a connection meets one ([`TransportFailure`], mail, MCP).
pub const UNKNOWN_ISSUER_ADVICE: &str = "a private CA? set [tls] ca_file to its PEM certificate";

/// What to do about a certificate refused for another reason (a name it
/// does not cover, expired, a CA certificate presented as the server's own
/// as `openssl req -x509` makes by default).
pub const REFUSED_CERTIFICATE_ADVICE: &str = "fix the server's certificate: valid now, for the name in the URL, and not a CA's own (a self-signed one needs basicConstraints CA:FALSE); or sign it with a CA and set [tls] ca_file to the CA's certificate";

/// When rustls refused the server's certificate anywhere in `e`'s chain,
/// what to do about it. A TLS stream reports rustls's error inside an
/// `io::Error` (reqwest's connector wraps that in another), whose
/// `source()` skips what it holds: those are opened too.
pub fn refused_certificate(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    crate::error::causes(e).find_map(|cause| {
        let mut cause = cause;
        while let Some(held) = cause
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            cause = held;
        }
        match cause.downcast_ref::<rustls::Error>() {
            Some(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)) => {
                Some(UNKNOWN_ISSUER_ADVICE)
            }
            Some(rustls::Error::InvalidCertificate(_)) => Some(REFUSED_CERTIFICATE_ADVICE),
            _ => None,
        }
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

/// A response body as it came: JSON kept as its text, so a record holds it at
/// its own size and not at the many times a parsed tree of small values takes
/// (docs/untrusted-input.md), or text that was not JSON, kept as a JSON string.
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

/// A request that got no (whole) answer, as a `reqwest::Error` tells it:
/// what kind of failure, where the request went (host and port only: the
/// rest of a URL may hold a key) and the innermost cause's words. Its
/// `Display` is the sentence for an operator; [`TransportFailure::brief`]
/// the few words for text that leaves the operator's hands (a model's
/// tool result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportFailure {
    pub kind: TransportKind,
    /// `host:port`, when the error or the caller knows the URL.
    pub target: Option<String>,
    /// The innermost cause, printable and clipped.
    pub cause: Option<String>,
    /// What to do, when the server's certificate was refused
    /// ([`refused_certificate`]).
    pub advice: Option<&'static str>,
}

/// What kind of transport failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// No answer within the client's timeout.
    Timeout,
    /// Nothing listens at the address.
    Refused,
    /// The server's certificate was refused: signed by no trusted root (a
    /// private CA that `[tls] ca_file` does not name), or not valid for
    /// this connection. Said with what to do; no later attempt fixes it.
    Untrusted,
    /// No connection for another reason (a name that does not resolve, a
    /// handshake that failed otherwise, a network out of reach).
    Connect,
    /// The connection dropped while the answer came, or the answer could
    /// not be decoded.
    Dropped,
    /// The request failed otherwise (a redirect refused, a protocol error).
    Other,
}

impl TransportFailure {
    /// `e` read; `url` names the target when `e` does not (an error
    /// reading a body carries no URL).
    pub fn of(e: &reqwest::Error, url: Option<&str>) -> Self {
        let advice = refused_certificate(e);
        let kind = if e.is_timeout() {
            TransportKind::Timeout
        } else if advice.is_some() {
            TransportKind::Untrusted
        } else if e.is_connect() {
            let refused = crate::error::causes(e).any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
            });
            if refused {
                TransportKind::Refused
            } else {
                TransportKind::Connect
            }
        } else if e.is_body() || e.is_decode() {
            TransportKind::Dropped
        } else {
            TransportKind::Other
        };
        let target = e
            .url()
            .cloned()
            .or_else(|| reqwest::Url::parse(url?).ok())
            .and_then(|u| Some(format!("{}:{}", u.host_str()?, u.port_or_known_default()?)));
        let cause = crate::error::innermost_cause(e)
            .map(|c| crate::text::clip(&crate::text::printable(&c.to_string()), 200))
            .map(|c| plain_http(&c).unwrap_or(c));
        TransportFailure {
            kind,
            target,
            cause,
            advice,
        }
    }

    /// The failure in a few words, naming no address.
    pub fn brief(&self) -> &'static str {
        match self.kind {
            TransportKind::Timeout => "timed out",
            TransportKind::Refused => "connection refused",
            TransportKind::Untrusted => "certificate not trusted",
            TransportKind::Connect => "connection failed",
            TransportKind::Dropped => "connection dropped",
            TransportKind::Other => "request failed",
        }
    }
}

impl std::fmt::Display for TransportFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let target = self.target.as_deref().unwrap_or("the server");
        let cause = |plain: &str| match &self.cause {
            Some(cause) => format!("{plain}: {cause}"),
            None => plain.to_owned(),
        };
        match self.kind {
            TransportKind::Timeout => write!(f, "{target} did not answer in time (timeout)"),
            TransportKind::Refused => write!(f, "cannot connect to {target} (connection refused)"),
            TransportKind::Untrusted => write!(
                f,
                "cannot connect to {target} ({}; {})",
                self.cause.as_deref().unwrap_or("certificate not trusted"),
                self.advice.unwrap_or(UNKNOWN_ISSUER_ADVICE)
            ),
            TransportKind::Connect => match &self.cause {
                Some(cause) => write!(f, "cannot connect to {target} ({cause})"),
                None => write!(f, "cannot connect to {target}"),
            },
            TransportKind::Dropped => write!(
                f,
                "the connection to {target} failed ({})",
                cause("dropped mid-answer")
            ),
            TransportKind::Other => write!(
                f,
                "the connection to {target} failed ({})",
                cause("request error")
            ),
        }
    }
}

/// A TLS handshake answered in plain HTTP (`https://` to a server without
/// TLS, as llama-server is): rustls reads the answer's first bytes as a
/// record of no known type. Said as what to change.
fn plain_http(cause: &str) -> Option<String> {
    cause.contains("InvalidContentType").then(|| {
        format!("the server speaks plain http: use http:// in the URL, not https:// ({cause})")
    })
}

/// About what a JSON tree of `text` would take in memory, counted from its
/// separators (each value after the first follows a `,`, `:`, `[` or `{`)
/// at a generous 80 bytes a value, plus the text itself.
pub(crate) fn tree_cost(text: &str) -> usize {
    let values = text
        .bytes()
        .filter(|b| matches!(b, b',' | b':' | b'[' | b'{'))
        .count();
    values
        .saturating_add(1)
        .saturating_mul(80)
        .saturating_add(text.len())
}

/// `text` as a JSON tree, unless that would take more than the `left`
/// bytes of memory allowed (which it then takes from them).
pub fn parse_tree(text: &str, left: &mut usize) -> Option<serde_json::Value> {
    let cost = tree_cost(text);
    if cost > *left {
        return None;
    }
    *left -= cost;
    serde_json::from_str(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_of_small_values_costs_its_values_not_its_bytes() {
        assert!(tree_cost("[0,0,0,0]") >= 4 * 80);
        let mut left = 1000;
        assert_eq!(
            parse_tree("[1,2]", &mut left),
            Some(serde_json::json!([1, 2]))
        );
        assert!(left < 1000);
        let zeros = format!("[{}0]", "0,".repeat(100));
        let mut left = 1000;
        assert_eq!(parse_tree(&zeros, &mut left), None, "over the allowance");
        assert_eq!(left, 1000, "nothing taken");
    }

    /// What a client sends, read by a one-request server on 127.0.0.1.
    async fn request_head(client: reqwest::Client) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut head = vec![0; 4096];
            let n = conn.read(&mut head).await.unwrap();
            let answer = b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n";
            conn.write_all(answer).await.unwrap();
            String::from_utf8_lossy(&head[..n]).to_lowercase()
        });
        client.get(url).send().await.unwrap();
        server.await.unwrap()
    }

    #[tokio::test]
    async fn every_client_says_it_is_the_harness_and_for_whom_it_acts() {
        let head = request_head(client(&Trust::bundled()).unwrap().build().unwrap()).await;
        assert!(
            head.contains(&format!("user-agent: {USER_AGENT}\r\n")),
            "{head}"
        );
        assert!(USER_AGENT.starts_with("agent-harness/"));
        let acting = client_acting_as("a tool", &Trust::bundled())
            .unwrap()
            .build()
            .unwrap();
        let head = request_head(acting).await;
        assert!(
            head.contains(&format!("user-agent: {USER_AGENT} (a tool)\r\n")),
            "{head}"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_host_and_port_and_no_more() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let url = format!("http://user:secret@127.0.0.1:{port}/key/abc?token=t");
        let e = client(&Trust::bundled())
            .unwrap()
            .build()
            .unwrap()
            .get(&url)
            .send()
            .await;
        let failure = TransportFailure::of(&e.unwrap_err(), None);
        assert_eq!(failure.kind, TransportKind::Refused);
        assert_eq!(
            failure.to_string(),
            format!("cannot connect to 127.0.0.1:{port} (connection refused)")
        );
        assert_eq!(failure.brief(), "connection refused");
    }

    #[tokio::test]
    async fn https_to_a_plain_http_server_says_to_use_http() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let url = format!("https://127.0.0.1:{port}/v1/models");
        let e = client(&Trust::bundled())
            .unwrap()
            .build()
            .unwrap()
            .get(&url)
            .send()
            .await;
        let failure = TransportFailure::of(&e.unwrap_err(), None);
        let said = failure.to_string();
        assert!(
            said.contains("the server speaks plain http: use http://")
                && said.contains(&format!("127.0.0.1:{port}")),
            "{said}"
        );
    }

    #[test]
    fn a_refused_certificate_is_found_inside_the_io_errors_that_hold_it() {
        use std::io::{Error, ErrorKind};
        let refused = |why| {
            // As reqwest's connector reports a handshake: rustls's error
            // in tokio-rustls's io::Error, in another.
            let tls = Error::new(
                ErrorKind::InvalidData,
                rustls::Error::InvalidCertificate(why),
            );
            Error::other(tls)
        };
        assert_eq!(
            refused_certificate(&refused(rustls::CertificateError::UnknownIssuer)),
            Some(UNKNOWN_ISSUER_ADVICE)
        );
        assert_eq!(
            refused_certificate(&refused(rustls::CertificateError::BadSignature)),
            Some(REFUSED_CERTIFICATE_ADVICE)
        );
        assert_eq!(
            refused_certificate(&Error::from(ErrorKind::ConnectionRefused)),
            None
        );
    }

    #[test]
    fn a_pem_problem_quotes_nothing_of_the_file_and_a_private_key_is_refused() {
        let secret = b"-----BEGIN SECRET-sk-live-abc123-----\nAAAA\n";
        let said = Trust::with_pem(secret).unwrap_err().to_string();
        assert!(
            !said.contains("sk-live") && !said.contains("115, 107"),
            "{said}"
        );
        let cert = include_bytes!("../../../tests/fixtures/tls/self-signed.pem");
        let key = include_bytes!("../../../tests/fixtures/tls/self-signed.key");
        let both = [cert.as_slice(), key.as_slice()].concat();
        assert_eq!(Trust::with_pem(&both).unwrap_err(), PemProblem::PrivateKey);
        assert!(Trust::with_pem(cert).is_ok());
        for label in [
            "ENCRYPTED PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
            "DSA PRIVATE KEY",
        ] {
            let key = format!("-----BEGIN {label}-----\r\nAAAA\r\n-----END {label}-----\r\n");
            let both = [cert.as_slice(), key.as_bytes()].concat();
            assert_eq!(
                Trust::with_pem(&both).unwrap_err(),
                PemProblem::PrivateKey,
                "{label}"
            );
        }
    }

    #[test]
    fn the_bundled_roots_are_one_trust_and_a_pem_file_another() {
        assert_eq!(Trust::bundled(), Trust::default());
        assert!(Trust::bundled().added().is_empty());
        let pem = include_bytes!("../../../tests/fixtures/tls/self-signed.pem");
        let added = Trust::with_pem(pem).unwrap();
        assert_ne!(added, Trust::bundled());
        assert_eq!(added, added.clone());
        assert_eq!(
            format!("{added:?}"),
            "Trust(bundled roots + 1 certificate(s))"
        );
        // Its configuration builds, with the certificate among the roots.
        assert!(added.tls().is_ok());
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
