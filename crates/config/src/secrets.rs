//! Which values are secret: those read from the environment variables the
//! file names (or systemd credentials), the keys written into a URL, and
//! secret-looking `--set` values. [`Secret`] and the one
//! [`Redactor`](harness_base::redact::Redactor) they go to are `base`'s
//! (`harness_base::redact`), re-exported at this crate's root.

use std::path::Path;

use harness_base::redact::Secret;

/// The keys written into a URL (the userinfo of every configured URL is a
/// secret: docs/operating.md, "Records"), each as written and percent-decoded:
///
/// - the password;
/// - the user name, unless a password follows it and it is a plain word
///   ([`plain_user`]): a user name standing alone (`https://TOKEN@h/`) is
///   the key, and so is one that looks like a token whatever follows it
///   (`https://ghp_…:x-oauth-basic@h/`);
/// - the whole userinfo, `user:password`, so a password too short to be
///   looked for alone (under 4 bytes, see
///   [`Redactor`](harness_base::redact::Redactor)) is still never
///   shown inside the URL (`http://bob:pw@h/` is shown `http://***@h/`);
///   when even that is under 4 bytes, `user:password@`;
/// - the values of query keys that name a secret (`api_key`, `token`, … —
///   the rule `--set` uses).
pub(super) fn url_secrets(url: &str) -> Vec<Secret> {
    let Ok(u) = reqwest::Url::parse(url.trim()) else {
        return Vec::new();
    };
    let mut values: Vec<String> = Vec::new();
    let decoded = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let (user, password) = (u.username(), u.password());
    if let Some(p) = password {
        values.extend([p.to_string(), decoded(p)]);
    }
    if !user.is_empty() && (password.is_none() || !plain_user(&decoded(user))) {
        values.extend([user.to_string(), decoded(user)]);
    }
    if let Some(p) = password {
        for (user, p) in [
            (user.to_string(), p.to_string()),
            (decoded(user), decoded(p)),
        ] {
            let userinfo = format!("{user}:{p}");
            values.push(if userinfo.len() < 4 {
                userinfo + "@"
            } else {
                userinfo
            });
        }
    }
    for pair in u.query().unwrap_or_default().split('&') {
        let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
        if secret_key(key) {
            values.push(raw.to_string());
        }
    }
    for (key, value) in u.query_pairs() {
        if secret_key(&key) {
            values.push(value.into_owned());
        }
    }
    values.sort_unstable();
    values.dedup();
    values
        .into_iter()
        .filter(|v| !v.is_empty())
        .map(Secret::new)
        .collect()
}

/// Whether a user name followed by a password is a plain word, not a key:
/// 1 to 16 characters, ASCII letters with `-`, `_` or `.` between them,
/// and at most two digits at the end (`bob`, `admin`, `x-access-token`,
/// `oauth2`). Such a name is left alone: looked for everywhere, it would
/// make `***` of that word in every record. Any other name — longer, with
/// a digit inside, with other characters (`ghp_TOKENUSERNAME42`) — may be
/// the key itself and is a secret.
pub(super) fn plain_user(user: &str) -> bool {
    let word = user.trim_end_matches(|c: char| c.is_ascii_digit());
    let digits = user.len() - word.len();
    let separator = |c: char| matches!(c, '-' | '_' | '.');
    user.len() <= 16
        && digits <= 2
        && word.starts_with(|c: char| c.is_ascii_alphabetic())
        && word.ends_with(|c: char| c.is_ascii_alphabetic())
        && word
            .chars()
            .all(|c| c.is_ascii_alphabetic() || separator(c))
        && !word
            .as_bytes()
            .windows(2)
            .any(|w| separator(char::from(w[0])) && separator(char::from(w[1])))
}

/// Whether a config key names a secret: one of its words (split at `_`,
/// `-` and `.`) is `key`, `token`, `password`, … — `api_key`, `auth_token`,
/// but not `max_tokens` or `keep`.
pub(super) fn secret_key(key: &str) -> bool {
    const WORDS: &[&str] = &[
        "key",
        "apikey",
        "token",
        "password",
        "passwd",
        "secret",
        "auth",
        "credential",
        "credentials",
        "bearer",
    ];
    key.to_ascii_lowercase()
        .split(['_', '-', '.'])
        .any(|w| WORDS.contains(&w))
}

/// The secrets in a `--set KEY=VALUE` (docs/resume-replay-eval.md, "Eval"),
/// read the way the config reads the value: each string under a secret-looking
/// key (however deep in a table), and the user and password of each URL.
pub(super) fn value_secrets(key: &str, value: &toml::Value, out: &mut Vec<String>) {
    match value {
        toml::Value::String(s) => {
            if secret_key(key) {
                out.push(s.clone());
            }
            if let Ok(u) = url::Url::parse(s)
                && (!u.username().is_empty() || u.password().is_some())
            {
                out.push(s.clone());
                out.extend(u.password().map(str::to_string));
                out.push(u.username().to_string());
            }
        }
        toml::Value::Table(t) => {
            for (k, v) in t {
                value_secrets(&format!("{key}.{k}"), v, out);
            }
        }
        toml::Value::Array(a) => a.iter().for_each(|v| value_secrets(key, v, out)),
        _ => {}
    }
}

/// The secrets among `--set` / `--matrix` values, as `eval` applies them.
pub fn setting_secrets(overrides: &[(String, String)]) -> Vec<Secret> {
    let mut out = Vec::new();
    for (key, value) in overrides {
        value_secrets(key, &setting_value(value), &mut out);
    }
    out.into_iter()
        .filter(|s| !s.is_empty())
        .map(Secret::new)
        .collect()
}

/// Whether a `--set` value is shown as `***` in `eval.json` and the table.
pub fn is_secret_setting(key: &str, value: &str) -> bool {
    let mut out = Vec::new();
    value_secrets(key, &setting_value(value), &mut out);
    !out.is_empty()
}

/// A `--set` value as the config reads it: TOML, or else a string.
pub(super) fn setting_value(value: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()))
}

/// Reads the secret named by a `*_env` setting: the environment variable,
/// or else `$CREDENTIALS_DIRECTORY/<VARIABLE>` (systemd `LoadCredential=`).
pub(super) struct Secrets<'a> {
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    /// Nothing will be contacted: a secret that is not set is no error.
    pub(super) offline: bool,
}

impl Secrets<'_> {
    /// `Ok(None)` when `var` is empty (no secret wanted). Never echoes a
    /// value that does not look like a variable name: it may be the secret.
    pub(super) fn read(
        &self,
        section: &str,
        key: &str,
        var: &str,
    ) -> Result<Option<Secret>, String> {
        if var.is_empty() {
            return Ok(None);
        }
        if !is_variable_name(var) {
            return Err(format!(
                "[{section}] {key} must name an environment variable (A-Z, 0-9 and _, not starting with a digit); \
                 this value does not look like one, so it is not shown. Did you paste the secret itself? \
                 Put the secret in a variable and write its name here."
            ));
        }
        let from_env = (self.env)(var).filter(|v| !v.trim().is_empty());
        let from_credentials = || {
            let dir = (self.env)("CREDENTIALS_DIRECTORY").filter(|d| !d.is_empty())?;
            let text = std::fs::read_to_string(Path::new(&dir).join(var)).ok()?;
            Some(text).filter(|t| !t.trim().is_empty())
        };
        match from_env.or_else(from_credentials) {
            Some(v) => Ok(Some(Secret::new(v.trim()))),
            None if self.offline => Ok(None),
            None => Err(format!(
                "environment variable {var} (named by [{section}] {key}) is not set and no systemd credential {var} was loaded; \
                 export it, or set {key} = \"\" if the service needs no secret"
            )),
        }
    }
}

/// `[A-Z_][A-Z0-9_]*`: what a `*_env` setting must hold.
pub fn is_variable_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}
