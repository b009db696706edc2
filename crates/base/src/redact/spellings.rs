//! Where a secret stands in a text, in every spelling JSON allows
//! (docs/untrusted-input.md): written plainly, or with any of its characters escaped
//! (`\u0073k-…` in upper or lower hex, `\/`, `\"`, `\\`, `\n`, a surrogate
//! pair), and again inside a JSON string that is itself JSON text (a tool
//! call's arguments in a record line: `\\u0073k-…`), up to [`MAX_DEPTH`]
//! such nestings. The text is read as JSON would decode it — every
//! backslash escape, in or out of a string — level after level, each
//! decoded character knowing the bytes of the original text it came from;
//! a secret found at any level has those bytes replaced.
//!
//! Linear: a text without a backslash is searched once, as it is; one
//! with backslashes is decoded at most [`MAX_DEPTH`] times (fewer when a
//! level holds no backslash), each level searched once; only a text
//! holding a secret at some level is read a second time, all levels at
//! once, matching each with a KMP automaton, in memory proportional to
//! the longest secret and the matches found.

use std::collections::VecDeque;
use std::str::CharIndices;

/// How many times a text is JSON-decoded in search of a secret: a record
/// line (1), a tool call's arguments inside it (2), a JSON document the
/// model put in an argument (3), and further nestings no record makes.
pub(super) const MAX_DEPTH: usize = 8;

/// A secret to look for: its characters, and for each prefix the longest
/// proper prefix that is also its suffix (the KMP failure table).
#[derive(Clone)]
pub(super) struct Pattern {
    chars: Vec<char>,
    fail: Vec<usize>,
    text: String,
}

impl Pattern {
    pub(super) fn new(secret: &str) -> Pattern {
        let chars: Vec<char> = secret.chars().collect();
        let mut fail = vec![0; chars.len()];
        let mut k = 0;
        for i in 1..chars.len() {
            while k > 0 && chars[i] != chars[k] {
                k = fail[k - 1];
            }
            if chars[i] == chars[k] {
                k += 1;
            }
            fail[i] = k;
        }
        Pattern {
            chars,
            fail,
            text: secret.to_string(),
        }
    }

    /// The state after `c`, from `state` characters matched.
    fn step(&self, mut state: usize, c: char) -> usize {
        if state == self.chars.len() {
            state = self.fail[state - 1];
        }
        while state > 0 && self.chars[state] != c {
            state = self.fail[state - 1];
        }
        if self.chars[state] == c { state + 1 } else { 0 }
    }
}

/// `text` with every secret, in any spelling, replaced by `***`; `None`
/// when it holds none.
pub(super) fn redact(text: &str, patterns: &[Pattern]) -> Option<String> {
    let depth = deepest(text, patterns)?;
    let mut ranges = Chain::new(text, patterns, depth).ranges();
    ranges.sort_unstable();
    let mut out = String::with_capacity(text.len());
    // The bytes of `text` copied or replaced so far.
    let mut at = 0;
    for (start, end) in ranges {
        if start >= at {
            out.push_str(&text[at..start]);
            out.push_str("***");
            at = end;
        } else {
            // It overlaps the match replaced last: that `***` covers it too.
            at = at.max(end);
        }
    }
    out.push_str(&text[at..]);
    Some(out)
}

/// The deepest level of decoding at which some secret stands (0: as
/// written); `None` when none does at any level.
fn deepest(text: &str, patterns: &[Pattern]) -> Option<usize> {
    let holds = |t: &str| patterns.iter().any(|p| t.contains(&p.text));
    let mut found = holds(text).then_some(0);
    if patterns.is_empty() || !text.contains('\\') {
        return found;
    }
    let mut level = decode_once(text);
    for depth in 1..=MAX_DEPTH {
        if holds(&level) {
            found = Some(depth);
        }
        if depth == MAX_DEPTH || !level.contains('\\') {
            break;
        }
        level = decode_once(&level);
    }
    found
}

/// `text` decoded once, as [`Chain`] decodes a level (the unit tests hold
/// the two to the same result), copying the runs between backslashes whole.
fn decode_once(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let (ch, len) = escape_at(&rest.as_bytes()[i..]);
        out.push(ch);
        rest = &rest[i + len..];
    }
    out.push_str(rest);
    out
}

/// The character the escape at the start of `s` (a backslash) stands for,
/// and its length in bytes; a backslash that starts no escape stands for
/// itself.
fn escape_at(s: &[u8]) -> (char, usize) {
    let short = match s.get(1) {
        Some(b'"') => '"',
        Some(b'\\') => '\\',
        Some(b'/') => '/',
        Some(b'b') => '\u{8}',
        Some(b'f') => '\u{c}',
        Some(b'n') => '\n',
        Some(b'r') => '\r',
        Some(b't') => '\t',
        Some(b'u') => return escape_u(s),
        _ => return ('\\', 1),
    };
    (short, 2)
}

/// As [`escape_at`], for `\uXXXX` (and a surrogate pair).
fn escape_u(s: &[u8]) -> (char, usize) {
    let hex4 = |at: usize| -> Option<u32> {
        let digits = std::str::from_utf8(s.get(at..at + 4)?).ok()?;
        digits
            .bytes()
            .all(|b| b.is_ascii_hexdigit())
            .then(|| u32::from_str_radix(digits, 16).ok())?
    };
    let Some(code) = hex4(2) else {
        return ('\\', 1);
    };
    if (0xD800..=0xDBFF).contains(&code)
        && s.get(6..8) == Some(&b"\\u"[..])
        && let Some(low @ 0xDC00..=0xDFFF) = hex4(8)
    {
        let c = char::from_u32(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00));
        return (c.unwrap_or('\u{FFFD}'), 12);
    }
    (char::from_u32(code).unwrap_or('\u{FFFD}'), 6)
}

/// One character of a level, and the bytes of the original text it
/// stands for.
#[derive(Clone, Copy, Debug)]
struct Unit {
    ch: char,
    start: usize,
    end: usize,
}

/// The levels of one text, decoded as they are read: level 0 is the text,
/// level k the JSON decoding of level k-1.
struct Chain<'a> {
    raw: CharIndices<'a>,
    /// `back[j]`: units of level j read ahead by level j+1 and given back
    /// (a stack: the next to read is last).
    back: Vec<Vec<Unit>>,
    finders: Vec<Finder<'a>>,
    found: Vec<(usize, usize)>,
}

impl<'a> Chain<'a> {
    fn new(text: &'a str, patterns: &'a [Pattern], depth: usize) -> Chain<'a> {
        Chain {
            raw: text.char_indices(),
            back: vec![Vec::new(); depth],
            finders: (0..=depth).map(|_| Finder::new(patterns)).collect(),
            found: Vec::new(),
        }
    }

    /// Reads every level to the end: the byte ranges of every secret found.
    fn ranges(mut self) -> Vec<(usize, usize)> {
        let top = self.finders.len() - 1;
        while self.unit(top).is_some() {}
        self.found
    }

    /// The next unit of `level`, each read once and searched.
    fn unit(&mut self, level: usize) -> Option<Unit> {
        let u = if level == 0 {
            self.raw.next().map(|(i, ch)| Unit {
                ch,
                start: i,
                end: i + ch.len_utf8(),
            })
        } else {
            self.decode(level)
        }?;
        self.finders[level].feed(u, &mut self.found);
        Some(u)
    }

    /// The next unit of `level` for the level above: one given back, or a new one.
    fn take(&mut self, level: usize) -> Option<Unit> {
        self.back[level].pop().or_else(|| self.unit(level))
    }

    fn give_back(&mut self, level: usize, units: &[Unit]) {
        self.back[level].extend(units.iter().rev());
    }

    /// The next unit of `level` (≥ 1): one JSON escape of level-1 units
    /// decoded, or one unit as it is. What is no valid escape (`\x`, `\u12`
    /// at the end) stands for itself, its backslash a character.
    fn decode(&mut self, level: usize) -> Option<Unit> {
        let below = level - 1;
        let u = self.take(below)?;
        if u.ch != '\\' {
            return Some(u);
        }
        let Some(v) = self.take(below) else {
            return Some(u);
        };
        let ch = match v.ch {
            '"' | '\\' | '/' => v.ch,
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => return Some(self.decode_u(below, u, v)),
            _ => {
                self.give_back(below, &[v]);
                return Some(u);
            }
        };
        Some(Unit {
            ch,
            start: u.start,
            end: v.end,
        })
    }

    /// After `\` (`slash`) and `u`: four hex digits, and for a high
    /// surrogate the `\uXXXX` of its low one; a surrogate alone is U+FFFD.
    /// What is no escape is given back, to be read as characters.
    fn decode_u(&mut self, below: usize, slash: Unit, u: Unit) -> Unit {
        let mut read = vec![u];
        let Some(code) = self.hex4(below, &mut read) else {
            self.give_back(below, &read);
            return slash;
        };
        let mut end = read.last().map_or(u.end, |d| d.end);
        let mut ch = char::from_u32(code);
        if (0xD800..=0xDBFF).contains(&code) {
            let mut tail = Vec::new();
            match self.low_surrogate(below, &mut tail) {
                Some(low) => {
                    ch = char::from_u32(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00));
                    end = tail.last().map_or(end, |d| d.end);
                }
                None => self.give_back(below, &tail),
            }
        }
        Unit {
            ch: ch.unwrap_or('\u{FFFD}'),
            start: slash.start,
            end,
        }
    }

    /// Four hex digits; every unit read is put in `read`.
    fn hex4(&mut self, below: usize, read: &mut Vec<Unit>) -> Option<u32> {
        let mut value = 0;
        for _ in 0..4 {
            let d = self.take(below)?;
            read.push(d);
            value = value * 16 + d.ch.to_digit(16)?;
        }
        Some(value)
    }

    /// `\uXXXX` with XXXX in DC00..=DFFF; every unit read is put in `read`.
    fn low_surrogate(&mut self, below: usize, read: &mut Vec<Unit>) -> Option<u32> {
        for want in ['\\', 'u'] {
            let c = self.take(below)?;
            read.push(c);
            if c.ch != want {
                return None;
            }
        }
        let low = self.hex4(below, read)?;
        (0xDC00..=0xDFFF).contains(&low).then_some(low)
    }
}

/// The matches of every secret on one level.
struct Finder<'a> {
    patterns: &'a [Pattern],
    states: Vec<usize>,
    /// The start of each of the last units read, as many as the longest secret.
    starts: VecDeque<usize>,
    longest: usize,
}

impl<'a> Finder<'a> {
    fn new(patterns: &'a [Pattern]) -> Finder<'a> {
        let longest = patterns.iter().map(|p| p.chars.len()).max().unwrap_or(0);
        Finder {
            patterns,
            states: vec![0; patterns.len()],
            starts: VecDeque::with_capacity(longest),
            longest,
        }
    }

    fn feed(&mut self, u: Unit, found: &mut Vec<(usize, usize)>) {
        if self.longest == 0 {
            return;
        }
        if self.starts.len() == self.longest {
            self.starts.pop_front();
        }
        self.starts.push_back(u.start);
        for (p, state) in self.patterns.iter().zip(&mut self.states) {
            *state = p.step(*state, u.ch);
            if *state == p.chars.len() {
                found.push((self.starts[self.starts.len() - p.chars.len()], u.end));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{Chain, MAX_DEPTH, Pattern, decode_once, redact};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    const KEY: &str = "sk-SECRETKEY-abcdef123456";

    fn redacted(text: &str, secrets: &[&str]) -> String {
        let patterns: Vec<Pattern> = secrets.iter().map(|s| Pattern::new(s)).collect();
        redact(text, &patterns).unwrap_or_else(|| text.to_string())
    }

    #[test]
    fn a_key_with_a_character_escaped_is_redacted_and_the_json_stays_json() {
        for spelling in [
            r"\u0073k-SECRETKEY-abcdef123456",
            r"\u0073\u006B-SECRETKEY-abcdef123456",
            r"sk-SECRETKEY-abcdef12345\u0036",
            r"\u0073\u006B\u002d\u0053ECRETKEY-abcdef123456",
            r"s\u006bx".replace("x", "-SECRETKEY-abcdef123456").as_str(),
        ] {
            let line = format!(r#"{{"url":"http://127.0.0.1:19001/{spelling}","n":1}}"#);
            let out = redacted(&line, &[KEY]);
            assert_eq!(
                out, r#"{"url":"http://127.0.0.1:19001/***","n":1}"#,
                "{spelling}"
            );
            let v: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["n"], 1);
        }
    }

    #[test]
    fn the_arguments_inside_a_record_line_are_read_twice() {
        let arguments = r#"{"url":"http://127.0.0.1:19001/\u0073k-SECRETKEY-abcdef123456"}"#;
        let line = json!({"arguments": arguments, "turn": 1}).to_string();
        assert!(line.contains(r"\\u0073k-SECRETKEY"), "{line}");
        let out = redacted(&line, &[KEY]);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["arguments"].as_str().unwrap(),
            r#"{"url":"http://127.0.0.1:19001/***"}"#
        );
    }

    #[test]
    fn escapes_a_secret_needs_in_json_are_read_too() {
        // A password holding a quote, a backslash and a slash, as a record
        // line writes it; and a character past the BMP as a surrogate pair.
        let secret = "pa\"ss\\w/rd";
        let line = json!({"error": format!("refused {secret} here")}).to_string();
        assert_eq!(
            redacted(&line, &[secret]),
            r#"{"error":"refused *** here"}"#
        );
        let line = r#"{"e":"refused pa\"ss\\w\/rd here"}"#;
        assert_eq!(redacted(line, &[secret]), r#"{"e":"refused *** here"}"#);
        let line = r#"["key-\uD83D\uDE00-emoji", "key-\ud83d\ude00-emoji"]"#;
        assert_eq!(redacted(line, &["key-😀-emoji"]), r#"["***", "***"]"#);
    }

    #[test]
    fn what_is_no_escape_is_read_as_written() {
        // Broken and lone escapes: the secret after them is still found,
        // and what is not a secret is left byte for byte.
        for text in [
            r"C:\new\u00zz \u12",
            r"\uD800\u0041 \uDC00 \ x",
            r"\x\\\\",
            "plain text, nothing to see",
        ] {
            assert_eq!(redacted(text, &[KEY]), text);
            let with = format!(r"{text}\u0073k-SECRETKEY-abcdef123456{text}");
            assert_eq!(redacted(&with, &[KEY]), format!("{text}***{text}"));
        }
        assert_eq!(redacted(r"\uD800\u0041", &["Aaaa"]), r"\uD800\u0041");
        assert_eq!(redacted(r"x\uD800\u0041aaa", &["Aaaa"]), r"x\uD800***");
    }

    #[test]
    fn overlapping_and_neighbouring_secrets_each_leave_one_mark() {
        assert_eq!(redacted("abcdefgh", &["abcdef", "cdefgh"]), "***");
        assert_eq!(redacted("abcdabcd", &["abcd"]), "******");
        assert_eq!(redacted("aaaaaa", &["aaaa"]), "***");
        assert_eq!(redacted(r"\u0061bcd-abcd", &["abcd"]), "***-***");
    }

    #[test]
    fn nesting_is_followed_as_deep_as_max_depth() {
        let mut text = json!(format!("x {KEY} y")).to_string();
        for _ in 1..MAX_DEPTH {
            text = json!(text.replace('s', r"\u0073")).to_string();
        }
        assert!(!text.contains(KEY));
        let mut out = redacted(&text, &[KEY]);
        for _ in 0..MAX_DEPTH {
            out = serde_json::from_str::<String>(&out).unwrap();
        }
        assert_eq!(out, "x *** y");
    }

    /// One character as a JSON string may hold it, chosen by `how`.
    fn spell(c: char, how: u8, out: &mut String) {
        let hex = |u: u16, out: &mut String| {
            let h = format!("{u:04x}");
            let h: String = h
                .chars()
                .enumerate()
                .map(|(i, d)| {
                    if how & (1 << (i + 2)) != 0 {
                        d.to_ascii_uppercase()
                    } else {
                        d
                    }
                })
                .collect();
            out.push_str(&format!("\\u{h}"));
        };
        let short = match c {
            '"' => Some('"'),
            '\\' => Some('\\'),
            '/' => Some('/'),
            '\n' => Some('n'),
            '\t' => Some('t'),
            _ => None,
        };
        let must = matches!(c, '"' | '\\') || c.is_control();
        match (how % 3, short) {
            (0, _) if !must => out.push(c),
            (1, Some(s)) => {
                out.push('\\');
                out.push(s);
            }
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    hex(*u, out);
                }
            }
        }
    }

    /// `text` as a JSON string, each character spelled as `hows` says.
    fn encode(text: &str, hows: &[u8]) -> String {
        let mut out = String::from("\"");
        for (i, c) in text.chars().enumerate() {
            spell(c, hows[i % hows.len()], &mut out);
        }
        out.push('"');
        out
    }

    /// A level decoded by the chain, unit by unit.
    fn decoded_by_chain(text: &str) -> String {
        let mut chain = Chain::new(text, &[], 1);
        let mut out = String::new();
        while let Some(u) = chain.unit(1) {
            out.push(u.ch);
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        /// The quick decoding that finds the levels holding a secret and
        /// the chain that finds where they stand read a text alike.
        #[test]
        fn both_decoders_read_a_text_alike(text in "[\\\\uU0-9a-fA-FdD\"/bnrtx é😀]{0,48}") {
            prop_assert_eq!(decode_once(&text), decoded_by_chain(&text));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any JSON encoding of a text holding the secret — each character
        /// plain or escaped, in either hex case, nested 1 to 3 times as a
        /// record nests a call's arguments — once redacted, decodes, level
        /// after level, to JSON that holds the secret nowhere.
        #[test]
        fn no_json_spelling_of_a_secret_survives(
            secret in "[a-zA-Z0-9/\"\\\\\n é😀-]{4,16}",
            before in "[a-z /\"\\\\\n😀]{0,8}",
            after in "[a-z /\"\\\\\n😀]{0,8}",
            hows in proptest::collection::vec(any::<u8>(), 1..40),
            levels in 1usize..=3,
        ) {
            let mut text = format!("{before}{secret}{after}");
            for level in 0..levels {
                let hows: Vec<u8> = hows.iter().map(|h| h.rotate_left(level as u32)).collect();
                text = format!("{{\"v\":{}}}", encode(&format!("[{text}]"), &hows));
            }
            let mut out = redacted(&text, &[&secret]);
            for _ in 0..levels {
                prop_assert!(!out.contains(&secret), "{}", out);
                let v: Value = serde_json::from_str(&out).map_err(|e| {
                    TestCaseError::fail(format!("{e}: {out}"))
                })?;
                let inner = v["v"].as_str().unwrap();
                out = inner[1..inner.len() - 1].to_string();
            }
            prop_assert!(!out.contains(&secret), "{}", out);
            prop_assert!(out.contains("***"), "{}", out);
        }
    }
}
