//! The `webfetch` tool (docs/tools.md, "webfetch"): an HTTP(S) GET the model
//! aims, so every URL is untrusted.
//!
//! The network guard decides on the address actually connected to: host
//! names go through `GuardedResolver`, which drops private and reserved
//! addresses, and those on the deny list, from what DNS returns (no gap
//! between check and connect, so DNS rebinding cannot slip through), and
//! IP-literal hosts are checked before any connection (the URL parser has
//! already turned `2130706433`, `0x7f.1` and `127.1` into `127.0.0.1`; the
//! host lists match `[::ffff:127.0.0.1]` and the other IPv6 spellings of an
//! IPv4 address as that address). Every redirect is checked again, at most
//! 5 are followed, and the body is read only up to `max_bytes`.

mod guard;
mod html;

pub use guard::is_forbidden;
pub use html::{MAX_HTML_DEPTH, MAX_HTML_ELEMENTS, Shape, html_to_text, markup_shape};

use harness_config::Redactor;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::redirect::Policy;

use super::ToolOutput;
use super::text::page;
use guard::{AddressRules, GuardedResolver};
use harness_base::http::{TransportFailure, TransportKind, Trust};
use harness_base::text::chars;
use harness_config::WebfetchConfig;
use html::{CONVERTER_STACK, CONVERTERS, strip_tags};

/// Redirects followed at most.
pub(crate) const MAX_REDIRECTS: usize = 5;

/// A fetch refused by the guard; found again in reqwest's error chain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The webfetch tool: a client built once per run with the guard installed.
#[derive(Debug, Clone)]
pub struct Webfetch {
    http: reqwest::Client,
    rules: Arc<AddressRules>,
    max_bytes: u64,
    timeout: Duration,
    converters: Arc<tokio::sync::Semaphore>,
}

impl Webfetch {
    /// The tool of `cfg`. `trust` is `[tls]`'s, given to it only with
    /// `use_ca_file`: a page the model chose is otherwise checked against
    /// the bundled roots alone, so a host that shows a certificate of the
    /// operator's CA is not trusted for it unless the operator says so
    /// (docs/operating.md, "TLS").
    pub fn new(cfg: &WebfetchConfig, trust: &Trust) -> anyhow::Result<Self> {
        let trust = if cfg.use_ca_file {
            trust.clone()
        } else {
            Trust::bundled()
        };
        let rules = Arc::new(AddressRules {
            allow_private: cfg.allow_private,
            allow_hosts: cfg.allow_hosts.clone(),
            deny_hosts: cfg.deny_hosts.clone(),
        });
        let redirect_rules = rules.clone();
        let policy = Policy::custom(move |attempt| {
            match redirect_rules.redirect(attempt.previous().len(), attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(refused) => attempt.error(refused),
            }
        });
        let timeout = Duration::from_secs(cfg.timeout_secs);
        let http = harness_base::http::client_acting_as("webfetch tool of an LLM agent", &trust)?
            .timeout(timeout)
            .redirect(policy)
            .dns_resolver(Arc::new(GuardedResolver {
                rules: rules.clone(),
            }))
            .no_proxy()
            .build()?;
        Ok(Webfetch {
            http,
            rules,
            max_bytes: cfg.max_bytes,
            timeout,
            converters: Arc::new(tokio::sync::Semaphore::new(CONVERTERS)),
        })
    }

    /// Fetches `url` as text; the page from character `offset`, at most
    /// `max_chars`, with secrets taken out of the whole text before paging.
    pub async fn fetch(
        &self,
        url: &str,
        offset: usize,
        max_chars: usize,
        redactor: &Redactor,
    ) -> ToolOutput {
        let parsed = match Url::parse(url) {
            Ok(u) => u,
            Err(e) => {
                return ToolOutput::error(format!(
                    "{url:?} is not a valid URL ({e}). Give a full http:// or https:// URL."
                ));
            }
        };
        if let Err(refused) = self.rules.check(&parsed) {
            return ToolOutput::error(format!(
                "Refused to fetch {url}: {refused}. Fetch a public web page instead."
            ));
        }
        // One clock for the download and the conversion to text.
        let deadline = tokio::time::Instant::now() + self.timeout + Duration::from_secs(1);
        let fetched = match tokio::time::timeout_at(deadline, self.get(parsed)).await {
            Ok(Ok(download)) => self.convert(download, deadline).await,
            Ok(Err(message)) => Err(message),
            Err(_) => Err(format!(
                "Fetching {url} timed out after {} s.",
                self.timeout.as_secs()
            )),
        };
        match fetched {
            Ok(mut page_) => {
                page_.text = redactor.redact(page_.text);
                page_.render(url, offset, max_chars)
            }
            Err(message) => ToolOutput::error(message),
        }
    }

    /// Decodes and converts a download on a thread of its own, never on the
    /// async workers: a page built to make the conversion slow or panic
    /// costs that thread, not the run. Past `deadline` the tool answers an
    /// error; at most [`CONVERTERS`] conversions run at once, so an overrun
    /// one still going holds back the next instead of piling up.
    async fn convert(
        &self,
        download: Download,
        deadline: tokio::time::Instant,
    ) -> Result<Fetched, String> {
        let slow = || {
            format!(
                "Converting {} to text took longer than the {} s fetch timeout; the page was dropped. Try another page.",
                download.final_url,
                self.timeout.as_secs()
            )
        };
        let Ok(Ok(permit)) =
            tokio::time::timeout_at(deadline, self.converters.clone().acquire_owned()).await
        else {
            return Err(slow());
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let final_url = download.final_url.clone();
        let spawned = std::thread::Builder::new()
            .name("webfetch-convert".into())
            .stack_size(CONVERTER_STACK)
            .spawn(move || {
                let converted =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| download.into_page()));
                drop(permit);
                let _ = tx.send(converted);
            });
        if spawned.is_err() {
            return Err("The page could not be converted (no thread was free).".into());
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(page_))) => Ok(page_),
            Ok(_) => Err(format!(
                "{final_url} could not be converted to text (the converter failed on it). Try another page."
            )),
            Err(_) => Err(format!(
                "Converting {final_url} to text took longer than the {} s fetch timeout; the page was dropped. Try another page.",
                self.timeout.as_secs()
            )),
        }
    }

    /// Downloads a page: status, type, and at most `max_bytes` of body.
    async fn get(&self, url: Url) -> Result<Download, String> {
        let shown = url.to_string();
        let mut resp = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| describe(&e, &shown))?;
        let status = resp.status();
        let final_url = resp.url().to_string();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let mime = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let kind = match mime.as_str() {
            "text/html" | "application/xhtml+xml" => Kind::Html,
            "" => Kind::Text,
            m if m.starts_with("text/")
                || m.ends_with("json")
                || m.ends_with("+xml")
                || m == "application/xml" =>
            {
                Kind::Text
            }
            m => {
                return Err(format!(
                    "{final_url} is {m}, which cannot be read as text (only HTML, text and JSON can)."
                ));
            }
        };
        let mut body = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = resp.chunk().await.map_err(|e| describe(&e, &final_url))? {
            let room = usize::try_from(self.max_bytes)
                .unwrap_or(usize::MAX)
                .saturating_sub(body.len());
            if chunk.len() >= room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        drop(resp); // stop reading: the rest is never downloaded
        let charset = content_type
            .split(';')
            .filter_map(|p| p.trim().strip_prefix("charset="))
            .next()
            .map(|c| c.trim_matches('"').to_string());
        Ok(Download {
            final_url,
            status: status.as_u16(),
            mime,
            kind,
            charset,
            body,
            truncated,
        })
    }
}

/// A body as downloaded, before it becomes text.
struct Download {
    final_url: String,
    status: u16,
    mime: String,
    kind: Kind,
    charset: Option<String>,
    body: Vec<u8>,
    truncated: bool,
}

impl Download {
    /// Decodes the body by its charset and turns HTML into readable text.
    fn into_page(self) -> Fetched {
        let encoding = self
            .charset
            .as_deref()
            .and_then(|c| encoding_rs::Encoding::for_label(c.as_bytes()))
            .unwrap_or(encoding_rs::UTF_8);
        let (decoded, _, _) = encoding.decode(&self.body);
        let text = match self.kind {
            Kind::Html => {
                let shape = markup_shape(&decoded);
                if shape.depth > MAX_HTML_DEPTH || shape.elements > MAX_HTML_ELEMENTS {
                    strip_tags(&decoded)
                } else {
                    html_to_text(&decoded)
                }
            }
            Kind::Text => decoded.into_owned(),
        };
        Fetched {
            final_url: self.final_url,
            status: self.status,
            mime: self.mime,
            bytes: self.body.len(),
            truncated: self.truncated,
            text,
        }
    }
}

enum Kind {
    Html,
    Text,
}

struct Fetched {
    final_url: String,
    status: u16,
    mime: String,
    bytes: usize,
    truncated: bool,
    text: String,
}

impl Fetched {
    fn render(&self, url: &str, offset: usize, max_chars: usize) -> ToolOutput {
        let cut = if self.truncated {
            format!(" (body cut at {} bytes)", self.bytes)
        } else {
            String::new()
        };
        let ok = (200..300).contains(&self.status);
        // A bare "404" over an empty page read to a 1.5B model as "no
        // readable text"; the status in words is what it repeats.
        let status = match reqwest::StatusCode::from_u16(self.status) {
            Ok(code) if !ok => format!(
                "{} {} (the page could not be fetched)",
                self.status,
                code.canonical_reason().unwrap_or("error")
            ),
            _ => self.status.to_string(),
        };
        let header = format!(
            "URL: {}\nStatus: {status}\nContent-Type: {}\nLength: {} characters{cut}\n\n",
            self.final_url,
            if self.mime.is_empty() {
                "unknown"
            } else {
                &self.mime
            },
            chars(&self.text)
        );
        let text = match (self.text.trim().is_empty(), ok) {
            (false, _) => self.text.as_str(),
            (true, true) => "(the page has no readable text)",
            // A 1.5B model repeats this line as its answer: said as "has
            // no readable text" or "the server sent no page", it never said
            // the page could not be fetched.
            (true, false) => "(no page: it could not be fetched)",
        };
        let out = page(
            &header,
            text,
            offset,
            max_chars,
            &format!("webfetch with url={url:?}"),
        );
        ToolOutput::page(out, !ok)
    }
}

/// A fetch failure in a sentence the model can act on: the guard's
/// refusal (found among the error's causes), or the failure in brief.
fn describe(e: &reqwest::Error, url: &str) -> String {
    let refused = harness_base::error::causes(e).find_map(|c| c.downcast_ref::<Refused>());
    if let Some(refused) = refused {
        return format!("Refused to fetch {url}: {refused}. Fetch a public web page instead.");
    }
    let failure = TransportFailure::of(e, None);
    match failure.kind {
        TransportKind::Timeout => format!("Fetching {url} timed out."),
        TransportKind::Refused | TransportKind::Untrusted | TransportKind::Connect => format!(
            "Could not connect to {url} ({}). Check the address or try another page.",
            failure.brief()
        ),
        TransportKind::Dropped | TransportKind::Other => {
            format!("Fetching {url} failed ({}).", failure.brief())
        }
    }
}

#[cfg(test)]
mod tests;
