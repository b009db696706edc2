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

/// `url` is an http(s) URL with a host; `what` names the key in the error.
pub(super) fn check_http_url(url: &str, what: &str) -> Result<(), String> {
    match reqwest::Url::parse(url.trim()) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        Ok(u) => Err(format!(
            "{what} must be an http(s) URL, not {:?} (scheme {})",
            url,
            u.scheme()
        )),
        Err(e) => Err(format!("{what} {url:?} is not a valid URL: {e}")),
    }
}
