//! `[notify]` (docs/operating.md, "Notify" and "Digest and mail"): the ping
//! and failure URLs, how the failure report is written, who gets the digest
//! by mail (never without `[mail]`) and at what time of day ([`TimeOfDay`],
//! 07:00 unless written).

use harness_base::redact::Secret;

use super::mail::MailAddress;
use super::raw::{FailureFormat, RawNotify};
use super::secrets::{self, Secrets};
use super::value::check_keyed_url;

/// `[notify]`, resolved: each URL an http(s) URL, or absent.
#[derive(Debug, Clone, PartialEq)]
pub struct NotifyConfig {
    pub ping_url: Option<String>,
    pub on_failure_url: Option<String>,
    /// The URLs read from the environment, each a secret whole.
    pub from_env: Vec<Secret>,
    pub on_failure_format: FailureFormat,
    /// Who gets the digest (and, with `on_failure_mail`, each failed
    /// run's result); empty: no mail.
    pub digest_to: Vec<MailAddress>,
    /// When the digest is due each day, in `[schedule] timezone`.
    pub digest_at: TimeOfDay,
    pub on_failure_mail: bool,
}

/// When the digest is due when `digest_at` is not set: 07:00.
pub const DEFAULT_DIGEST_AT: TimeOfDay = TimeOfDay { hour: 7, minute: 0 };

impl Default for NotifyConfig {
    /// Nobody told, and the digest's time the documented default.
    fn default() -> Self {
        NotifyConfig {
            ping_url: None,
            on_failure_url: None,
            from_env: Vec::new(),
            on_failure_format: FailureFormat::default(),
            digest_to: Vec::new(),
            digest_at: DEFAULT_DIGEST_AT,
            on_failure_mail: false,
        }
    }
}

impl NotifyConfig {
    /// A key written into the URLs: a password or lone user name, the
    /// values of secret-named query keys, and every path segment of 16
    /// characters or more (a check's UUID, a ping key, a webhook's token:
    /// whoever knows the URL can ping it).
    /// A URL read from the environment is a secret whole.
    pub fn secrets(&self) -> Vec<Secret> {
        let mut out = self.from_env.clone();
        for url in self.ping_url.iter().chain(&self.on_failure_url) {
            out.extend(secrets::url_secrets(url));
            if let Ok(u) = reqwest::Url::parse(url) {
                out.extend(
                    u.path_segments()
                        .into_iter()
                        .flatten()
                        .filter(|s| s.len() >= 16)
                        .map(Secret::new),
                );
            }
        }
        out
    }
}

/// A time of day to the minute, as `HH:MM` (24-hour) writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeOfDay {
    hour: u8,
    minute: u8,
}

impl TimeOfDay {
    /// `HH:MM`, two digits each (`07:30`, `23:59`); `None` for anything else.
    pub fn parse(text: &str) -> Option<TimeOfDay> {
        let (hour, minute) = text.split_once(':')?;
        let two_digits = |s: &str| {
            (s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u8>().ok())
                .flatten()
        };
        let (hour, minute) = (two_digits(hour)?, two_digits(minute)?);
        (hour < 24 && minute < 60).then_some(TimeOfDay { hour, minute })
    }

    pub fn hour(self) -> u32 {
        u32::from(self.hour)
    }

    pub fn minute(self) -> u32 {
        u32::from(self.minute)
    }
}

impl std::fmt::Display for TimeOfDay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02}:{:02}", self.hour, self.minute)
    }
}

/// `[notify]`; `mail` says whether the file has a `[mail]` section to
/// send the digest through. A URL may come from the variable (or systemd
/// credential) its `*_env` key names, as `api_key_env` does: then the
/// group-readable file need not hold a webhook's token.
pub(super) fn resolve_notify(
    n: RawNotify,
    mail: bool,
    secrets: &Secrets<'_>,
) -> Result<NotifyConfig, String> {
    let mut from_env = Vec::new();
    // The URLs hold keys: an error names the key, never the URL.
    let mut url = |value: Option<String>,
                   var: Option<String>,
                   key: &str|
     -> Result<Option<String>, String> {
        let written = value
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty());
        let var = var.map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let value = match (written, var) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "[notify] {key} and {key}_env are both set: keep one (the _env key names the variable holding the URL)"
                ));
            }
            (written, None) => written,
            (None, Some(var)) => {
                let secret = secrets.read("notify", &format!("{key}_env"), &var)?;
                secret.map(|s| {
                    from_env.push(s.clone());
                    s.expose().to_string()
                })
            }
        };
        match value {
            None => Ok(None),
            Some(v) => check_keyed_url(&v, &format!("[notify] {key}")).map(|_| Some(v)),
        }
    };
    let ping_url = url(n.ping_url, n.ping_url_env, "ping_url")?;
    let on_failure_url = url(n.on_failure_url, n.on_failure_url_env, "on_failure_url")?;
    let digest_to = n
        .digest_to
        .iter()
        .map(|to| MailAddress::parse("[notify] digest_to", to))
        .collect::<Result<Vec<_>, _>>()?;
    if !digest_to.is_empty() && !mail {
        return Err("[notify] digest_to needs a [mail] section to send through: add [mail] with smtp_url and from (docs/operating.md, \"Digest and mail\")".into());
    }
    if n.on_failure_mail && digest_to.is_empty() {
        return Err("[notify] on_failure_mail = true mails to [notify] digest_to, which names nobody: add the addresses to digest_to".into());
    }
    if n.digest_at.is_some() && digest_to.is_empty() {
        return Err("[notify] digest_at is when the digest is mailed to [notify] digest_to, which names nobody: add the addresses to digest_to".into());
    }
    let digest_at = match n.digest_at.as_deref().map(str::trim) {
        None => DEFAULT_DIGEST_AT,
        Some(at) => TimeOfDay::parse(at).ok_or_else(|| {
            format!(
                "[notify] digest_at: {:?} is not a time of day as HH:MM (24-hour, e.g. \"07:30\", in [schedule] timezone)",
                harness_base::text::clip(at, 40)
            )
        })?,
    };
    Ok(NotifyConfig {
        ping_url,
        on_failure_url,
        from_env,
        on_failure_format: n.on_failure_format,
        digest_to,
        digest_at,
        on_failure_mail: n.on_failure_mail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_digest_time_is_seven_in_the_morning() {
        assert_eq!(NotifyConfig::default().digest_at.to_string(), "07:00");
        assert_eq!(NotifyConfig::default().digest_at, DEFAULT_DIGEST_AT);
    }

    #[test]
    fn a_time_of_day_is_hh_mm_and_nothing_else() {
        assert_eq!(
            TimeOfDay::parse("06:30").map(|t| t.to_string()).as_deref(),
            Some("06:30")
        );
        assert_eq!(
            TimeOfDay::parse("23:59").map(|t| (t.hour(), t.minute())),
            Some((23, 59))
        );
        for bad in [
            "24:00", "7:00", "07:60", "07:0", "+7:00", "07:00:00", "7am", "",
        ] {
            assert_eq!(TimeOfDay::parse(bad), None, "{bad}");
        }
    }
}
