//! Secrets kept out of what is written: a [`Secret`] that `Debug` and
//! `Display` never show; the [`Redactor`] that replaces every secret with
//! `***`, in every spelling JSON allows (`spellings.rs`); and the
//! [`RedactingWriter`] that passes whole lines through it (`writer.rs`).
//! Which values are secret is the caller's to say.

mod spellings;
mod writer;

pub use writer::RedactingWriter;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use spellings::Pattern;

/// A secret read from the environment. Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Bytes [`Redactor::line`] reads past the ones it may keep.
const LINE_MARGIN: usize = 64 * 1024;

/// Replaces every secret value with `***`: the one redactor for records,
/// tool results and diagnostic lines (docs/operating.md, "Records"), in every
/// spelling JSON allows (docs/untrusted-input.md; `spellings.rs`): `\u0073k-…`
/// in a record line or a tool call's arguments is replaced as `sk-…` is.
///
/// A value under 4 bytes is not looked for: it would make `***` of
/// ordinary words. A short password in a URL is still never shown in that
/// URL when the whole `user:password` is given as a secret too (as
/// `config` gives it).
#[derive(Clone, Default)]
pub struct Redactor {
    patterns: Arc<[Pattern]>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Redactor({} secrets)", self.patterns.len())
    }
}

impl Redactor {
    pub fn new(secrets: Vec<Secret>) -> Self {
        // A value this short would make `***` of ordinary text.
        let mut values: Vec<&str> = secrets
            .iter()
            .map(Secret::expose)
            .filter(|s| s.len() >= 4)
            .collect();
        values.sort_unstable();
        values.dedup();
        Redactor {
            patterns: values.into_iter().map(Pattern::new).collect(),
        }
    }

    /// `text` with every secret replaced; without a copy when it holds none.
    pub fn redact(&self, text: String) -> String {
        spellings::redact(&text, &self.patterns).unwrap_or(text)
    }

    /// As [`Redactor::redact`], borrowing when nothing changes.
    pub fn redact_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match spellings::redact(text, &self.patterns) {
            Some(redacted) => Cow::Owned(redacted),
            None => Cow::Borrowed(text),
        }
    }

    /// `text` as a field of a message for a person: redacted first (a
    /// secret is never cut before it is seen whole), then at most `max`
    /// characters, then control characters escaped (an escape is never
    /// cut in two). Only a head of `text` is read — `max` characters at
    /// their widest and [`LINE_MARGIN`] more, room for any secret that
    /// starts within them, in any spelling — so a server's 30 MiB error
    /// costs what a short one does.
    pub fn line(&self, text: &str, max: usize) -> String {
        let head =
            crate::text::prefix_bytes(text, max.saturating_mul(4).saturating_add(LINE_MARGIN));
        crate::text::printable(&crate::text::clip(&self.redact_str(head), max)).into_owned()
    }
}
