//! The noteworx HTTP client (SPEC §7 "noteworx HTTP API"): typed requests
//! and responses that tolerate missing and extra fields, a bearer token that
//! never appears in an error, and one retry on a 5xx or a dropped connection.
//!
//! The tool bodies that turn these calls into text for the model live in
//! `tools::noteworx`; this module knows nothing about models.

use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::config::{NoteworxConfig, Secret};

/// A note as the API returns it. Every field may be missing.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Note {
    #[serde(default, deserialize_with = "lenient_string")]
    pub slug: String,
    #[serde(default, deserialize_with = "lenient_string")]
    pub title: String,
    #[serde(default, deserialize_with = "lenient_strings")]
    pub tags: Vec<String>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub space: String,
    #[serde(default, deserialize_with = "lenient_string")]
    pub updated_at: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub score: Option<f64>,
}

/// An attachment. `id` may come as a number or a string; it is kept as a string.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Attachment {
    #[serde(default, deserialize_with = "lenient_string")]
    pub id: String,
    #[serde(default, deserialize_with = "lenient_string")]
    pub filename: String,
    #[serde(default, deserialize_with = "lenient_string")]
    pub content_type: String,
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub created_at: String,
    #[serde(default)]
    pub content: Option<String>,
}

#[derive(Deserialize)]
struct NotesEnvelope {
    #[serde(default)]
    notes: Vec<Note>,
}

#[derive(Deserialize)]
struct AttachmentsEnvelope {
    #[serde(default)]
    attachments: Vec<Attachment>,
}

#[derive(Debug, Serialize)]
pub struct NewAttachment<'a> {
    pub filename: &'a str,
    pub content_type: &'a str,
    pub content: &'a str,
}

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

fn lenient_strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => s,
                other => other.to_string(),
            })
            .collect(),
        Value::String(s) => vec![s],
        _ => Vec::new(),
    })
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
}

/// One client per run, shared by every task.
#[derive(Debug, Clone)]
pub struct NoteworxClient {
    http: reqwest::Client,
    base: Url,
    token: Secret,
}

impl NoteworxClient {
    pub fn new(cfg: &NoteworxConfig) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(cfg.timeout_secs))
            .connect_timeout(Duration::from_secs(cfg.timeout_secs.min(10)))
            .user_agent(concat!("agent-harness/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let base = Url::parse(&format!("{}/", cfg.base_url))?;
        Ok(NoteworxClient {
            http,
            base,
            token: cfg.token.clone(),
        })
    }

    /// `GET /api/notes?space=S&tag=T&limit=N`
    pub async fn list_notes(
        &self,
        space: Option<&str>,
        tag: Option<&str>,
        limit: Option<u64>,
    ) -> Result<Vec<Note>, NoteworxError> {
        let mut url = self.url(&["api", "notes"]);
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
    pub async fn search_notes(
        &self,
        query: &str,
        mode: &str,
        limit: Option<u64>,
    ) -> Result<Vec<Note>, NoteworxError> {
        let mut url = self.url(&["api", "notes", "search"]);
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
        self.send(Method::GET, self.url(&["api", "notes", slug]), None)
            .await
    }

    /// `GET /api/notes/{slug}/attachments`
    pub async fn list_attachments(&self, slug: &str) -> Result<Vec<Attachment>, NoteworxError> {
        Ok(self
            .send::<AttachmentsEnvelope>(
                Method::GET,
                self.url(&["api", "notes", slug, "attachments"]),
                None,
            )
            .await?
            .attachments)
    }

    /// `GET /api/notes/{slug}/attachments/{id}`
    pub async fn read_attachment(&self, slug: &str, id: &str) -> Result<Attachment, NoteworxError> {
        self.send(
            Method::GET,
            self.url(&["api", "notes", slug, "attachments", id]),
            None,
        )
        .await
    }

    /// `POST /api/notes/{slug}/attachments`
    pub async fn create_attachment(
        &self,
        slug: &str,
        new: &NewAttachment<'_>,
    ) -> Result<Attachment, NoteworxError> {
        let body =
            serde_json::to_value(new).map_err(|e| NoteworxError::BadResponse(e.to_string()))?;
        self.send(
            Method::POST,
            self.url(&["api", "notes", slug, "attachments"]),
            Some(body),
        )
        .await
    }

    /// The URL of an API path; each segment is percent-encoded, so a slug can
    /// never climb out of its route.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<Value>,
    ) -> Result<T, NoteworxError> {
        let mut last = NoteworxError::Unreachable("no attempt made".into());
        for attempt in 0..2 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let mut req = self
                .http
                .request(method.clone(), url.clone())
                .bearer_auth(self.token.expose());
            if let Some(b) = &body {
                req = req.json(b);
            }
            let resp = match req.send().await {
                Ok(r) => r,
                Err(e) => {
                    last = NoteworxError::Unreachable(describe_transport(&e));
                    // A POST whose connection dropped may have been applied: only
                    // retry one that never connected.
                    if method == Method::POST && !e.is_connect() {
                        return Err(last);
                    }
                    continue;
                }
            };
            let status = resp.status();
            let text = resp
                .text()
                .await
                .map_err(|e| NoteworxError::Unreachable(describe_transport(&e)))?;
            if status.is_success() {
                return serde_json::from_str(&text)
                    .map_err(|e| NoteworxError::BadResponse(e.to_string()));
            }
            last = NoteworxError::Status {
                status: status.as_u16(),
                message: error_message(&text, status),
            };
            if !status.is_server_error() {
                return Err(last);
            }
        }
        Err(last)
    }
}

fn error_message(body: &str, status: StatusCode) -> String {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: Value,
    }
    match serde_json::from_str::<ErrorBody>(body) {
        Ok(ErrorBody {
            error: Value::String(s),
        }) => crate::tools::text::clip(&s, 300),
        Ok(ErrorBody { error }) => crate::tools::text::clip(&error.to_string(), 300),
        Err(_) => status.canonical_reason().unwrap_or("error").to_string(),
    }
}

/// A short, secret-free description of a transport failure.
pub fn describe_transport(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connect() {
        "connection failed".into()
    } else {
        "connection dropped".into()
    }
}
