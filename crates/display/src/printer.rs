//! [`Printer`]: the one way out to stdout and stderr. Every line passes
//! the same redactor as the records (docs/untrusted-input.md) once the configuration,
//! and so the secrets, are known, and the live lines are lifted while it
//! is written, so the two never interleave. `app` prints through it and
//! nothing else does: the crate root denies the print macros, and
//! `clippy.toml` disallows `std::io::stdout` and `std::io::stderr`
//! everywhere but here (`scripts/check-structure` holds both).
//!
//! It is `base`'s [`RedactingWriter`] over a sink that writes to the
//! stream with the live lines lifted: it redacts whole lines, holding
//! what is written until its line ends (or the printer is flushed or
//! dropped), so a secret that a `write!` hands over in two pieces is
//! still found whole.

#![allow(clippy::disallowed_methods)]

use std::io::{self, IsTerminal, Write};
use std::sync::{Arc, OnceLock};

use indicatif::MultiProgress;

use harness_base::redact::{RedactingWriter, Redactor};

/// Which of the two the printer writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// A writer to stdout or stderr that replaces every secret with `***`;
/// made by [`super::Progress`], which knows the live lines and the redactor.
pub struct Printer {
    out: RedactingWriter<Sink>,
}

/// Where the redacted text goes: the stream, each write in one piece with
/// the live lines lifted around it.
struct Sink {
    stream: Stream,
    live: Option<MultiProgress>,
}

impl Printer {
    pub(super) fn new(
        stream: Stream,
        live: Option<MultiProgress>,
        redactor: Arc<OnceLock<Redactor>>,
    ) -> Printer {
        Printer {
            out: RedactingWriter::new(Sink { stream, live }, redactor),
        }
    }

    /// The stream is a terminal: what a record or the model wrote is
    /// escaped before it is printed there.
    pub fn is_terminal(&self) -> bool {
        match self.out.get_ref().stream {
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
}

impl Write for Printer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl Write for Sink {
    /// `buf` in one write, the live lines lifted around it.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let write = || match self.stream {
            Stream::Stdout => io::stdout().write_all(buf),
            Stream::Stderr => io::stderr().write_all(buf),
        };
        match &self.live {
            Some(bars) => bars.suspend(write),
            None => write(),
        }?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.stream {
            Stream::Stdout => io::stdout().flush(),
            Stream::Stderr => io::stderr().flush(),
        }
    }
}

/// Whether stderr is a terminal (`main` decides on live lines with it).
pub fn stderr_is_terminal() -> bool {
    io::stderr().is_terminal()
}
