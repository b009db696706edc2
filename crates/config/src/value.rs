//! Rules for single values of the config: a path made absolute against
//! the config file's folder, an http(s) URL.

use std::path::{Path, PathBuf};

/// `p` made absolute against the config file's folder.
pub fn resolve_file(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// As [`check_http_url`], for a URL that may hold a key (a ping URL, a
/// collector's): the error names the key and what is wrong, never the URL.
pub(super) fn check_keyed_url(url: &str, what: &str) -> Result<reqwest::Url, String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("{what} is not a valid URL ({e})"))?;
    if matches!(u.scheme(), "http" | "https") && u.host().is_some() {
        return Ok(u);
    }
    let scheme = if u.scheme().len() <= 10 {
        u.scheme()
    } else {
        "another"
    };
    Err(format!(
        "{what} must be an http(s) URL with a host (its scheme is {scheme})"
    ))
}

/// `url` is an http(s) URL with a host; `what` names the key in the error,
/// which shows the URL without its userinfo (docs/operating.md, "Records").
pub(super) fn check_http_url(url: &str, what: &str) -> Result<(), String> {
    match reqwest::Url::parse(url.trim()) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        Ok(u) => Err(format!(
            "{what} must be an http(s) URL, not {:?} (scheme {})",
            without_userinfo(url),
            u.scheme()
        )),
        Err(e) => Err(format!(
            "{what} {:?} is not a valid URL: {e}",
            without_userinfo(url)
        )),
    }
}

/// `url` with what stands before the last `@` of its authority (the user
/// and password) written `***`; read as text, so a URL that does not parse
/// is shown the same way.
fn without_userinfo(url: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[after_scheme..];
    let authority = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority].rfind('@') {
        Some(at) => format!("{}***{}", &url[..after_scheme], &rest[at..]),
        None => url.to_string(),
    }
}
