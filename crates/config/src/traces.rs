//! `[traces]` (docs/budget-and-traces.md, "Traces"): where each task's
//! OpenTelemetry trace goes, the extra headers a hosted collector wants (read
//! from the environment and redacted everywhere), whether contents are
//! exported, and how long the end of a run may wait for the last batch.

use std::time::Duration;

use serde::Deserialize;

use harness_base::redact::Secret;

use super::limits::{bounds, check_range};
use super::secrets::{Secrets, secret_key, url_secrets};
use super::value::check_keyed_url;

/// `[traces]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawTraces {
    /// An OTLP/HTTP traces URL (`http://127.0.0.1:4318/v1/traces`).
    pub(super) endpoint: String,
    /// The variable holding extra headers, `key=value,…`.
    pub(super) headers_env: String,
    /// Message and tool contents are exported (redacted, capped).
    pub(super) content: bool,
    /// How long the end of a run waits for the last batch.
    pub(super) flush_secs: u64,
}

impl Default for RawTraces {
    fn default() -> Self {
        RawTraces {
            endpoint: String::new(),
            headers_env: String::new(),
            content: false,
            flush_secs: 5,
        }
    }
}

/// `[traces]`, resolved: present only when an endpoint is set.
#[derive(Debug, Clone, PartialEq)]
pub struct TracesConfig {
    pub endpoint: String,
    /// Extra request headers; a value is never shown.
    pub headers: Vec<(String, Secret)>,
    /// What of the headers is redacted everywhere ([`header_secrets`]).
    pub header_secrets: Vec<Secret>,
    pub content: bool,
    pub flush: Duration,
}

impl TracesConfig {
    /// The endpoint as a log line may show it: scheme, host, port and
    /// path, never a user, a password or a query.
    pub fn shown_endpoint(&self) -> String {
        match reqwest::Url::parse(&self.endpoint) {
            Ok(u) => format!(
                "{}://{}{}{}",
                u.scheme(),
                u.host_str().unwrap_or_default(),
                u.port().map(|p| format!(":{p}")).unwrap_or_default(),
                u.path()
            ),
            Err(_) => "(the configured URL)".into(),
        }
    }

    /// Every value the records, logs and spans must never contain.
    pub fn secrets(&self) -> Vec<Secret> {
        let mut out = url_secrets(&self.endpoint);
        out.extend(self.header_secrets.iter().cloned());
        out
    }
}

/// Headers the exporter sets itself: a configured one would break the
/// request or lie about its body.
const OWN_HEADERS: [&str; 10] = [
    "content-type",
    "content-length",
    "content-encoding",
    "host",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "upgrade",
    "expect",
];

/// A header value at least this long is taken for a key whatever the
/// header's name (Honeycomb's `x-honeycomb-team`, a tenant's token).
const KEY_LENGTH: usize = 16;

pub(super) fn resolve_traces(
    t: RawTraces,
    secrets: &Secrets<'_>,
) -> Result<Option<TracesConfig>, String> {
    check_range("[traces] flush_secs", t.flush_secs, bounds::FLUSH_SECS)?;
    let endpoint = t.endpoint.trim().to_string();
    if endpoint.is_empty() {
        if t.content || !t.headers_env.is_empty() {
            return Err("[traces] endpoint is not set, so nothing is exported: set it (an OTLP/HTTP traces URL such as \"http://127.0.0.1:4318/v1/traces\") or remove the other [traces] keys".into());
        }
        return Ok(None);
    }
    check_endpoint(&endpoint)?;
    let (headers, header_secrets) = match secrets.read("traces", "headers_env", &t.headers_env)? {
        Some(value) => parse_headers(value.expose(), &t.headers_env)?,
        None => (Vec::new(), Vec::new()),
    };
    Ok(Some(TracesConfig {
        endpoint,
        headers,
        header_secrets,
        content: t.content,
        flush: Duration::from_secs(t.flush_secs),
    }))
}

/// An http(s) URL with a host and a path. The URL may hold a key: an
/// error names what is wrong, never the URL.
fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let u = check_keyed_url(endpoint, "[traces] endpoint").map_err(|e| {
        format!("{e}: an OTLP/HTTP URL, written whole, as \"http://HOST:4318/v1/traces\" (a gRPC collector's port, 4317, takes no HTTP)")
    })?;
    if u.path() == "/" {
        return Err("[traces] endpoint has no path: an OTLP/HTTP collector takes traces at /v1/traces (write \"http://HOST:4318/v1/traces\")".into());
    }
    Ok(())
}

/// `key=value,…` as OTLP exporters read `OTEL_EXPORTER_OTLP_HEADERS`:
/// items split at `,`, each at its first `=`, both sides trimmed, the
/// value percent-decoded. An error names the item by its place and the
/// header by its name, never a value. With the headers, what of them is
/// secret: see [`header_secrets`].
fn parse_headers(text: &str, var: &str) -> Result<Headers, String> {
    let (mut out, mut secrets) = (Vec::new(), Vec::new());
    for (n, item) in text.split(',').enumerate() {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let at = |what: &str| {
            format!(
                "[traces] headers_env: item {} of {var} {what} (the form is key=value,key2=value2)",
                n + 1
            )
        };
        let Some((name, raw_value)) = item.split_once('=') else {
            return Err(at("has no `=`"));
        };
        let name = name.trim().to_ascii_lowercase();
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(at("is not named by a valid header name"));
        }
        if OWN_HEADERS.contains(&name.as_str()) {
            return Err(at(&format!("sets {name}, which the exporter sets itself")));
        }
        let value = percent_encoding::percent_decode_str(raw_value.trim())
            .decode_utf8()
            .map_err(|_| at("holds a value that is not UTF-8 once decoded"))?;
        if reqwest::header::HeaderValue::from_str(&value).is_err() {
            return Err(at(&format!(
                "holds a value for {name} that no header may carry"
            )));
        }
        secrets.extend(header_secrets(&name, raw_value.trim(), &value));
        out.push((name, Secret::new(value.into_owned())));
    }
    Ok((out, secrets))
}

/// The headers, and what of them is secret.
type Headers = (Vec<(String, Secret)>, Vec<Secret>);

/// What of a header is redacted everywhere: the value of a header named
/// like a credential (`authorization`, `cookie`, a name with `key`,
/// `token`, `auth`, `secret`, … in it) or of [`KEY_LENGTH`] characters or
/// more — as written (percent-encoded) and decoded, and the credential
/// after its scheme (`Bearer KEY`). A short value of another header (a
/// project's name) is no secret: redacting it would blank that word in
/// every answer.
fn header_secrets(name: &str, raw: &str, value: &str) -> Vec<Secret> {
    let credential =
        matches!(name, "authorization" | "proxy-authorization" | "cookie") || secret_key(name);
    if !credential && value.chars().count() < KEY_LENGTH {
        return Vec::new();
    }
    let mut out = vec![Secret::new(value), Secret::new(raw)];
    if let Some((_, key)) = value.split_once(' ') {
        out.push(Secret::new(key.trim()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn raw(endpoint: &str, headers_env: &str) -> RawTraces {
        RawTraces {
            endpoint: endpoint.into(),
            headers_env: headers_env.into(),
            ..RawTraces::default()
        }
    }

    #[test]
    fn headers_are_read_decoded_and_keys_among_them_are_secrets() {
        let env = env_of(&[(
            "OTLP_HEADERS",
            "Authorization=Bearer%20s3cr3t-token, x-project-name = harness ,x-api-key=k3y,x-honeycomb-team=aaaabbbbccccdddd1234",
        )]);
        let secrets = Secrets {
            env: &env,
            offline: false,
        };
        let t = resolve_traces(
            raw("https://collector.example/v1/traces", "OTLP_HEADERS"),
            &secrets,
        )
        .unwrap()
        .unwrap();
        let names: Vec<&str> = t.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "authorization",
                "x-project-name",
                "x-api-key",
                "x-honeycomb-team"
            ]
        );
        assert_eq!(t.headers[0].1.expose(), "Bearer s3cr3t-token");
        let secrets: Vec<String> = t.secrets().iter().map(|s| s.expose().to_string()).collect();
        for secret in [
            "Bearer s3cr3t-token",
            "Bearer%20s3cr3t-token",
            "s3cr3t-token",
            "k3y",
            "aaaabbbbccccdddd1234",
        ] {
            assert!(
                secrets.contains(&secret.to_string()),
                "{secret} is not redacted"
            );
        }
        assert!(
            !secrets.contains(&"harness".to_string()),
            "a project's name would be blanked in every answer"
        );
        assert_eq!(t.flush, Duration::from_secs(5));
    }

    #[test]
    fn a_malformed_header_item_is_named_without_its_value() {
        for (value, says) in [
            ("authorization Bearer hunter2secret", "has no `=`"),
            ("bad name=hunter2secret", "valid header name"),
            ("content-type=hunter2secret", "sets content-type"),
            ("Content-Encoding=hunter2secret", "sets content-encoding"),
            ("x-key=hunter2secret%0Aevil", "no header may carry"),
            ("x-key=%FFhunter2secret", "not UTF-8"),
        ] {
            let e = parse_headers(value, "OTLP_HEADERS").unwrap_err();
            assert!(e.contains(says), "{value}: {e}");
            assert!(e.contains("item 1 of OTLP_HEADERS"), "{e}");
            assert!(!e.contains("hunter2"), "the value leaked: {e}");
        }
    }

    #[test]
    fn the_endpoint_must_be_an_otlp_http_url_with_a_path() {
        let env = env_of(&[]);
        let secrets = Secrets {
            env: &env,
            offline: false,
        };
        for (url, says) in [
            ("grpc://127.0.0.1:4317", "its scheme is grpc"),
            ("127.0.0.1:4318/v1/traces", "not a valid URL"),
            ("http://127.0.0.1:4318", "has no path"),
            ("http://127.0.0.1:4318/", "has no path"),
            ("not a url", "not a valid URL"),
        ] {
            let e = resolve_traces(raw(url, ""), &secrets).unwrap_err();
            assert!(e.contains("[traces] endpoint"), "{url}: {e}");
            assert!(e.contains(says), "{url}: {e}");
        }
        assert_eq!(resolve_traces(raw("", ""), &secrets), Ok(None));
        let e = resolve_traces(raw("", "OTLP_HEADERS"), &secrets).unwrap_err();
        assert!(e.contains("endpoint is not set"), "{e}");
    }

    #[test]
    fn a_missing_headers_variable_is_a_configuration_error() {
        let env = env_of(&[]);
        let secrets = Secrets {
            env: &env,
            offline: false,
        };
        let e = resolve_traces(
            raw("http://127.0.0.1:4318/v1/traces", "OTLP_HEADERS"),
            &secrets,
        )
        .unwrap_err();
        assert!(
            e.contains("OTLP_HEADERS") && e.contains("[traces] headers_env"),
            "{e}"
        );
    }

    #[test]
    fn the_shown_endpoint_drops_user_password_and_query() {
        let t = TracesConfig {
            endpoint: "https://user:pa55word@otlp.example:4318/v1/traces?api_key=k3y".into(),
            headers: Vec::new(),
            header_secrets: Vec::new(),
            content: false,
            flush: Duration::from_secs(1),
        };
        assert_eq!(t.shown_endpoint(), "https://otlp.example:4318/v1/traces");
        let secrets: Vec<String> = t.secrets().iter().map(|s| s.expose().to_string()).collect();
        assert!(secrets.contains(&"pa55word".to_string()) && secrets.contains(&"k3y".to_string()));
    }
}
