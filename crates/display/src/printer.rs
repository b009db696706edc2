//! [`Printer`]: the one way out to stdout and stderr. Every line passes
//! the same redactor as the records (docs/untrusted-input.md) once the configuration,
//! and so the secrets, are known, and the live lines are lifted while it
//! is written, so the two never interleave. `app` prints through it and
//! nothing else does: the crate root denies the print macros, and
//! `clippy.toml` disallows `std::io::stdout` and `std::io::stderr`
//! everywhere but here (`scripts/check-structure` holds both).
//!
//! It redacts whole lines: what is written is held until its line ends
//! (or the printer is flushed or dropped), so a secret that a `write!`
//! hands over in two pieces is still found whole.

#![allow(clippy::disallowed_methods)]

use std::io::{self, IsTerminal, Write};
use std::sync::{Arc, OnceLock};

use indicatif::MultiProgress;

use harness_config::Redactor;

/// Which of the two the printer writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A writer to stdout or stderr that replaces every secret with `***`;
/// made by [`super::Progress`], which knows the live lines and the redactor.
pub struct Printer {
    stream: Stream,
    live: Option<MultiProgress>,
    redactor: Arc<OnceLock<Redactor>>,
    /// The start of a line not ended yet.
    pending: Vec<u8>,
}

impl Printer {
    pub(super) fn new(
        stream: Stream,
        live: Option<MultiProgress>,
        redactor: Arc<OnceLock<Redactor>>,
    ) -> Printer {
        Printer {
            stream,
            live,
            redactor,
            pending: Vec::new(),
        }
    }

    /// The stream is a terminal: what a record or the model wrote is
    /// escaped before it is printed there.
    pub fn is_terminal(&self) -> bool {
        match self.stream {
            Stream::Stdout => io::stdout().is_terminal(),
            Stream::Stderr => io::stderr().is_terminal(),
        }
    }

    /// A line written into the binary, straight to stderr, waiting on
    /// nothing (neither the live lines nor the redactor): for the signal
    /// that ends the process at once. Being `'static`, it holds no secret.
    pub fn at_once(line: &'static str) {
        let _ = io::stderr().write_all(format!("{line}\n").as_bytes());
    }

    /// What is held up to its last line end (or all of it), redacted;
    /// `None` when that is nothing.
    fn take(&mut self, all: bool) -> Option<String> {
        let len = if all {
            self.pending.len()
        } else {
            self.pending.iter().rposition(|&b| b == b'\n')? + 1
        };
        if len == 0 {
            return None;
        }
        let bytes: Vec<u8> = self.pending.drain(..len).collect();
        let text = String::from_utf8_lossy(&bytes);
        Some(match self.redactor.get() {
            Some(r) => r.redact_str(&text).into_owned(),
            None => text.into_owned(),
        })
    }

    /// `text` in one write, the live lines lifted around it.
    fn put(&self, text: &str) -> io::Result<()> {
        let write = || match self.stream {
            Stream::Stdout => io::stdout().write_all(text.as_bytes()),
            Stream::Stderr => io::stderr().write_all(text.as_bytes()),
        };
        match &self.live {
            Some(bars) => bars.suspend(write),
            None => write(),
        }
    }
}

impl Write for Printer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        if let Some(text) = self.take(false) {
            self.put(&text)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(text) = self.take(true) {
            self.put(&text)?;
        }
        match self.stream {
            Stream::Stdout => io::stdout().flush(),
            Stream::Stderr => io::stderr().flush(),
        }
    }
}

impl Drop for Printer {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Whether stderr is a terminal (`main` decides on live lines with it).
pub fn stderr_is_terminal() -> bool {
    io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_config::Secret;

    #[test]
    fn a_secret_written_in_pieces_is_redacted_once_its_line_ends() {
        let redactor = Arc::new(OnceLock::new());
        let _ = redactor.set(Redactor::new(vec![Secret::new("hunter2-key")]));
        let mut printer = Printer::new(Stream::Stderr, None, redactor);
        printer.pending.extend_from_slice(b"key: hunter");
        assert_eq!(printer.take(false), None, "half a line waits for its end");
        printer.pending.extend_from_slice(b"2-key\nnext: hunter2");
        assert_eq!(printer.take(false).as_deref(), Some("key: ***\n"));
        printer.pending.extend_from_slice(b"-key");
        assert_eq!(printer.take(true).as_deref(), Some("next: ***"));
        assert_eq!(printer.take(true), None);
    }
}
