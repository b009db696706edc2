//! `[mail]` (docs/operating.md, "Digest and mail"): the SMTP server the
//! digest and the failure mails go through — `smtp://` with STARTTLS
//! required (unless `starttls = false`) or `smtps://` (TLS from the first
//! byte), the `From` address, and the credentials, read from the variables
//! (or systemd credentials) the file names, never from the file itself.
//! A mail address is checked here by the rules the mail library applies
//! ([`MailAddress`]), and handed to it by `app`, where mail is sent.

use serde::Deserialize;

use harness_base::redact::Secret;

use super::secrets::{Secrets, plain_user};

/// `[mail]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawMail {
    /// `smtp://HOST[:PORT]` or `smtps://HOST[:PORT]`.
    pub(super) smtp_url: String,
    /// The sender: `agent@example.com` or `"Agent <agent@example.com>"`.
    pub(super) from: String,
    /// The variable holding the SMTP user name (`""`: no login).
    pub(super) username_env: String,
    /// The variable holding the SMTP password.
    pub(super) password_env: String,
    /// `smtp://` upgrades with STARTTLS, and refuses a server without it.
    pub(super) starttls: bool,
}

impl Default for RawMail {
    fn default() -> Self {
        RawMail {
            smtp_url: String::new(),
            from: String::new(),
            username_env: String::new(),
            password_env: String::new(),
            starttls: true,
        }
    }
}

/// How the connection to the SMTP server is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MailSecurity {
    /// `smtp://`: plain at first, then STARTTLS, which the server must offer.
    Starttls,
    /// `smtps://`: TLS from the first byte.
    Tls,
    /// `smtp://` with `starttls = false`: nothing is encrypted.
    Plain,
}

/// `[mail]`, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct MailConfig {
    pub host: String,
    pub port: u16,
    pub security: MailSecurity,
    pub from: MailAddress,
    /// The login, when the server wants one: user name and password.
    pub login: Option<Login>,
}

/// An SMTP login; neither value is ever shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Login {
    pub username: Secret,
    pub password: Secret,
}

impl MailConfig {
    /// `smtp://host:port` or `smtps://host:port`, for messages.
    pub fn shown(&self) -> String {
        let scheme = match self.security {
            MailSecurity::Tls => "smtps",
            MailSecurity::Starttls | MailSecurity::Plain => "smtp",
        };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{scheme}://{host}:{}", self.port)
    }

    /// The values redacted everywhere: the password, and the user name
    /// unless it is a plain word (`apikey`, `bob`: the rule a URL's user
    /// name follows, docs/operating.md, "Records").
    pub fn secrets(&self) -> Vec<Secret> {
        let Some(login) = &self.login else {
            return Vec::new();
        };
        let mut out = vec![login.password.clone()];
        if !plain_user(login.username.expose()) {
            out.push(login.username.clone());
        }
        out
    }
}

/// `[mail]`, when the file has the section.
pub(super) fn resolve_mail(
    raw: Option<RawMail>,
    secrets: &Secrets<'_>,
) -> Result<Option<MailConfig>, String> {
    let Some(m) = raw else {
        return Ok(None);
    };
    let (host, port, security) = server(&m.smtp_url, m.starttls)?;
    let from = MailAddress::parse("[mail] from", &m.from)?;
    // Said before either variable is read: one alone is never a login.
    if m.username_env.is_empty() != m.password_env.is_empty() {
        return Err("[mail] username_env and password_env go together: set both (the variables holding the SMTP user name and password), or neither for a server that takes mail without a login".into());
    }
    let username = secrets.read("mail", "username_env", &m.username_env)?;
    let password = secrets.read("mail", "password_env", &m.password_env)?;
    if !m.username_env.is_empty() && security == MailSecurity::Plain && !loopback(&host) {
        return Err(format!(
            "[mail] starttls = false would send the password named by password_env in clear to {host}: use STARTTLS (remove starttls = false) or smtps://, or drop username_env and password_env for a relay that takes mail without a login"
        ));
    }
    let login = match (username, password) {
        (Some(username), Some(password)) => Some(Login { username, password }),
        // Offline (the command contacts nothing), an unset variable is no error.
        _ => None,
    };
    Ok(Some(MailConfig {
        host,
        port,
        security,
        from,
        login,
    }))
}

/// The host, port and protection `smtp_url` names. The URL never holds a
/// credential: one written there is refused without being shown.
fn server(smtp_url: &str, starttls: bool) -> Result<(String, u16, MailSecurity), String> {
    const FORM: &str = "smtp://HOST[:PORT] (STARTTLS, port 587 unless written) or smtps://HOST[:PORT] (TLS, port 465 unless written)";
    let text = smtp_url.trim();
    if text.is_empty() {
        return Err(format!("[mail] smtp_url is required in [mail]: {FORM}"));
    }
    let u = url::Url::parse(text)
        .map_err(|e| format!("[mail] smtp_url is not a URL ({e}): write {FORM}"))?;
    if !u.username().is_empty() || u.password().is_some() {
        return Err("[mail] smtp_url holds a user or password, which never go in the file (it is not shown): name the variables holding them in username_env and password_env".into());
    }
    let (security, default_port) = match (u.scheme(), starttls) {
        ("smtp", true) => (MailSecurity::Starttls, 587),
        ("smtp", false) => (MailSecurity::Plain, 25),
        ("smtps", true) => (MailSecurity::Tls, 465),
        ("smtps", false) => {
            return Err("[mail] starttls = false is for smtp:// only: smtps:// is TLS from the first byte (remove starttls, or write smtp:// for a server without TLS)".into());
        }
        (scheme, _) => {
            let scheme = if scheme.len() <= 10 {
                scheme
            } else {
                "another"
            };
            return Err(format!(
                "[mail] smtp_url must be {FORM}, not a {scheme}:// URL"
            ));
        }
    };
    let host = match u.host() {
        Some(url::Host::Domain(d)) if !d.is_empty() => d.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        _ => return Err(format!("[mail] smtp_url has no host: write {FORM}")),
    };
    if !matches!(u.path(), "" | "/") || u.query().is_some() || u.fragment().is_some() {
        return Err(format!(
            "[mail] smtp_url is a server, no path or query after it: write {FORM}"
        ));
    }
    Ok((host, u.port().unwrap_or(default_port), security))
}

/// Whether `host` is this machine (a relay on loopback sees no wire).
fn loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A mail address as the file wrote it, checked: `agent@example.com`, or
/// with a name, `Agent <agent@example.com>` (the name may be quoted:
/// `"Ops, night" <ops@example.com>`). The local part is a dot-atom of
/// ASCII letters, digits and `!#$%&'*+/=?^_`{|}~-`; the domain ASCII
/// labels (an international one in its `xn--` form; no `[IP]` literal,
/// which the mail library cannot read back from its own header) — what
/// the mail library takes, so `app` hands it over as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailAddress {
    /// The name shown beside the address, if any.
    pub name: Option<String>,
    /// Before the `@`.
    pub user: String,
    /// After the `@`.
    pub domain: String,
}

impl MailAddress {
    /// `user@domain`.
    pub fn address(&self) -> String {
        format!("{}@{}", self.user, self.domain)
    }

    /// The address `key` holds as `text`; the error names the key and the
    /// forms it takes.
    pub(super) fn parse(key: &str, text: &str) -> Result<MailAddress, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err(format!(
                "{key} is required: a mail address, e.g. \"agent-harness <agent@example.com>\""
            ));
        }
        mail_address(text).ok_or_else(|| {
            format!(
                "{key}: {:?} is not a mail address; write \"agent@example.com\" or \"Name <agent@example.com>\" (ASCII: an international domain in its xn-- form)",
                harness_base::text::clip(text, 100)
            )
        })
    }
}

/// `addr` or `Name <addr>`.
fn mail_address(text: &str) -> Option<MailAddress> {
    let (name, address) = match text.strip_suffix('>') {
        Some(rest) => {
            let (name, address) = rest.rsplit_once('<')?;
            (display_name(name.trim())?, address.trim())
        }
        None => (None, text),
    };
    let (user, domain) = address.rsplit_once('@')?;
    (local_part(user) && domain_part(domain)).then(|| MailAddress {
        name,
        user: user.to_string(),
        domain: domain.to_string(),
    })
}

/// A name beside an address: `None` inside when there is none; the outer
/// `None` when it is no name (a control character, an angle bracket, a
/// quote left open).
fn display_name(name: &str) -> Option<Option<String>> {
    let name = match name.strip_prefix('"') {
        Some(quoted) => quoted
            .strip_suffix('"')?
            .replace("\\\"", "\"")
            .replace("\\\\", "\\"),
        None if name.contains('"') => return None,
        None => name.to_string(),
    };
    if name.chars().any(|c| c.is_control() || c == '<' || c == '>') {
        return None;
    }
    Some(Some(name).filter(|n| !n.trim().is_empty()))
}

/// A dot-atom of the characters an address's local part takes unquoted.
fn local_part(user: &str) -> bool {
    const SPECIALS: &str = "!#$%&'*+/=?^_`{|}~-";
    user.len() <= 64
        && user.split('.').all(|atom| {
            !atom.is_empty()
                && atom
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || SPECIALS.contains(c))
        })
}

/// ASCII labels of letters, digits and inner hyphens.
fn domain_part(domain: &str) -> bool {
    domain.len() <= 253
        && domain.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mail_address_is_an_address_with_or_without_a_name() {
        let a = MailAddress::parse("k", "  agent@example.com ").unwrap();
        assert_eq!(
            (a.name.as_deref(), a.address().as_str()),
            (None, "agent@example.com")
        );
        let a = MailAddress::parse("k", "On Call <on.call+x@mail.example.com>").unwrap();
        assert_eq!(a.name.as_deref(), Some("On Call"));
        assert_eq!(a.address(), "on.call+x@mail.example.com");
        let a = MailAddress::parse("k", r#""Ops, \"night\"" <ops@xn--bcher-kva.example>"#).unwrap();
        assert_eq!(a.name.as_deref(), Some(r#"Ops, "night""#));
        assert_eq!(a.domain, "xn--bcher-kva.example");
        assert_eq!(MailAddress::parse("k", "<a@b.example>").unwrap().name, None);
        for bad in [
            "nobody",
            "a@",
            "@example.com",
            "a..b@example.com",
            "a b@example.com",
            "a@exa mple.com",
            "a@-example.com",
            "a@example..com",
            "Name <a@example.com",
            "Na<me <a@example.com>",
            "\"open <a@example.com>",
            "Bell\u{7} <a@example.com>",
            "jörg@example.com",
            "a@bücher.example",
            "a@[127.0.0.1]",
        ] {
            let e = MailAddress::parse("[mail] from", bad).unwrap_err();
            assert!(e.starts_with("[mail] from: "), "{bad}: {e}");
        }
    }
}
