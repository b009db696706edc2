//! The `webfetch` tool (SPEC §7): an HTTP(S) GET the model aims, so every URL
//! is untrusted.
//!
//! The network guard decides on the address actually connected to: host
//! names go through `GuardedResolver`, which drops private and reserved
//! addresses from what DNS returns (no gap between check and connect, so DNS
//! rebinding cannot slip through), and IP-literal hosts are checked before
//! any connection (the URL parser has already turned `2130706433`, `0x7f.1`
//! and `127.1` into `127.0.0.1`). Every redirect is checked again, at most 5
//! are followed, and the body is read only up to `max_bytes`.

use crate::config::Redactor;
use std::error::Error as StdError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect::Policy;

use super::ToolOutput;
use super::text::page;
use crate::base::text::chars;
use crate::config::WebfetchConfig;

/// Redirects followed at most.
pub const MAX_REDIRECTS: usize = 5;

/// Elements whose text is not page content.
const HIDDEN_CSS: &str = "script, style, noscript, template, nav, header, footer, aside, form, button, svg, iframe { display: none; }";

/// A fetch refused by the guard; found again in reqwest's error chain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The host rules, shared by the first request and every redirect.
#[derive(Debug, Clone)]
struct Rules {
    allow_private: bool,
    allow_hosts: Vec<String>,
    deny_hosts: Vec<String>,
}

impl Rules {
    /// Whether to follow a redirect to `url` after `hops` earlier ones: at
    /// most [`MAX_REDIRECTS`], each target checked like the first URL.
    fn redirect(&self, hops: usize, url: &Url) -> Result<(), Refused> {
        if hops > MAX_REDIRECTS {
            return Err(Refused(format!("more than {MAX_REDIRECTS} redirects")));
        }
        self.check(url)
            .map_err(|refused| Refused(format!("a redirect was refused: {refused}")))
    }

    /// Checks a URL before any connection: scheme, host lists, IP literals.
    fn check(&self, url: &Url) -> Result<(), Refused> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refused(format!(
                "only http and https URLs can be fetched, not {}:",
                url.scheme()
            )));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => d.trim_end_matches('.').to_ascii_lowercase(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => return Err(Refused("the URL has no host".into())),
        };
        let matches = |h: &String| host == *h || host.ends_with(&format!(".{h}"));
        if self.deny_hosts.iter().any(matches) {
            return Err(Refused(format!("{host} is on the deny list")));
        }
        if !self.allow_hosts.is_empty() && !self.allow_hosts.iter().any(matches) {
            return Err(Refused(format!(
                "{host} is not on the allow list ({})",
                self.allow_hosts.join(", ")
            )));
        }
        let literal = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if let Some(ip) = literal
            && !self.allow_private
            && is_forbidden(ip)
        {
            return Err(Refused(format!("{ip} is a private or reserved address")));
        }
        Ok(())
    }
}

/// Loopback, private, link-local (metadata included), CGNAT, unspecified,
/// multicast, broadcast and other reserved addresses — and the same inside
/// IPv4-mapped, IPv4-compatible and NAT64 IPv6 forms.
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return forbidden_v4(v4);
            }
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        }
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_broadcast()
        || o[0] == 0 // "this network"
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // CGNAT 100.64/10
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF protocol assignments
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // benchmarking 198.18/15
        || o[0] >= 240 // reserved
}

/// The IPv4 address inside `::ffff:a.b.c.d`, `::a.b.c.d` or `64:ff9b::a.b.c.d`.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let mapped = s[..5] == [0, 0, 0, 0, 0] && s[5] == 0xffff;
    let compatible = s[..6] == [0, 0, 0, 0, 0, 0] && !v6.is_loopback() && !v6.is_unspecified();
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0];
    (mapped || compatible || nat64).then_some(tail)
}

/// Resolves host names and keeps only addresses the guard allows, so the
/// connection is made to a checked address.
struct GuardedResolver {
    allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| allow_private || !is_forbidden(a.ip()))
                .collect();
            if allowed.is_empty() {
                let why = if found.is_empty() {
                    format!("{host} does not resolve")
                } else {
                    format!("{host} resolves to a private or reserved address")
                };
                return Err(Box::new(Refused(why)) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// The webfetch tool: a client built once per run with the guard installed.
#[derive(Debug, Clone)]
pub struct Webfetch {
    http: reqwest::Client,
    rules: Arc<Rules>,
    max_bytes: u64,
    timeout: Duration,
    converters: Arc<tokio::sync::Semaphore>,
}

impl Webfetch {
    pub fn new(cfg: &WebfetchConfig) -> anyhow::Result<Self> {
        let rules = Arc::new(Rules {
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
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(policy)
            .dns_resolver(Arc::new(GuardedResolver {
                allow_private: cfg.allow_private,
            }))
            .no_proxy()
            .user_agent(concat!(
                "agent-harness/",
                env!("CARGO_PKG_VERSION"),
                " (webfetch tool of an LLM agent)"
            ))
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
                page_.render(offset, max_chars)
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

/// Conversions to text that may run at once (see [`Webfetch::convert`]).
const CONVERTERS: usize = 2;

/// The converter thread's stack: html2text recurses on some nestings.
const CONVERTER_STACK: usize = 32 * 1024 * 1024;

/// HTML nested deeper than this is not laid out (html5ever's tree building
/// is quadratic in the nesting depth); its tags are stripped instead.
pub const MAX_HTML_DEPTH: usize = 512;

/// HTML with more elements than this is not laid out either: the layout
/// holds about 2 KB per element (100,000 tiny elements took 220 MB).
pub const MAX_HTML_ELEMENTS: usize = 50_000;

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

/// How big a parser would find HTML: elements and nesting depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Start tags that open an element (not void, not self-closed).
    pub elements: usize,
    /// How deep they nest, estimated from above.
    pub depth: usize,
}

/// Elements that hold nothing, or that the next of their kind closes: they
/// never add depth.
const FLAT: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "li", "p", "td", "th", "tr", "option", "dt", "dd", "html", "head", "body",
];

/// Elements an end tag cannot close past (HTML's scope boundaries).
const BOUNDARIES: &[&str] = &[
    "table", "caption", "template", "applet", "object", "marquee", "svg", "math", "select",
];

/// How far down the open elements an end tag looks for its start.
const END_TAG_REACH: usize = 16;

/// The shape of HTML in one pass, erring high: an end tag closes only an
/// element open near the top and not behind a scope boundary (a parser
/// ignores the others, so `<div></x>` repeated nests as deep as it is long).
pub fn markup_shape(html: &str) -> Shape {
    let mut open: Vec<String> = Vec::new();
    let mut shape = Shape {
        elements: 0,
        depth: 0,
    };
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let closing = rest.starts_with('/');
        let name: String = rest
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .take(16)
            .collect::<String>()
            .to_ascii_lowercase();
        if name.is_empty() || FLAT.contains(&name.as_str()) {
            continue;
        }
        if closing {
            close(&mut open, &name);
            continue;
        }
        // The tag runs to its `>`; looking no further than the next `<`
        // keeps the scan linear on unclosed tags.
        let self_closed = rest
            .find(['<', '>'])
            .is_some_and(|end| rest[end..].starts_with('>') && rest[..end].ends_with('/'));
        if !self_closed {
            open.push(name);
            shape.elements += 1;
            shape.depth = shape.depth.max(open.len());
        }
    }
    shape
}

/// `</name>`: pops down to the nearest open `name`, if it is within reach
/// and no scope boundary stands above it.
fn close(open: &mut Vec<String>, name: &str) {
    for (k, el) in open.iter().enumerate().rev().take(END_TAG_REACH) {
        if el == name {
            open.truncate(k);
            return;
        }
        if BOUNDARIES.contains(&el.as_str()) {
            return;
        }
    }
}

/// The text of HTML with every tag removed, scripts and styles with their
/// content: the fallback for markup too deep or too big to lay out.
fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let lower = rest
            .get(..8)
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        let skip_to = if lower.starts_with("<script") {
            Some("</script")
        } else if lower.starts_with("<style") {
            Some("</style")
        } else {
            None
        };
        if let Some(end) = skip_to {
            // Raw text runs to its end tag, whatever it holds.
            rest = find_ascii_ci(rest, end).map_or("", |k| &rest[k + end.len()..]);
        }
        match rest.find('>') {
            Some(k) => {
                rest = &rest[k + 1..];
                out.push(' ');
            }
            None => rest = "",
        }
    }
    out.push_str(rest);
    let words: Vec<&str> = out.split_whitespace().collect();
    words.join(" ")
}

/// Where `needle` (ASCII, lower case) first occurs in `hay`, ignoring case.
fn find_ascii_ci(hay: &str, needle: &str) -> Option<usize> {
    hay.as_bytes()
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
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
    fn render(&self, offset: usize, max_chars: usize) -> ToolOutput {
        let cut = if self.truncated {
            format!(" (body cut at {} bytes)", self.bytes)
        } else {
            String::new()
        };
        let header = format!(
            "URL: {}\nStatus: {}\nContent-Type: {}\nLength: {} characters{cut}\n\n",
            self.final_url,
            self.status,
            if self.mime.is_empty() {
                "unknown"
            } else {
                &self.mime
            },
            chars(&self.text)
        );
        let text = if self.text.trim().is_empty() {
            "(the page has no readable text)"
        } else {
            &self.text
        };
        let out = page(&header, text, offset, max_chars);
        if (200..300).contains(&self.status) {
            ToolOutput::ok(out)
        } else {
            ToolOutput::error(out)
        }
    }
}

/// Readable text from HTML: content kept, scripts, styles and page chrome
/// dropped, links listed compactly at the end.
pub fn html_to_text(html: &str) -> String {
    let config = html2text::config::plain().add_css(HIDDEN_CSS);
    let text = match config {
        Ok(c) => c.string_from_read(html.as_bytes(), 120),
        Err(_) => html2text::config::plain().string_from_read(html.as_bytes(), 120),
    };
    let text = text.unwrap_or_default();
    // Collapse runs of blank lines: a small context has no room for them.
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string()
}

/// A fetch failure in a sentence the model can act on.
fn describe(e: &reqwest::Error, url: &str) -> String {
    let mut source: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(refused) = s.downcast_ref::<Refused>() {
            return format!("Refused to fetch {url}: {refused}. Fetch a public web page instead.");
        }
        source = s.source();
    }
    if e.is_timeout() {
        format!("Fetching {url} timed out.")
    } else if e.is_connect() {
        format!("Could not connect to {url}. Check the address or try another page.")
    } else {
        format!(
            "Fetching {url} failed ({}).",
            if e.is_body() {
                "the connection dropped"
            } else {
                "request error"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow_private: bool, allow: &[&str], deny: &[&str]) -> Rules {
        Rules {
            allow_private,
            allow_hosts: allow.iter().map(|s| s.to_string()).collect(),
            deny_hosts: deny.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn check(r: &Rules, url: &str) -> Result<(), Refused> {
        r.check(&Url::parse(url).unwrap())
    }

    #[test]
    fn private_and_reserved_addresses_are_refused_in_every_spelling() {
        let r = rules(false, &[], &[]);
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://127.1/",
            "http://0177.0.0.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://100.64.0.1/",
            "http://0.0.0.0/",
            "http://[::]/",
            "http://224.0.0.1/",
            "http://255.255.255.255/",
            "http://[fd00::1]/",
            "http://[fe80::1]/",
            "http://[ff02::1]/",
            "http://[::ffff:10.0.0.1]/",
            "http://[::ffff:169.254.169.254]/",
        ] {
            assert!(check(&r, url).is_err(), "{url} was allowed");
        }
        for url in [
            "http://93.184.216.34/",
            "https://[2606:4700::6810:85e5]/",
            "https://example.com/x",
        ] {
            assert_eq!(check(&r, url), Ok(()), "{url}");
        }
        assert_eq!(check(&rules(true, &[], &[]), "http://127.0.0.1/"), Ok(()));
    }

    #[test]
    fn a_redirect_to_a_private_address_is_refused_by_the_address_check() {
        // No allow list: only the address rule can refuse these.
        let r = rules(false, &[], &[]);
        for to in [
            "http://169.254.169.254/latest/meta-data/",
            "http://127.0.0.1:8080/admin",
            "http://[::ffff:10.0.0.1]/",
        ] {
            let e = r.redirect(1, &Url::parse(to).unwrap()).unwrap_err();
            assert!(
                e.0.starts_with("a redirect was refused: ") && e.0.contains("private or reserved"),
                "{to}: {e}"
            );
        }
        assert_eq!(
            r.redirect(1, &Url::parse("https://example.org/").unwrap()),
            Ok(())
        );
        assert!(
            r.redirect(
                MAX_REDIRECTS + 1,
                &Url::parse("https://example.org/").unwrap()
            )
            .unwrap_err()
            .0
            .contains("more than 5 redirects")
        );
    }

    #[test]
    fn only_http_and_https_are_fetched() {
        let r = rules(true, &[], &[]);
        for url in [
            "file:///etc/passwd",
            "ftp://example.com/",
            "gopher://example.com/",
            "data:text/plain,hi",
        ] {
            assert!(check(&r, url).is_err(), "{url}");
        }
    }

    #[test]
    fn host_lists_match_the_host_and_its_subdomains() {
        let r = rules(false, &["example.com"], &["bad.example.com"]);
        assert_eq!(check(&r, "https://example.com/"), Ok(()));
        assert_eq!(check(&r, "https://docs.example.com/"), Ok(()));
        assert!(check(&r, "https://bad.example.com/").is_err());
        assert!(check(&r, "https://x.bad.example.com/").is_err());
        assert!(check(&r, "https://notexample.com/").is_err());
        assert!(check(&r, "https://example.com.evil.org/").is_err());
    }

    #[test]
    fn markup_too_deep_to_lay_out_is_stripped_to_its_text_in_linear_time() {
        let deep = format!(
            "{}deep text{}",
            "<ul><li>".repeat(200_000),
            "</li></ul>".repeat(200_000)
        );
        assert_eq!(markup_shape(&deep).depth, 200_000);
        let page = |html: String| {
            Download {
                final_url: "https://x.example/".into(),
                status: 200,
                mime: "text/html".into(),
                kind: Kind::Html,
                charset: None,
                body: html.into_bytes(),
                truncated: false,
            }
            .into_page()
            .text
        };
        assert_eq!(page(deep), "deep text");
        let flat = "<div><p>a<p>b<br><img src=x/><li>c</li></div>".repeat(1000);
        assert_eq!(markup_shape(&flat).depth, 1);
        assert_eq!(markup_shape(&flat).elements, 1000);
        assert_eq!(markup_shape("<a><b><c/></b></a>").depth, 2);
        assert_eq!(markup_shape(&"<a".repeat(100_000)).depth, 100_000);
        // End tags a parser ignores do not close anything.
        assert_eq!(markup_shape(&"<div></x>".repeat(10_000)).depth, 10_000);
        assert_eq!(markup_shape(&"<div><table></div>".repeat(1000)).depth, 2000);
        assert_eq!(
            markup_shape(&format!("<div>{}</div>", "<span>".repeat(40))).depth,
            41
        );
        assert_eq!(markup_shape("<div><span><b></div><i></i>").depth, 3);
        assert_eq!(page("<div></x>".repeat(10_000) + "end"), "end");
    }

    #[test]
    fn pages_of_too_many_elements_are_stripped_and_lose_scripts_and_styles() {
        let many = "<i>x</i>".repeat(MAX_HTML_ELEMENTS + 1);
        assert_eq!(markup_shape(&many).depth, 1);
        assert_eq!(markup_shape(&many).elements, MAX_HTML_ELEMENTS + 1);
        let page = Download {
            final_url: "https://x.example/".into(),
            status: 200,
            mime: "text/html".into(),
            kind: Kind::Html,
            charset: None,
            body: format!("<SCRIPT>var a = '<i>';</SCRIPT><style>i {{}}</style>{many}")
                .into_bytes(),
            truncated: false,
        }
        .into_page();
        assert_eq!(page.text.len(), 2 * (MAX_HTML_ELEMENTS + 1) - 1);
        assert!(page.text.starts_with("x x"));
        assert_eq!(strip_tags("a<script>never</script"), "a");
        assert_eq!(strip_tags("a <b>bold</b> <i unclosed"), "a bold");
    }

    #[test]
    fn html_becomes_compact_readable_text() {
        let html = r#"<html><head><title>T</title><style>body{color:red}</style><script>alert(1)</script></head>
            <body><nav><a href="/">Home</a> | <a href="/about">About</a></nav><header>Site header</header>
            <main><h1>Evaluation</h1><p>Use <a href="https://example.org/paper">held-out</a> sets.</p>
            <ul><li>one</li><li>two</li></ul></main><footer>Copyright</footer></body></html>"#;
        let text = html_to_text(html);
        assert!(text.contains("# Evaluation"), "{text}");
        assert!(text.contains("held-out"), "{text}");
        assert!(text.contains("https://example.org/paper"), "{text}");
        assert!(text.contains("* one"), "{text}");
        for gone in ["alert", "color:red", "Home", "Site header", "Copyright"] {
            assert!(!text.contains(gone), "{gone} survived: {text}");
        }
    }
}
