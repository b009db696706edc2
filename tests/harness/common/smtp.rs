//! A real SMTP server for the mail tests: PyPI's aiosmtpd from `scripts/stack
//! install`, started by `tests/smtp/server.py` on a free loopback port (in
//! clear, or with a certificate a private CA signed: [`Smtp::with_tls`]),
//! and each message it took read back as Python's email parser reads it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::tls::PrivateCa;
use super::{closed_port, stack_paths};

/// The `From` the tests' `[mail]` sections send as.
pub const FROM: &str = "agent-harness <agent@example.com>";
/// Whom the tests' digests go to.
pub const TO: &str = "ops@example.com";

/// aiosmtpd, listening until dropped.
pub struct Smtp {
    child: Child,
    pub port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Smtp {
    /// A server taking every message.
    pub fn start() -> Smtp {
        Smtp::with(&[])
    }

    /// A server started with `server.py`'s options (`--refuse`, `--login
    /// USER:PASSWORD`).
    pub fn with(options: &[&str]) -> Smtp {
        let python = stack_paths()
            .remove("SMTP_PYTHON")
            .expect("scripts/stack paths names SMTP_PYTHON");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/smtp/server.py");
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("mails.jsonl");
        let port = closed_port();
        let mut child = Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .arg(&out)
            .args(options)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join("server.log")).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let ready = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
        assert_eq!(ready.trim(), "ready", "aiosmtpd did not start: {log}");
        Smtp {
            child,
            port,
            out,
            _dir: dir,
        }
    }

    /// A server showing `ca`'s certificate for 127.0.0.1: offering
    /// STARTTLS (and taking no mail before it), or with `implicit`
    /// speaking TLS from the first byte (`smtps://`).
    pub fn with_tls(ca: &PrivateCa, implicit: bool) -> Smtp {
        let cert = ca.server_cert_file().display().to_string();
        let key = ca.server_key_file().display().to_string();
        let mut options = vec!["--cert", cert.as_str(), "--key", key.as_str()];
        if implicit {
            options.push("--implicit-tls");
        }
        Smtp::with(&options)
    }

    /// `[mail]` at this server, in clear (it offers no STARTTLS), with
    /// `extra` keys.
    pub fn mail_section(&self, extra: &str) -> String {
        format!(
            "[mail]\nsmtp_url = \"smtp://127.0.0.1:{}\"\nstarttls = false\nfrom = \"{FROM}\"\n{extra}\n",
            self.port
        )
    }

    /// Each message taken, oldest first.
    pub fn mails(&self) -> Vec<Mail> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// A message the server took, as its script writes it (`body` decoded):
/// a field it no longer writes fails the read.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Mail {
    pub mail_from: String,
    pub rcpt_tos: Vec<String>,
    pub login: Option<String>,
    pub from: String,
    pub to: String,
    pub subject: String,
    pub message_id: Option<String>,
    pub content_type: String,
    pub charset: Option<String>,
    pub transfer_encoding: Option<String>,
    pub body: String,
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A mail server that takes each connection and never says a word (no
/// greeting): its port. It listens until the tests end.
pub fn silent_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    port
}

/// `[notify]` mailing the digest to [`TO`] at `at` (HH:MM), with `extra` keys.
pub fn digest_at(at: &str, extra: &str) -> String {
    format!("[notify]\ndigest_to = [\"{TO}\"]\ndigest_at = \"{at}\"\n{extra}\n")
}
