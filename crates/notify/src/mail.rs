//! Mail through `[mail]` (docs/operating.md, "Digest and mail"): one
//! plain-text UTF-8 message with its own `Message-ID` to the `[notify]
//! digest_to` addresses (checked by `config`, handed to lettre here), over
//! STARTTLS (refused when the server does not offer it), TLS from the first
//! byte (`smtps://`), or — only with `starttls = false` — in clear; a login
//! when `[mail]` names one. TLS is rustls on the same `ring` provider and
//! the same trust as the one HTTP client (`harness_base::http::Trust`): the
//! bundled Mozilla roots (`webpki-roots`) and `[tls] ca_file`'s
//! certificates beside them. lettre takes no rustls configuration of ours,
//! so it is configured alike, never from the system's store.
//!
//! Bounded like the webhooks: a connection has 5 s, one attempt 10 s, a
//! transient failure is tried again on the same [`RETRY`] policy within the
//! caller's deadline, and the caller bounds the whole.

use std::time::Duration;

use lettre::Message;
use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{
    AsyncSmtpConnection, Certificate, CertificateStore, TlsParameters,
};
use lettre::transport::smtp::extension::ClientId;

use harness_base::http::{Trust, refused_certificate};
use harness_base::retry::Attempted;
use harness_config::{MailAddress, MailConfig, MailSecurity};

use super::RETRY;

/// How long a connection (and a TLS handshake) may take.
const CONNECT: Duration = Duration::from_secs(5);
/// How long one attempt — connect, greet, log in, send — may take.
const ATTEMPT: Duration = Duration::from_secs(10);
/// How long the goodbye after a delivered message may take.
const QUIT_WITHIN: Duration = Duration::from_secs(1);

/// Sends mail through one `[mail]` server.
pub(super) struct Mailer {
    cfg: MailConfig,
    /// What the server's certificate is checked against (`[tls]`).
    trust: Trust,
}

impl Mailer {
    pub(super) fn new(cfg: &MailConfig, trust: &Trust) -> Mailer {
        Mailer {
            cfg: cfg.clone(),
            trust: trust.clone(),
        }
    }

    /// The server as logs show it: `smtp://host:port`.
    pub(super) fn shown(&self) -> String {
        self.cfg.shown()
    }

    /// Sends `body` (plain text) with `subject` to `to`, tried again on
    /// [`RETRY`] while a failure is transient and `deadline` allows;
    /// `Err` says why it did not go, in words for the log.
    pub(super) async fn send(
        &self,
        to: &[MailAddress],
        subject: &str,
        body: &str,
        deadline: tokio::time::Instant,
    ) -> Result<(), String> {
        let message = self.message(to, subject, body)?;
        let bytes = message.formatted();
        let backoff = RETRY.start(deadline);
        backoff
            .run(|| async {
                match tokio::time::timeout(ATTEMPT, self.deliver(message.envelope(), &bytes)).await
                {
                    Ok(Ok(())) => Attempted::Done(Ok(())),
                    Ok(Err(Failed::Again(why))) => Attempted::Again(why, None),
                    Ok(Err(Failed::Done(why))) => Attempted::Done(Err(why)),
                    Err(_) => {
                        Attempted::Again(format!("no answer within {} s", ATTEMPT.as_secs()), None)
                    }
                }
            })
            .await
    }

    /// The message: plain text, UTF-8, from `[mail] from`, its
    /// `Message-ID` made of a random part and this host's name.
    fn message(&self, to: &[MailAddress], subject: &str, body: &str) -> Result<Message, String> {
        let mut builder = Message::builder()
            .from(mailbox(&self.cfg.from)?)
            .subject(subject)
            .header(ContentType::TEXT_PLAIN)
            .message_id(None);
        for address in to {
            builder = builder.to(mailbox(address)?);
        }
        builder
            .body(body.to_string())
            .map_err(|e| format!("the message could not be built: {e}"))
    }

    /// One attempt: connect (TLS at once for `smtps://`), STARTTLS when
    /// required, log in, send, quit.
    async fn deliver(
        &self,
        envelope: &lettre::address::Envelope,
        bytes: &[u8],
    ) -> Result<(), Failed> {
        let cfg = &self.cfg;
        let hello = ClientId::default();
        let at_once = match cfg.security {
            MailSecurity::Tls => Some(self.tls()?),
            MailSecurity::Starttls | MailSecurity::Plain => None,
        };
        let mut conn = AsyncSmtpConnection::connect_tokio1(
            (cfg.host.as_str(), cfg.port),
            Some(CONNECT),
            &hello,
            at_once,
            None,
        )
        .await
        .map_err(failed)?;
        if cfg.security == MailSecurity::Starttls {
            if !conn.can_starttls() {
                conn.abort().await;
                return Err(Failed::Done(
                    "the server does not offer STARTTLS, which [mail] requires for smtp:// (use smtps:// for a server that speaks TLS from the first byte; starttls = false sends in clear)".into(),
                ));
            }
            conn.starttls(self.tls()?, &hello).await.map_err(failed)?;
        }
        if let Some(login) = &cfg.login {
            let credentials = Credentials::new(
                login.username.expose().to_string(),
                login.password.expose().to_string(),
            );
            conn.auth(&[Mechanism::Plain, Mechanism::Login], &credentials)
                .await
                .map_err(auth_failed)?;
        }
        conn.send(envelope, bytes).await.map_err(failed)?;
        // The message is taken: a server that drops the line at QUIT, or
        // never answers it, changes nothing — the attempt's bound must not
        // make a delivered mail a failed one (and send it again next run).
        let _ = tokio::time::timeout(QUIT_WITHIN, conn.quit()).await;
        Ok(())
    }

    /// The TLS of a connection to `[mail]`'s host: the bundled roots and
    /// `[tls] ca_file`'s certificates, TLS 1.2 or 1.3, the host's name
    /// checked.
    fn tls(&self) -> Result<TlsParameters, Failed> {
        let set_up = |e: lettre::transport::smtp::Error| {
            Failed::Done(format!("TLS could not be set up: {e}"))
        };
        let mut builder = TlsParameters::builder(self.cfg.host.clone())
            .certificate_store(CertificateStore::WebpkiRoots);
        for der in self.trust.added() {
            builder =
                builder.add_root_certificate(Certificate::from_der(der.to_vec()).map_err(set_up)?);
        }
        builder.build_rustls().map_err(set_up)
    }
}

/// `address` as lettre takes it: `config` checked it by the same rules,
/// so a refusal here is a bug, said as a failed mail.
fn mailbox(address: &MailAddress) -> Result<Mailbox, String> {
    let email = lettre::Address::new(&address.user, &address.domain).map_err(|e| {
        format!(
            "{} is not a mail address to lettre ({e})",
            address.address()
        )
    })?;
    Ok(Mailbox::new(address.name.clone(), email))
}

/// Why an attempt did not deliver, and whether to try again.
enum Failed {
    /// The connection, a timeout or a 4xx answer: it may pass.
    Again(String),
    /// A 5xx answer, TLS, a missing extension: trying again changes nothing.
    Done(String),
}

fn failed(e: lettre::transport::smtp::Error) -> Failed {
    // Its words carry its cause (`Connection error: Connection refused …`).
    let why = e.to_string();
    if let Some(advice) = refused_certificate(&e) {
        // lettre calls a refused handshake a connection error: it is not
        // one that passes.
        return Failed::Done(format!("{why} ({advice})"));
    }
    if e.is_permanent() || e.is_tls() || e.is_client() || e.is_response() {
        Failed::Done(why)
    } else {
        Failed::Again(why)
    }
}

/// A refused login, said by its reply code alone: a server's reply may
/// quote the AUTH exchange, whose base64 is the user and the password.
fn auth_failed(e: lettre::transport::smtp::Error) -> Failed {
    let Some(code) = e.status() else {
        return failed(e);
    };
    let why = format!(
        "the server refused the login ({code}; its words are not shown: they may quote the credentials)"
    );
    match failed(e) {
        Failed::Again(_) => Failed::Again(why),
        Failed::Done(_) => Failed::Done(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(name: Option<&str>, user: &str, domain: &str) -> MailAddress {
        MailAddress {
            name: name.map(str::to_string),
            user: user.into(),
            domain: domain.into(),
        }
    }

    #[test]
    fn a_message_has_its_own_id_and_every_address_config_takes() {
        let mailer = Mailer::new(
            &MailConfig {
                host: "mail.example.com".into(),
                port: 587,
                security: MailSecurity::Starttls,
                from: address(Some("agent-harness"), "agent", "example.com"),
                login: None,
            },
            &Trust::bundled(),
        );
        let to = [
            address(Some(r#"Ops, "night""#), "o.p+s", "example.com"),
            address(None, "x", "xn--bcher-kva.example"),
        ];

        let message = mailer.message(&to, "subject", "body").unwrap();

        let text = String::from_utf8(message.formatted()).unwrap();
        let id = text
            .lines()
            .find_map(|l| l.strip_prefix("Message-ID: "))
            .unwrap_or_else(|| panic!("no Message-ID: {text}"));
        assert!(
            id.starts_with('<') && id.ends_with('>') && id.contains('@'),
            "{id}"
        );
        let again = mailer.message(&to, "subject", "body").unwrap();
        assert_ne!(
            String::from_utf8(again.formatted())
                .unwrap()
                .lines()
                .find(|l| l.starts_with("Message-ID: ")),
            Some(format!("Message-ID: {id}").as_str())
        );
        // Each address is one lettre reads back from its own header: none
        // is lost from the envelope.
        assert_eq!(message.envelope().to().len(), 2, "{text}");
    }
}
