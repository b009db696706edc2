//! What answers at the endpoint's address, for `test-runpod` and for `run`
//! before its first task (docs/operating.md, "Endpoints and retries"): the
//! verdict passes only for the kind of server the config says is there. For the
//! `openai` kind that is an OpenAI-compatible server: `GET /v1/models`
//! answering a model list, or refusing the key as such a server does (an error
//! envelope with 401 or 403: the chat request then says which key), or, where
//! the route is missing, llama-server's `/health` answering JSON. A 408, 429 or
//! 5xx there is a server not ready (loading, or a gateway between): a later
//! run. For the `runpod` kind, a JSON answer at the endpoint's `/health`
//! (RunPod's own, with the key). Anything else — an HTML page, another
//! service's 404, JSON that is no model list — is named. A certificate no
//! trusted root vouches for is a setup fault too: no later run fixes it.

use std::time::Duration;

use serde::Deserialize;

use super::Endpoint;
use harness_base::http::{Body, TransportFailure, TransportKind};
use harness_config::EndpointKind;

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The HTTP status of the first URL asked.
    pub status: u16,
    pub fit: Fit,
    /// What answered, in words (`GET …/v1/models lists 1 model`).
    pub what: String,
}

/// Whether what answered is the configured kind of server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    Fits,
    /// It answers as such a server does while it is not ready (408, 429,
    /// 5xx): loading, or a gateway in front of it.
    NotReady,
    /// Another kind of service.
    Misfit,
}

/// What `run` finds before its first task (docs/operating.md, "Endpoints and
/// retries").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// The configured kind of server answers.
    Answers,
    /// Nothing answers HTTP there (the words name the host and port): the
    /// run waits for a later one.
    Unreachable(String),
    /// Something answers that is not the configured kind of server: a
    /// setup fault, in words naming the key to fix.
    NotTheServer(String),
    /// The server's certificate was refused (signed by no trusted root: a
    /// private CA that `[tls] ca_file` does not name; or not valid for this
    /// connection): a setup fault, in words saying what to do.
    Untrusted(String),
}

/// A request of the probe that got no HTTP answer: the words name the host
/// and port ([`super::errors::unanswered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unanswered {
    pub words: String,
    /// The server's certificate was refused.
    pub untrusted: bool,
    /// `https://` to a server that answers plain HTTP on that port.
    pub plain_http: bool,
}

impl Unanswered {
    pub(super) fn of(e: &reqwest::Error, url: &str) -> Unanswered {
        let failure = TransportFailure::of(e, Some(url));
        Unanswered {
            words: super::errors::unanswered_words(&failure, None),
            untrusted: failure.kind == TransportKind::Untrusted,
            plain_http: failure
                .cause
                .as_deref()
                .is_some_and(|c| c.contains("plain http")),
        }
    }
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.words)
    }
}

impl Probe {
    /// Why what answered is not the configured kind of server, naming the
    /// key to fix: what `test-runpod` and `run` say alike.
    pub fn misfit(&self, kind: EndpointKind) -> String {
        match kind {
            EndpointKind::Openai => format!(
                "{}: not an OpenAI-compatible server; check [openai] base_url (llama-server: http://HOST:PORT/v1)",
                self.what
            ),
            EndpointKind::Runpod => format!(
                "{}: not a RunPod endpoint; check [runpod] endpoint_id, base_url or endpoint_url",
                self.what
            ),
        }
    }
}

/// The endpoint as it looks at what answers at its address
/// ([`Endpoint::prober`]).
pub struct Prober<'a>(pub(crate) &'a Endpoint);

/// Bytes of a probe's answer read at most.
const MAX_BYTES: usize = 1 << 20;

impl Prober<'_> {
    /// Asks what is at the endpoint's address; `Err` when nothing answers
    /// HTTP there (the words name the host and port).
    pub async fn probe(&self) -> Result<Probe, Unanswered> {
        match self.0.cfg.kind {
            EndpointKind::Openai => {
                let models = format!("{}/models", self.0.base_url());
                let (status, body) = self.get(&models, true).await?;
                let probe = |fit, what| Probe { status, fit, what };
                match status {
                    200..=299 => Ok(match body.as_deref().and_then(model_count) {
                        Some(n) => probe(Fit::Fits, format!("GET {models} lists {n} model(s)")),
                        None => probe(
                            Fit::Misfit,
                            format!(
                                "GET {models} answered HTTP {status} without a model list{}",
                                shape(body.as_deref())
                            ),
                        ),
                    }),
                    401 | 403
                        if body
                            .as_deref()
                            .is_some_and(super::errors::is_error_envelope) =>
                    {
                        Ok(probe(
                            Fit::Fits,
                            format!(
                                "GET {models} answered HTTP {status} as an OpenAI-compatible server refusing a key does"
                            ),
                        ))
                    }
                    408 | 429 | 500..=599 => Ok(probe(
                        Fit::NotReady,
                        format!(
                            "GET {models} answered HTTP {status}{}: the server is not ready (loading, or a gateway in front of it)",
                            shape(body.as_deref())
                        ),
                    )),
                    _ => {
                        let health = format!("{}/health", self.0.root());
                        let fits = matches!(self.get(&health, false).await, Ok((200..=299, Some(b))) if is_json(&b));
                        Ok(if fits {
                            probe(
                                Fit::Fits,
                                format!("GET {health} answers as llama-server's does"),
                            )
                        } else {
                            probe(
                                Fit::Misfit,
                                format!(
                                    "GET {models} answered HTTP {status} without a model list{}, and {health} is no llama-server's",
                                    shape(body.as_deref())
                                ),
                            )
                        })
                    }
                }
            }
            EndpointKind::Runpod => {
                let health = format!("{}/health", self.0.base_url());
                let (status, body) = self.get(&health, true).await?;
                let fits = body.as_deref().is_some_and(is_json);
                Ok(Probe {
                    status,
                    fit: if fits { Fit::Fits } else { Fit::Misfit },
                    what: format!(
                        "GET {health} answered HTTP {status}{}",
                        if fits {
                            String::new()
                        } else {
                            shape(body.as_deref())
                        }
                    ),
                })
            }
        }
    }

    /// Whether the configured kind of server answers, before a run's first
    /// task: for the `openai` kind [`Prober::probe`]'s verdict; a RunPod
    /// endpoint answers its `/health` with whatever status (a worker may be
    /// cold), so any answer there is enough.
    pub async fn reach(&self) -> Reach {
        let probed = match self.0.cfg.kind {
            EndpointKind::Openai => self.probe().await,
            EndpointKind::Runpod => self.0.ping().await.map(|status| Probe {
                status,
                fit: Fit::Fits,
                what: String::new(),
            }),
        };
        match probed {
            Ok(Probe { fit: Fit::Fits, .. }) => Reach::Answers,
            Ok(
                p @ Probe {
                    fit: Fit::NotReady, ..
                },
            ) => Reach::Unreachable(p.what),
            Ok(p) => Reach::NotTheServer(p.misfit(self.0.cfg.kind)),
            Err(why) if why.untrusted => Reach::Untrusted(why.words),
            Err(why) if why.plain_http => Reach::NotTheServer(why.words),
            Err(why) => Reach::Unreachable(why.words),
        }
    }

    /// One GET within 10 s: its status and its body (`None` past the cap).
    async fn get(&self, url: &str, with_key: bool) -> Result<(u16, Option<Vec<u8>>), Unanswered> {
        let mut req = self.0.http.get(url).timeout(Duration::from_secs(10));
        if let (true, Some(key)) = (with_key, &self.0.cfg.api_key) {
            req = req.bearer_auth(key.expose());
        }
        let resp = match req.send().await {
            Ok(resp) => resp,
            Err(e) if e.is_timeout() => return Err(self.plain_http_or(&e, url).await),
            Err(e) => return Err(Unanswered::of(&e, url)),
        };
        let status = resp.status().as_u16();
        let body = match harness_base::http::read_capped(resp, MAX_BYTES).await {
            Ok(Body::Whole(bytes)) => Some(bytes),
            _ => None,
        };
        Ok((status, body))
    }
}

impl Prober<'_> {
    /// `https://` whose handshake got no answer in time: a server that
    /// speaks plain HTTP there (llama-server without TLS waits for a
    /// request line and never answers a TLS hello) or a TLS server that
    /// hangs. One plain `GET /` to the same host and port, without the
    /// key, within 5 s, tells them apart: an HTTP answer is the scheme to
    /// fix; anything else stays the timeout it was. A 400 is what a TLS
    /// server (nginx, Go's, a cloud balancer) says to plain HTTP on its
    /// port: a slow TLS server, not a plain one.
    async fn plain_http_or(&self, e: &reqwest::Error, url: &str) -> Unanswered {
        let timed_out = Unanswered::of(e, url);
        let Ok(mut plain) = reqwest::Url::parse(url) else {
            return timed_out;
        };
        let (Some(host), Some(port)) = (
            plain.host_str().map(str::to_owned),
            plain.port_or_known_default(),
        ) else {
            return timed_out;
        };
        if plain.scheme() != "https" || plain.set_scheme("http").is_err() {
            return timed_out;
        }
        let _ = plain.set_port(Some(port));
        plain.set_path("/");
        plain.set_query(None);
        let _ = plain.set_username("");
        let _ = plain.set_password(None);
        let answered = self
            .0
            .http
            .get(plain.as_str())
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match answered {
            Ok(resp) if resp.status() != reqwest::StatusCode::BAD_REQUEST => Unanswered {
                words: format!(
                    "{host}:{port} gave no TLS answer, and answers plain http there (HTTP {}): the server speaks plain http: use http:// in the URL, not https://",
                    resp.status().as_u16()
                ),
                untrusted: false,
                plain_http: true,
            },
            Ok(_) | Err(_) => timed_out,
        }
    }
}

/// How many models a `/v1/models` answer lists, when it is a model list.
fn model_count(body: &[u8]) -> Option<usize> {
    #[derive(Deserialize)]
    struct Models {
        data: Vec<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Models>(body)
        .ok()
        .map(|m| m.data.len())
}

fn is_json(body: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
}

/// What a body that is not the expected one looks like: ` (an HTML page)`.
fn shape(body: Option<&[u8]>) -> String {
    let Some(body) = body else {
        return " (a body over 1 MiB)".into();
    };
    let start =
        String::from_utf8_lossy(harness_base::text::prefix_bytes_of(body, 256)).to_lowercase();
    let start = start.trim_start();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        " (an HTML page)".into()
    } else if is_json(body) {
        " (JSON of another shape)".into()
    } else if body.is_empty() {
        " (no body)".into()
    } else {
        " (a body that is not JSON)".into()
    }
}
