//! From raw sections to the resolved [`Config`](super::Config) parts:
//! defaults applied, paths made absolute, URLs and hosts checked, secrets
//! read through [`Secrets`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use harness_base::redact::Secret;

use super::limits::{bounds, check_finite, check_range};
use super::locate::expand_home;
use super::raw::{RawEndpoint, RawModel, RawNoteworx, RawOpenai, RawPaths, RawRunpod, RawWebfetch};
use super::secrets::Secrets;
use super::value::{check_http_url, resolve_file};
use super::{
    EndpointConfig, EndpointKind, ModelConfig, NoteworxConfig, Paths, TlsConfig, WebfetchConfig,
};

/// Request fields the harness owns; `[model.extra]` may not set them.
pub(super) const RESERVED_EXTRA_KEYS: &[&str] =
    &["messages", "tools", "stream", "chat_template_kwargs"];

pub(super) fn resolve_endpoint(
    endpoint: &RawEndpoint,
    runpod: &RawRunpod,
    openai: &RawOpenai,
    secrets: &Secrets<'_>,
) -> Result<EndpointConfig, String> {
    match endpoint.kind {
        EndpointKind::Openai => {
            let o = openai;
            if o.base_url.trim().is_empty() {
                return Err("[openai] base_url is required when [endpoint] kind = \"openai\" (for llama-server: \"http://127.0.0.1:8080/v1\")".into());
            }
            check_http_url(&o.base_url, "[openai] base_url")?;
            check_range(
                "[openai] request_timeout_secs",
                o.request_timeout_secs,
                bounds::TIMEOUT_SECS,
            )?;
            Ok(EndpointConfig {
                kind: EndpointKind::Openai,
                base_url: o.base_url.trim().trim_end_matches('/').to_string(),
                api_key: secrets.read("openai", "api_key_env", &o.api_key_env)?,
                api_key_env: o.api_key_env.clone(),
                model: Some(o.model.clone()).filter(|m| !m.is_empty()),
                request_timeout_secs: o.request_timeout_secs,
                poll_interval_ms: 0,
            })
        }
        EndpointKind::Runpod => {
            let r = runpod;
            let base_url = if !r.endpoint_url.trim().is_empty() {
                check_http_url(&r.endpoint_url, "[runpod] endpoint_url")?;
                r.endpoint_url.trim().trim_end_matches('/').to_string()
            } else if !r.endpoint_id.trim().is_empty() {
                check_http_url(&r.base_url, "[runpod] base_url")?;
                let id = r.endpoint_id.trim();
                if id.contains(['/', '?', '#']) || id == "." || id == ".." {
                    return Err(format!(
                        "[runpod] endpoint_id {id:?} must be a bare id, not a URL or path (use endpoint_url for a full URL)"
                    ));
                }
                format!("{}/{}", r.base_url.trim().trim_end_matches('/'), id)
            } else {
                return Err("[runpod] endpoint_id (or endpoint_url) is required when [endpoint] kind = \"runpod\"; for a llama-server reached directly set [endpoint] kind = \"openai\"".into());
            };
            check_range(
                "[runpod] request_timeout_secs",
                r.request_timeout_secs,
                bounds::TIMEOUT_SECS,
            )?;
            check_range(
                "[runpod] poll_interval_ms",
                r.poll_interval_ms,
                bounds::POLL_INTERVAL_MS,
            )?;
            Ok(EndpointConfig {
                kind: EndpointKind::Runpod,
                base_url,
                api_key: secrets.read("runpod", "api_key_env", &r.api_key_env)?,
                api_key_env: r.api_key_env.clone(),
                model: None,
                request_timeout_secs: r.request_timeout_secs,
                poll_interval_ms: r.poll_interval_ms,
            })
        }
    }
}

/// The `[paths]` folders: `~/` the home folder, a relative one against the
/// config's folder.
pub(super) fn resolve_paths(
    raw: &RawPaths,
    base: &Path,
    home: Option<&Path>,
) -> Result<Paths, String> {
    let resolve = |p: &Path, key: &str| -> Result<PathBuf, String> {
        Ok(resolve_file(base, &expand_home(p, home, key)?))
    };
    Ok(Paths {
        inbox: resolve(&raw.inbox, "[paths] inbox")?,
        done: resolve(&raw.done, "[paths] done")?,
        failed: resolve(&raw.failed, "[paths] failed")?,
        logs: resolve(&raw.logs, "[paths] logs")?,
        recurring: resolve(&raw.recurring, "[paths] recurring")?,
    })
}

pub(super) fn resolve_model(m: RawModel, context_tokens: u32) -> Result<ModelConfig, String> {
    check_range(
        "[model] max_tokens",
        u64::from(m.max_tokens),
        bounds::MAX_TOKENS,
    )?;
    check_finite("[model] temperature", m.temperature)?;
    check_finite("[model] top_p", m.top_p)?;
    if context_tokens != 0 && u64::from(context_tokens) <= u64::from(m.max_tokens) + 256 {
        return Err(format!(
            "[limits] context_tokens ({context_tokens}) must leave room for the prompt after [model] max_tokens ({}); raise context_tokens or lower max_tokens",
            m.max_tokens
        ));
    }
    let extra = to_json_map(m.extra, "[model.extra]")?;
    if let Some(key) = extra
        .keys()
        .find(|k| RESERVED_EXTRA_KEYS.contains(&k.as_str()))
    {
        return Err(format!(
            "[model.extra] may not set {key:?}: the harness builds it (use [model.chat_template_kwargs] for template options)"
        ));
    }
    let chat_template_kwargs = to_json_map(m.chat_template_kwargs, "[model.chat_template_kwargs]")?;
    if let Some(v) = chat_template_kwargs
        .get("enable_thinking")
        .filter(|v| !v.is_boolean())
    {
        return Err(format!(
            "[model.chat_template_kwargs] enable_thinking must be true or false, not {v}"
        ));
    }
    Ok(ModelConfig {
        temperature: m.temperature,
        top_p: m.top_p,
        top_k: m.top_k,
        max_tokens: m.max_tokens,
        replay_thinking: m.replay_thinking,
        chat_template_kwargs,
        extra,
    })
}

/// `[tools.webfetch]`; `use_ca_file` only with a `[tls] ca_file` to use
/// (refused without one, webfetch on or off: it asks for what is not there).
pub(super) fn resolve_webfetch(
    w: RawWebfetch,
    tls: &TlsConfig,
) -> Result<Option<WebfetchConfig>, String> {
    if w.use_ca_file && tls.ca_file.is_none() {
        return Err(
            "[tools.webfetch] use_ca_file = true needs [tls] ca_file: set it to the PEM file of the CA to trust, or drop use_ca_file"
                .into(),
        );
    }
    if !w.enabled {
        return Ok(None);
    }
    check_range(
        "[tools.webfetch] timeout_secs",
        w.timeout_secs,
        bounds::TIMEOUT_SECS,
    )?;
    check_range(
        "[tools.webfetch] max_bytes",
        w.max_bytes,
        bounds::WEBFETCH_MAX_BYTES,
    )?;
    Ok(Some(WebfetchConfig {
        timeout_secs: w.timeout_secs,
        max_bytes: w.max_bytes,
        allow_private: w.allow_private,
        allow_hosts: hosts("[tools.webfetch] allow_hosts", w.allow_hosts)?,
        deny_hosts: hosts("[tools.webfetch] deny_hosts", w.deny_hosts)?,
        use_ca_file: w.use_ca_file,
    }))
}

pub(super) fn resolve_noteworx(
    n: RawNoteworx,
    secrets: &Secrets<'_>,
) -> Result<Option<NoteworxConfig>, String> {
    if !n.enabled || n.base_url.trim().is_empty() {
        return Ok(None);
    }
    check_http_url(&n.base_url, "[tools.noteworx] base_url")?;
    check_range(
        "[tools.noteworx] timeout_secs",
        n.timeout_secs,
        bounds::TIMEOUT_SECS,
    )?;
    if n.token_env.is_empty() {
        return Err(
            "[tools.noteworx] token_env must name the variable holding the noteworx token".into(),
        );
    }
    let token = match secrets.read("tools.noteworx", "token_env", &n.token_env)? {
        Some(token) => token,
        // Offline, noteworx is never called: an empty token is never sent.
        None if secrets.offline => Secret::new(""),
        None => return Err("noteworx token missing".into()),
    };
    Ok(Some(NoteworxConfig {
        base_url: n.base_url.trim().trim_end_matches('/').to_string(),
        token,
        token_env: n.token_env,
        agent_name: n.agent_name,
        timeout_secs: n.timeout_secs,
    }))
}

/// A host list (`allow_hosts`, `deny_hosts`): each item a host alone, read
/// as webfetch's guard reads the host it connects to — an IDN as its
/// punycode, lower-cased, without a trailing or leading dot, an IP address
/// in its canonical form. An item with a scheme, path, port or user never
/// matches a host, so a deny list of URLs would deny nothing: it is
/// refused, naming the host it meant; so is one that is no host at all (two
/// hosts in one string): docs/configuration.md, `[tools.webfetch]`.
pub(super) fn hosts(key: &str, hosts: Vec<String>) -> Result<Vec<String>, String> {
    let mut set = BTreeSet::new();
    for item in hosts {
        let trimmed = item.trim();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(meant) = host_meant(trimmed) {
            return Err(format!(
                "{key}: {item:?} is not a host alone (no scheme, path, port or user may be in it): write {meant:?}"
            ));
        }
        let host = canonical_host(trimmed.trim_start_matches('.')).ok_or_else(|| {
            format!("{key}: {item:?} is not a host name (write each host as an item of its own)")
        })?;
        set.insert(host);
    }
    Ok(set.into_iter().collect())
}

/// A host as webfetch's guard compares it; `None` when it is none.
fn canonical_host(host: &str) -> Option<String> {
    if host.contains(|c: char| c == ',' || c.is_whitespace()) {
        return None;
    }
    let unbracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    if let Ok(ip) = unbracketed.unwrap_or(host).parse::<std::net::Ipv6Addr>() {
        return Some(ip.to_string());
    }
    match url::Host::parse(host).ok()? {
        url::Host::Domain(d) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            (!d.is_empty()).then_some(d)
        }
        url::Host::Ipv4(ip) => Some(ip.to_string()),
        url::Host::Ipv6(ip) => Some(ip.to_string()),
    }
}

/// The host an item that is more than a host names; `None` for a host
/// (a name, an IPv4 address, an IPv6 address in brackets or bare).
fn host_meant(item: &str) -> Option<String> {
    let bare_ipv6 = item.parse::<std::net::Ipv6Addr>().is_ok();
    let plain = !item.contains(['/', '@', '?', '#', ':']) || bare_ipv6;
    let bracketed = item.starts_with('[') && item.ends_with(']');
    if plain || bracketed {
        return None;
    }
    let url = if item.contains("://") {
        item.to_string()
    } else {
        format!("http://{item}")
    };
    let meant = reqwest::Url::parse(&url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_default();
    Some(meant)
}

/// A TOML table as JSON; `nan` and `inf` are refused, naming the key.
pub(super) fn to_json_map(table: toml::Table, section: &str) -> Result<Map<String, Value>, String> {
    table
        .into_iter()
        .map(|(k, v)| {
            let value = toml_to_json(v).map_err(|()| {
                format!("{section} {k} holds nan or inf, which cannot be sent as JSON")
            })?;
            Ok((k, value))
        })
        .collect()
}

pub(super) fn toml_to_json(v: toml::Value) -> Result<Value, ()> {
    Ok(match v {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => Value::Number(serde_json::Number::from_f64(f).ok_or(())?),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => {
            Value::Array(a.into_iter().map(toml_to_json).collect::<Result<_, _>>()?)
        }
        toml::Value::Table(t) => Value::Object(
            t.into_iter()
                .map(|(k, v)| Ok((k, toml_to_json(v)?)))
                .collect::<Result<_, ()>>()?,
        ),
    })
}
