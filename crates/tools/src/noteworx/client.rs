//! The noteworx HTTP client (docs/tools.md, "Built-in tools"): typed requests
//! and responses that tolerate missing and extra fields, a bearer token that
//! never appears in an error, and one retry on a 5xx or a dropped connection
//! ([`RETRY`]).
//!
//! The tool bodies that turn these calls into text for the model live in
//! `tools::noteworx`; this module knows nothing about models.

use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use harness_base::http::{
    Body, MAX_BODY_BYTES, TransportFailure, TransportKind, Trust, read_capped,
};
use harness_base::lenient;
use harness_base::retry::{Attempted, RetryPolicy};
use harness_config::{NoteworxConfig, Secret};

/// A note as the API returns it. Every field may be missing, and a field
/// of the wrong kind is read as absent rather than failing the whole answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Note {
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub slug: String,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub title: String,
    #[serde(default, deserialize_with = "lenient::texts")]
    pub tags: Vec<String>,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub space: String,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub updated_at: String,
    #[serde(default, deserialize_with = "lenient::text")]
    pub content: Option<String>,
    #[serde(default, deserialize_with = "lenient::number")]
    pub score: Option<f64>,
}

/// A note in a listing: like [`Note`] without `content`, which the parser
/// skips as it streams past, so a listing's note text is never held.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ListedNote {
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub slug: String,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub title: String,
    #[serde(default, deserialize_with = "lenient::texts")]
    pub tags: Vec<String>,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub space: String,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub updated_at: String,
    #[serde(default, deserialize_with = "lenient::number")]
    pub score: Option<f64>,
}

/// An attachment. `id` may come as a number or a string; it is kept as a string.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Attachment {
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub id: String,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub filename: String,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub content_type: String,
    #[serde(default, deserialize_with = "lenient::count")]
    pub size: Option<u64>,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub created_at: String,
    #[serde(default, deserialize_with = "lenient::text")]
    pub content: Option<String>,
}

/// The most entries a listing keeps; the rest are skipped while parsing.
pub(crate) const MAX_LISTED: usize = 100;

#[derive(Deserialize)]
struct NotesEnvelope {
    #[serde(default, deserialize_with = "first_hundred")]
    notes: Vec<ListedNote>,
}

#[derive(Deserialize)]
struct AttachmentsEnvelope {
    #[serde(default, deserialize_with = "first_hundred")]
    attachments: Vec<ListedAttachment>,
}

/// An attachment in a listing: its `content`, if a server sends one, is skipped.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct ListedAttachment {
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub id: String,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub filename: String,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub content_type: String,
    #[serde(default, deserialize_with = "lenient::count")]
    pub size: Option<u64>,
    #[serde(default, deserialize_with = "lenient::text_or_empty")]
    pub created_at: String,
}

/// The first [`MAX_LISTED`] items of a list; the rest are parsed past, not kept.
fn first_hundred<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(lenient::first(d, MAX_LISTED)?.items)
}

#[derive(Debug, Serialize)]
pub(crate) struct NewAttachment<'a> {
    pub filename: &'a str,
    pub content_type: &'a str,
    pub content: &'a str,
}

/// What went wrong talking to noteworx, in terms the tool layer branches on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoteworxError {
    /// The server answered with an error status; `message` is its `error` field.
    #[error("noteworx answered {status}: {message}")]
    Status { status: u16, message: String },
    /// No usable answer: refused connection, timeout, dropped connection.
    #[error("noteworx could not be reached: {0}")]
    Unreachable(String),
    /// A 2xx answer that is not the JSON the API promises.
    #[error("noteworx sent an unreadable answer: {0}")]
    BadResponse(String),
    /// An answer over [`MAX_BODY_BYTES`]: not read further.
    #[error("noteworx sent an answer over 32 MiB")]
    TooLarge,
    /// An argument that cannot be sent (a slug such as `..`): no request was made.
    #[error("{0}")]
    BadArgument(String),
}

/// How a request retries: once, after 150–300 ms (longer when a 5xx's
/// `Retry-After` asks for it), and never later than twice the request
/// timeout after the first attempt began.
const RETRY: RetryPolicy = RetryPolicy {
    base: Duration::from_millis(300),
    cap: Duration::from_millis(300),
    max_retries: 1,
};

/// One client per run, shared by every task.
#[derive(Debug, Clone)]
pub struct NoteworxClient {
    http: reqwest::Client,
    /// What one request may take.
    timeout: Duration,
    base: Url,
    token: Secret,
    /// A request of this run was answered with a 2xx: the token works.
    answered: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl NoteworxClient {
    /// The client of `cfg`'s notes service, checking its certificate
    /// against `trust` (`[tls]`).
    pub fn new(cfg: &NoteworxConfig, trust: &Trust) -> anyhow::Result<Self> {
        let timeout = Duration::from_secs(cfg.timeout_secs);
        let http = harness_base::http::client(trust)?
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(cfg.timeout_secs.min(10)))
            .build()?;
        let base = Url::parse(&format!("{}/", cfg.base_url))?;
        Ok(NoteworxClient {
            http,
            timeout,
            base,
            token: cfg.token.clone(),
            answered: std::sync::Arc::default(),
        })
    }

    /// Whether a request of this run was answered with a 2xx: then a
    /// refusal is about one note, not the token (docs/design.md, "Setup
    /// faults: when a refusal stops the run").
    pub(crate) fn token_worked(&self) -> bool {
        self.answered.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `GET /api/notes?space=S&tag=T&limit=N`
    pub async fn list_notes(
        &self,
        space: Option<&str>,
        tag: Option<&str>,
        limit: Option<u64>,
    ) -> Result<Vec<ListedNote>, NoteworxError> {
        let mut url = self.url(&["api", "notes"])?;
        {
            let mut q = url.query_pairs_mut();
            if let Some(s) = space {
                q.append_pair("space", s);
            }
            if let Some(t) = tag {
                q.append_pair("tag", t);
            }
            if let Some(l) = limit {
                q.append_pair("limit", &l.to_string());
            }
        }
        Ok(self
            .send::<NotesEnvelope>(Method::GET, url, None)
            .await?
            .notes)
    }

    /// `GET /api/notes/search?q=Q&mode=M&limit=N`
    pub(crate) async fn search_notes(
        &self,
        query: &str,
        mode: &str,
        limit: Option<u64>,
    ) -> Result<Vec<ListedNote>, NoteworxError> {
        let mut url = self.url(&["api", "notes", "search"])?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("q", query).append_pair("mode", mode);
            if let Some(l) = limit {
                q.append_pair("limit", &l.to_string());
            }
        }
        Ok(self
            .send::<NotesEnvelope>(Method::GET, url, None)
            .await?
            .notes)
    }

    /// `GET /api/notes/{slug}`
    pub async fn read_note(&self, slug: &str) -> Result<Note, NoteworxError> {
        self.send(Method::GET, self.url(&["api", "notes", slug])?, None)
            .await
    }

    /// `GET /api/notes/{slug}/attachments`
    pub(crate) async fn list_attachments(
        &self,
        slug: &str,
    ) -> Result<Vec<ListedAttachment>, NoteworxError> {
        Ok(self
            .send::<AttachmentsEnvelope>(
                Method::GET,
                self.url(&["api", "notes", slug, "attachments"])?,
                None,
            )
            .await?
            .attachments)
    }

    /// `GET /api/notes/{slug}/attachments/{id}`
    pub(crate) async fn read_attachment(
        &self,
        slug: &str,
        id: &str,
    ) -> Result<Attachment, NoteworxError> {
        self.send(
            Method::GET,
            self.url(&["api", "notes", slug, "attachments", id])?,
            None,
        )
        .await
    }

    /// `POST /api/notes/{slug}/attachments`
    pub(crate) async fn create_attachment(
        &self,
        slug: &str,
        new: &NewAttachment<'_>,
    ) -> Result<Attachment, NoteworxError> {
        let body =
            serde_json::to_value(new).map_err(|e| NoteworxError::BadResponse(e.to_string()))?;
        self.send(
            Method::POST,
            self.url(&["api", "notes", slug, "attachments"])?,
            Some(body),
        )
        .await
    }

    /// The URL of an API path; each segment is percent-encoded, so a slug can
    /// never climb out of its route — and a segment that the URL rules would
    /// still resolve (`.`, `..`) or that is empty or holds a control
    /// character is refused before any request (docs/untrusted-input.md).
    fn url(&self, segments: &[&str]) -> Result<Url, NoteworxError> {
        if let Some(bad) = segments.iter().find(|s| !is_path_segment(s)) {
            return Err(NoteworxError::BadArgument(format!(
                "{:?} cannot be part of a noteworx address",
                harness_base::text::clip(bad, 80)
            )));
        }
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        Ok(url)
    }

    /// One request, retried on [`RETRY`] while what failed may pass.
    async fn send<T: DeserializeOwned + Send + 'static>(
        &self,
        method: Method,
        url: Url,
        body: Option<Value>,
    ) -> Result<T, NoteworxError> {
        let deadline = tokio::time::Instant::now() + self.timeout.saturating_mul(2);
        let backoff = RETRY.start(deadline);
        backoff
            .run(|| self.attempt(&method, &url, body.as_ref()))
            .await
    }

    /// One attempt of a request.
    async fn attempt<T: DeserializeOwned + Send + 'static>(
        &self,
        method: &Method,
        url: &Url,
        body: Option<&Value>,
    ) -> Attempted<T, NoteworxError> {
        let mut req = self
            .http
            .request(method.clone(), url.clone())
            .bearer_auth(self.token.expose());
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            // A POST whose connection dropped may have been applied: only
            // retry one that never connected.
            Err(e) if method == Method::POST && !e.is_connect() => {
                return Attempted::Done(Err(no_answer(&e)));
            }
            Err(e) => return Attempted::Again(no_answer(&e), None),
        };
        let status = resp.status();
        if status.is_success() {
            self.answered
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return Attempted::Done(parse_streaming(resp).await);
        }
        let retry_after = harness_base::http::retry_after(resp.headers());
        let text = match read_capped(resp, 64 * 1024).await {
            Ok(Body::Whole(b) | Body::TooLarge(b)) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => return Attempted::Done(Err(no_answer(&e))),
        };
        let failed = NoteworxError::Status {
            status: status.as_u16(),
            message: error_message(&text, status),
        };
        if status.is_server_error() {
            Attempted::Again(failed, retry_after)
        } else {
            Attempted::Done(Err(failed))
        }
    }
}

/// A path segment noteworx may be asked for: not empty, not `.` or `..`, no
/// control characters.
pub(crate) fn is_path_segment(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.chars().any(char::is_control)
}

/// Parses a 2xx body as it streams in, on a blocking thread, never reading
/// more than [`MAX_BODY_BYTES`]; fields a type leaves out (a listing's note
/// text) are skipped by the parser, not held.
async fn parse_streaming<T: DeserializeOwned + Send + 'static>(
    resp: reqwest::Response,
) -> Result<T, NoteworxError> {
    use futures::TryStreamExt;
    // A body still coming when the request's timeout ends is a timeout,
    // not a dropped connection: the operator raises `timeout_secs`.
    let stream = resp.bytes_stream().map_err(|e| {
        let kind = if e.is_timeout() {
            std::io::ErrorKind::TimedOut
        } else {
            std::io::ErrorKind::Other
        };
        std::io::Error::new(kind, e)
    });
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    let parse = tokio::task::spawn_blocking(move || {
        let capped = std::io::BufReader::new(Capped {
            inner: reader,
            left: MAX_BODY_BYTES,
        });
        serde_json::from_reader::<_, T>(capped)
    });
    match parse.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) if e.io_error_kind() == Some(std::io::ErrorKind::FileTooLarge) => {
            Err(NoteworxError::TooLarge)
        }
        Ok(Err(e)) if e.io_error_kind() == Some(std::io::ErrorKind::TimedOut) => Err(
            NoteworxError::Unreachable("timed out while the answer came".into()),
        ),
        Ok(Err(e)) if e.is_io() => Err(NoteworxError::Unreachable("connection dropped".into())),
        Ok(Err(e)) => Err(NoteworxError::BadResponse(harness_base::text::clip(
            &e.to_string(),
            200,
        ))),
        Err(_) => Err(NoteworxError::BadResponse(
            "the answer could not be read".into(),
        )),
    }
}

/// A reader that fails with `FileTooLarge` past `left` bytes.
struct Capped<R> {
    inner: R,
    left: usize,
}

impl<R: std::io::Read> std::io::Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(std::io::ErrorKind::FileTooLarge.into()),
            };
        }
        let n = buf.len().min(self.left);
        let got = self.inner.read(&mut buf[..n])?;
        self.left -= got;
        Ok(got)
    }
}

fn error_message(body: &str, status: StatusCode) -> String {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: Value,
    }
    let text = match serde_json::from_str::<ErrorBody>(body) {
        Ok(ErrorBody {
            error: Value::String(s),
        }) => harness_base::text::clip(&s, 300),
        Ok(ErrorBody { error }) => harness_base::text::clip(&error.to_string(), 300),
        Err(_) => status.canonical_reason().unwrap_or("error").to_string(),
    };
    // It reaches logs and terminals too.
    harness_base::text::printable(&text).into_owned()
}

/// A request noteworx did not answer, in a few words: they reach the
/// model too, so they name no address. A certificate not trusted says what
/// the operator sets, for the task's error they read.
fn no_answer(e: &reqwest::Error) -> NoteworxError {
    let failure = TransportFailure::of(e, None);
    NoteworxError::Unreachable(match failure.kind {
        TransportKind::Untrusted => match failure.advice {
            Some(advice) => format!("{} ({advice})", failure.brief()),
            None => failure.brief().into(),
        },
        _ => failure.brief().into(),
    })
}
