//! [`RedactingWriter`]: a writer that passes whole lines through the
//! [`Redactor`] on their way to the writer it wraps. What is written is
//! held until its line ends (or the writer is flushed or dropped), so a
//! secret that a `write!` hands over in two pieces is still found whole.
//! The redactor may come after the writer (once the secrets are known):
//! until it is set, text passes as it is.

use std::io::{self, Write};
use std::sync::{Arc, OnceLock};

use super::Redactor;

/// A writer that replaces every secret with `***` in what it passes on to
/// `inner`, a whole line at a time; what is held is written when it is
/// flushed or dropped.
pub struct RedactingWriter<W: Write> {
    inner: W,
    redactor: Arc<OnceLock<Redactor>>,
    /// The start of a line not ended yet.
    pending: Vec<u8>,
}

impl<W: Write> RedactingWriter<W> {
    /// Writes to `inner`, redacting with `redactor` once it is set.
    pub fn new(inner: W, redactor: Arc<OnceLock<Redactor>>) -> RedactingWriter<W> {
        RedactingWriter {
            inner,
            redactor,
            pending: Vec::new(),
        }
    }

    /// The writer written to.
    pub fn get_ref(&self) -> &W {
        &self.inner
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
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        if let Some(text) = self.take(false) {
            self.inner.write_all(text.as_bytes())?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(text) = self.take(true) {
            self.inner.write_all(text.as_bytes())?;
        }
        self.inner.flush()
    }
}

impl<W: Write> Drop for RedactingWriter<W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::Secret;

    fn hunter2() -> Arc<OnceLock<Redactor>> {
        let redactor = Arc::new(OnceLock::new());
        let _ = redactor.set(Redactor::new(vec![Secret::new("hunter2-key")]));
        redactor
    }

    fn written(w: &RedactingWriter<&mut Vec<u8>>) -> String {
        String::from_utf8_lossy(w.get_ref()).into_owned()
    }

    #[test]
    fn a_secret_written_in_pieces_is_redacted_once_its_line_ends() {
        let mut out = Vec::new();
        let mut w = RedactingWriter::new(&mut out, hunter2());
        w.write_all(b"key: hunter").unwrap();
        assert_eq!(written(&w), "", "half a line waits for its end");
        w.write_all(b"2-key\nnext: hunter2").unwrap();
        assert_eq!(written(&w), "key: ***\n");
        w.write_all(b"-key").unwrap();
        assert_eq!(written(&w), "key: ***\n", "nothing before the line ends");
        w.flush().unwrap();
        assert_eq!(written(&w), "key: ***\nnext: ***");
        w.flush().unwrap();
        assert_eq!(written(&w), "key: ***\nnext: ***", "nothing is held");
        w.write_all(b"last: hunter2-key").unwrap();
        drop(w);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "key: ***\nnext: ***last: ***",
            "dropped, it writes what it held"
        );
    }

    #[test]
    fn until_the_redactor_is_set_text_passes_as_it_is() {
        let redactor = Arc::new(OnceLock::new());
        let mut out = Vec::new();
        let mut w = RedactingWriter::new(&mut out, redactor.clone());
        w.write_all(b"early: hunter2-key").unwrap();
        w.flush().unwrap();
        assert_eq!(written(&w), "early: hunter2-key");
        w.write_all(b"\nheld: hunter2-key").unwrap();
        let _ = redactor.set(Redactor::new(vec![Secret::new("hunter2-key")]));
        w.write_all(b"\n").unwrap();
        assert_eq!(
            written(&w),
            "early: hunter2-key\nheld: ***\n",
            "a line held when the redactor comes is redacted"
        );
    }
}
