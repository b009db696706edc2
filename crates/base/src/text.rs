//! Small text helpers shared by every module: counting and clipping by
//! characters (never bytes, so nothing splits a character), a text as one
//! clipped line, a word as one shell word, line numbers of byte offsets,
//! TOML errors in words a person acts on, and the brackets of JSON text
//! told from the ones inside its strings.

/// Reads JSON text a byte at a time and tells the brackets that open or
/// close an object or array from the ones inside strings (escapes
/// respected), without parsing: for scans that must stay one pass over
/// text that may not be JSON at all.
#[derive(Debug, Default, Clone, Copy)]
pub struct JsonBrackets {
    in_string: bool,
    escaped: bool,
}

impl JsonBrackets {
    /// `b` when it is `{`, `[`, `}` or `]` outside a string.
    pub fn bracket(&mut self, b: u8) -> Option<u8> {
        if self.in_string {
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return None;
        }
        match b {
            b'"' => {
                self.in_string = true;
                None
            }
            b'{' | b'[' | b'}' | b']' => Some(b),
            _ => None,
        }
    }
}

/// Number of characters in `s`.
pub fn chars(s: &str) -> usize {
    s.chars().count()
}

/// The byte index of character `n` (or the end).
pub fn byte_at(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

/// Shortens `s` to at most `max` characters with an ellipsis, for logs.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max || chars(s) <= max {
        return s.to_string();
    }
    format!("{}…", &s[..byte_at(s, max.saturating_sub(1))])
}

/// The most characters an error is said in on one line of a message, a
/// digest or a state file.
pub const MAX_ERROR_CHARS: usize = 300;

/// `s` as one line of at most `max` characters: every run of white space
/// (line breaks too) one space, then [`clip`]ped. Clip after any other
/// change (a redaction): what is cut is what is shown.
pub fn one_line(s: &str, max: usize) -> String {
    clip(&s.split_whitespace().collect::<Vec<_>>().join(" "), max)
}

/// `word` as one word of a shell command: as it is when it holds only
/// characters no shell reads specially, else in single quotes (a quote
/// inside closed, escaped and opened again).
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,+=:@%/".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// `word` as the last operand of a command line: [`shell_word`], after
/// `-- ` when it starts with `-`, so a task named `--all-failed` is never
/// read as that flag.
pub fn shell_operand(word: &str) -> String {
    if word.starts_with('-') {
        format!("-- {}", shell_word(word))
    } else {
        shell_word(word)
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn prefix_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A 32-bit FNV-1a hash: stable across builds and platforms, for names
/// that must stay the same from one run to the next.
pub fn short_hash(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// At most the first `max` bytes of `b`.
pub fn prefix_bytes_of(b: &[u8], max: usize) -> &[u8] {
    &b[..b.len().min(max)]
}

/// Left-aligned columns, two spaces apart, one line each; no trailing spaces.
/// The widest cell [`table`] prints.
pub(crate) const MAX_CELL_CHARS: usize = 200;

/// Whether `c` is unfit for a terminal: a control character (C0, DEL,
/// C1: what moves a cursor, breaks a line or starts an escape sequence), a
/// bidirectional override that can make a line read otherwise than it is,
/// or a character that shows as nothing (two names that look the same and
/// differ).
pub fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            // Bidirectional overrides, isolates and marks; line and
            // paragraph separators.
            '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{061c}'
                | '\u{2028}'
                | '\u{2029}'
                // Zero-width space, word joiner, invisible operators,
                // byte order mark, Mongolian vowel separator (not the
                // joiners U+200C and U+200D: Persian, Indic scripts and
                // emoji need them).
                | '\u{200b}'
                | '\u{2060}'..='\u{2064}'
                | '\u{feff}'
                | '\u{180e}'
        )
}

/// `s` fit for a terminal: every [`unsafe_char`] written as its Rust
/// escape, `\u{1b}`, `\n`. Text from records may hold any of them
/// (docs/untrusted-input.md).
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(
        s.chars()
            .map(|c| {
                if unsafe_char(c) {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// JSON text (as `serde_json` writes it) fit for a terminal: every
/// [`unsafe_char`] in its strings — `serde_json` leaves C1, DEL and the
/// bidirectional overrides raw — written as JSON's own `\uXXXX` escape, so
/// the text still parses to the same values. The line breaks between
/// tokens stay: inside a string `serde_json` has escaped them already.
pub fn printable_json(json: &str) -> std::borrow::Cow<'_, str> {
    if !json.chars().any(|c| c != '\n' && unsafe_char(c)) {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if c != '\n' && unsafe_char(c) {
            // Every unsafe character is in the Basic Multilingual Plane.
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

pub fn table(header: &[String], rows: &[Vec<String>]) -> String {
    // A cell may come from a record: none is wider than this (a width
    // format argument must also stay under 65,536).
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| clip(c, MAX_CELL_CHARS)).collect())
        .collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = header.iter().map(|h| chars(h)).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(chars(c));
        }
    }
    let line = |cells: &[String]| {
        let mut s = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        s.truncate(s.trim_end().len());
        s + "\n"
    };
    let mut out = line(header);
    for r in rows {
        out.push_str(&line(r));
    }
    out
}

/// 1-based line number of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// A TOML value that did not fit its Rust type, located: the 1-based line
/// (when known) and a message naming the key with its section, e.g.
/// `[limits] max_turns: expected an integer, found the string "eight"`.
pub fn toml_problem(
    err: &serde_path_to_error::Error<toml::de::Error>,
    text: &str,
) -> (Option<usize>, String) {
    let line = err.inner().span().map(|s| line_of(text, s.start));
    let keys: Vec<String> = err
        .path()
        .iter()
        .filter_map(|seg| match seg {
            serde_path_to_error::Segment::Map { key } => Some(key.clone()),
            serde_path_to_error::Segment::Seq { index } => Some(format!("[{index}]")),
            _ => None,
        })
        .collect();
    let message = humanize(err.inner().message().trim());
    let message = match keys.split_last() {
        None => message,
        Some((key, [])) => format!("{key}: {message}"),
        Some((key, section)) => format!("[{}] {key}: {message}", section.join(".")),
    };
    (line, message)
}

/// serde's "invalid type: string \"x\", expected u32" as "expected an
/// integer, found the string \"x\""; other messages pass through.
fn humanize(msg: &str) -> String {
    let expected_words = |e: &str| -> String {
        match e.trim() {
            "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" => {
                "an integer".into()
            }
            "f32" | "f64" => "a number".into(),
            "a sequence" => "an array".into(),
            "a map" => "a table".into(),
            e if e.starts_with("struct ") => "a table".into(),
            e => e.replace('`', ""),
        }
    };
    let found_words = |f: &str| -> String {
        let f = f.trim();
        let value = |prefix: &str| f.strip_prefix(prefix).map(|v| v.trim().replace('`', ""));
        if let Some(v) = value("string ") {
            format!("the string {v}")
        } else if let Some(v) = value("integer ") {
            format!("the integer {v}")
        } else if let Some(v) = value("floating point ") {
            format!("the number {v}")
        } else if let Some(v) = value("boolean ") {
            format!("the boolean {v}")
        } else if f == "sequence" {
            "an array".into()
        } else if f == "map" {
            "a table".into()
        } else {
            f.replace('`', "")
        }
    };
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some((found, expected)) = msg
            .strip_prefix(prefix)
            .and_then(|rest| rest.split_once(", expected "))
        {
            return format!(
                "expected {}, found {}",
                expected_words(expected),
                found_words(found)
            );
        }
    }
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        return match rest.split_once(", expected ") {
            Some((_, expected)) => format!("unknown key (expected {})", expected.replace('`', "")),
            None => "unknown key".into(),
        };
    }
    msg.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_brackets_inside_strings_are_not_brackets() {
        let text = br#"{"a": "[{\"}", "b": [1]} ]"#;
        let mut brackets = JsonBrackets::default();
        let found: Vec<u8> = text.iter().filter_map(|&b| brackets.bracket(b)).collect();
        assert_eq!(found, b"{[]}]");
    }

    #[test]
    fn printable_escapes_controls_and_bidi_overrides_only() {
        assert_eq!(printable("plain — text"), "plain — text");
        assert_eq!(printable("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        assert_eq!(
            printable("zw\u{200b}sp\u{feff}x\u{2060}"),
            "zw\\u{200b}sp\\u{feff}x\\u{2060}"
        );
        assert_eq!(printable("x\u{202e}y\u{9b}"), "x\\u{202e}y\\u{9b}");
        // Line separators and bidi marks too.
        assert_eq!(
            printable("a\u{2028}b\u{2029}c\u{200f}d\u{61c}"),
            "a\\u{2028}b\\u{2029}c\\u{200f}d\\u{61c}"
        );
    }

    #[test]
    fn printable_json_escapes_what_serde_leaves_raw_and_keeps_the_values() {
        let value = serde_json::json!({
            "a": "x\u{9b}2J\u{202e}y\u{7f}\u{2066}",
            "b": "line\nbreak\u{1b}]0;t\u{7}",
            "c": ["plain — text"],
        });
        let json = serde_json::to_string_pretty(&value).unwrap();
        let shown = printable_json(&json);
        assert!(
            !shown.chars().any(|c| c != '\n' && unsafe_char(c)),
            "{shown}"
        );
        assert!(
            shown.contains(r#""x\u009b2J\u202ey\u007f\u2066""#),
            "{shown}"
        );
        assert_eq!(shown.lines().count(), json.lines().count());
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, value);
        assert!(matches!(
            printable_json("{\n  \"a\": 1\n}"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn one_line_joins_white_space_then_clips_and_a_shell_word_is_one_word() {
        assert_eq!(one_line("a\n  b\tc", 10), "a b c");
        assert_eq!(one_line("héllo wörld", 5), "héll…");
        assert_eq!(shell_word("weekly-report_2.md"), "weekly-report_2.md");
        assert_eq!(shell_word("t/20260409T061500Z"), "t/20260409T061500Z");
        assert_eq!(shell_word("two words"), "'two words'");
        assert_eq!(shell_word("it's $HOME"), "'it'\\''s $HOME'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn a_table_cell_from_a_record_is_cut_not_a_panic() {
        let long = "x".repeat(70_000);
        let t = table(&["A".to_string()], &[vec![long]]);
        assert!(t.lines().nth(1).unwrap().chars().count() <= MAX_CELL_CHARS);
    }

    fn problem(text: &str) -> (Option<usize>, String) {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Limits {
            max_turns: Option<u32>,
            ratio: Option<f64>,
        }
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Root {
            limits: Option<Limits>,
            name: Option<String>,
        }
        let de = toml::Deserializer::parse(text).unwrap();
        let e = serde_path_to_error::deserialize::<_, Root>(de).unwrap_err();
        toml_problem(&e, text)
    }

    #[test]
    fn a_wrong_type_names_section_key_and_line() {
        assert_eq!(
            problem("name = \"x\"\n[limits]\nmax_turns = \"eight\"\n"),
            (
                Some(3),
                "[limits] max_turns: expected an integer, found the string \"eight\"".into()
            )
        );
        assert_eq!(
            problem("name = 5\n"),
            (
                Some(1),
                "name: expected a string, found the integer 5".into()
            )
        );
        assert_eq!(
            problem("[limits]\nmax_turns = -1\n").1,
            "[limits] max_turns: expected an integer, found the integer -1"
        );
    }

    #[test]
    fn an_unknown_key_is_named_with_the_expected_ones() {
        let (line, message) = problem("[limits]\n\nmax_turn = 3\n");
        assert_eq!(line, Some(3));
        assert_eq!(
            message,
            "[limits] max_turn: unknown key (expected max_turns or ratio)"
        );
    }

    #[test]
    fn clipping_and_prefixes_never_split_a_character() {
        assert_eq!(clip("ééé", 2), "é…");
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(prefix_bytes("aé", 2), "a");
        assert_eq!(prefix_bytes("aé", 3), "aé");
        assert_eq!(line_of("a\nb\nc", 4), 3);
        // FNV-1a reference values.
        assert_eq!(short_hash(""), 0x811c_9dc5);
        assert_eq!(short_hash("a"), 0xe40c_292c);
    }
}
