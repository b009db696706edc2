//! Fitting tool results into `max_tool_result_chars` (SPEC §7). Sizes are
//! counted in characters, never bytes, so a cut never splits a character.
//!
//! [`cut`] is the safety net applied to every result; [`page`] is what the
//! reading tools use so that a cut tells the model the exact `offset` to
//! read on from — an offset into the note's, attachment's or page's text,
//! not into the formatted result.

use crate::text::{byte_at, chars};

/// Characters reserved for the note a cut appends.
const NOTE_ROOM: usize = 160;

/// Cuts `text` to at most `max` characters, ending with a note that says how
/// many were removed. Text that fits is returned unchanged.
pub fn cut(text: &str, max: usize) -> String {
    let total = chars(text);
    if total <= max {
        return text.to_string();
    }
    let keep = max.saturating_sub(NOTE_ROOM);
    let removed = total - keep;
    format!(
        "{}\n[cut: {removed} of {total} characters removed to fit the tool result limit]",
        &text[..byte_at(text, keep)]
    )
}

/// One page of `body` starting at character `offset`, after `header`, fitting
/// `max` characters in all. When the body goes on, the page ends with the
/// offset to continue from.
pub fn page(header: &str, body: &str, offset: usize, max: usize) -> String {
    let total = chars(body);
    if offset > 0 && offset >= total {
        return format!(
            "{header}[offset {offset} is past the end: the text has {total} characters]"
        );
    }
    let room = max.saturating_sub(chars(header) + NOTE_ROOM).max(1);
    let start = byte_at(body, offset);
    let rest = &body[start..];
    let rest_chars = total - offset;
    if rest_chars <= max.saturating_sub(chars(header)) {
        let shown = if offset > 0 {
            format!("[characters {offset}..{total} of {total}]\n")
        } else {
            String::new()
        };
        return format!("{header}{shown}{rest}");
    }
    let end = offset + room;
    format!(
        "{header}{}\n[cut: characters {offset}..{end} of {total} shown, {} more. To read on, call again with offset={end}]",
        &rest[..byte_at(rest, room)],
        total - end
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(cut("hello", 300), "hello");
        assert_eq!(page("H\n", "hello", 0, 300), "H\nhello");
    }

    #[test]
    fn a_cut_fits_the_limit_and_says_how_much_went() {
        let text = "é".repeat(1000);
        let out = cut(&text, 300);
        assert!(chars(&out) <= 300, "{} chars", chars(&out));
        assert!(
            out.ends_with("[cut: 860 of 1000 characters removed to fit the tool result limit]"),
            "{out}"
        );
    }

    #[test]
    fn pages_chain_by_offset_over_the_whole_text() {
        let body: String = (0..2000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let mut offset = 0;
        let mut read = String::new();
        for _ in 0..20 {
            let out = page("Note x\n", &body, offset, 500);
            assert!(chars(&out) <= 500, "page of {} chars", chars(&out));
            let text = out.strip_prefix("Note x\n").unwrap();
            match text.rfind("call again with offset=") {
                Some(i) => {
                    let next: usize = text[i + 23..].trim_end_matches(']').parse().unwrap();
                    read.push_str(&text[..text.rfind("\n[cut:").unwrap()]);
                    assert!(next > offset);
                    offset = next;
                }
                None => {
                    read.push_str(text.split_once('\n').map(|(_, b)| b).unwrap_or(text));
                    break;
                }
            }
        }
        assert_eq!(read, body);
    }

    #[test]
    fn an_offset_past_the_end_is_explained() {
        assert_eq!(
            page("", "abc", 10, 300),
            "[offset 10 is past the end: the text has 3 characters]"
        );
    }
}
