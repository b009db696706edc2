//! A stdio server's output as the SDK reads it: one JSON-RPC message a
//! line, each line capped, and every value nested deeper than
//! [`MAX_NESTING`] replaced by `null` on the way. The SDK's JSON parser
//! stops at 128 levels and then drops the whole message without a word:
//! one tool whose schema nests past that would make the whole `tools/list`
//! answer vanish, and the server look as if it never answered. Flattened
//! here, the listing arrives, and only that tool is not offered (its
//! schema is deeper than the listing allows).

use std::borrow::Cow;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// Levels of arrays and objects a message keeps; deeper values become `null`.
pub(super) const MAX_NESTING: usize = 64;

/// Copies `from` to `to` line by line, each [`flatten`]ed; a line longer
/// than `cap` bytes is dropped whole (as the SDK would), never held. What
/// one read brings is passed on in one write, so a flood of small lines
/// costs a copy, not a wake-up each.
pub(super) async fn relay(
    from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    cap: usize,
) {
    let mut from = BufReader::with_capacity(64 * 1024, from);
    let (mut line, mut out) = (Vec::new(), Vec::new());
    let mut dropping = false;
    loop {
        let taken = {
            let Ok(buf) = from.fill_buf().await else {
                return;
            };
            if buf.is_empty() {
                return;
            }
            let mut rest = buf;
            while !rest.is_empty() {
                let (piece, ended) = match rest.iter().position(|b| *b == b'\n') {
                    Some(i) => (&rest[..=i], true),
                    None => (rest, false),
                };
                rest = &rest[piece.len()..];
                if !dropping {
                    line.extend_from_slice(piece);
                }
                if line.len() > cap {
                    line.clear();
                    dropping = true;
                }
                if ended {
                    if !dropping {
                        out.extend_from_slice(&flatten(&line, MAX_NESTING));
                    }
                    line.clear();
                    dropping = false;
                }
            }
            buf.len()
        };
        from.consume(taken);
        if !out.is_empty() {
            if to.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
}

/// `line` with every array or object that would sit deeper than `max`
/// levels replaced by `null`; borrowed when nothing is that deep. Strings
/// are read as JSON reads them (escapes included), so a bracket inside one
/// is text. One pass, no tree built.
pub(super) fn flatten(line: &[u8], max: usize) -> Cow<'_, [u8]> {
    if deepest(line) <= max {
        return Cow::Borrowed(line);
    }
    let mut out = Vec::with_capacity(line.len());
    let (mut depth, mut skipping) = (0usize, None::<usize>);
    let (mut in_string, mut escaped) = (false, false);
    for &b in line {
        let mut emit = skipping.is_none();
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' => {
                    depth += 1;
                    if depth > max && skipping.is_none() {
                        skipping = Some(depth);
                        out.extend_from_slice(b"null");
                        emit = false;
                    }
                }
                b'}' | b']' => {
                    if skipping == Some(depth) {
                        skipping = None;
                        emit = false;
                    }
                    depth = depth.saturating_sub(1);
                }
                _ => {}
            }
        }
        if emit {
            out.push(b);
        }
    }
    Cow::Owned(out)
}

/// The deepest nesting of arrays and objects in `line`.
fn deepest(line: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut brackets = harness_base::text::JsonBrackets::default();
    for &b in line {
        match brackets.bracket(b) {
            Some(b'{' | b'[') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            Some(_) => depth = depth.saturating_sub(1),
            None => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn a_value_past_the_limit_becomes_null_and_the_rest_is_kept() {
        let line = format!(
            r#"{{"a":"[[[ not nesting","deep":{},"b":2}}"#,
            nested(300_000)
        );
        let flat = flatten(line.as_bytes(), 64);
        let v: Value = serde_json::from_slice(&flat).unwrap();
        assert_eq!(v["a"], "[[[ not nesting");
        assert_eq!(v["b"], 2);
        assert_eq!(
            deepest(&flat),
            64,
            "the outer object and 63 levels, then null"
        );
        let shallow = br#"{"x":[1,{"y":"\"}]"}]}"#;
        assert!(matches!(flatten(shallow, 64), Cow::Borrowed(_)));
    }

    proptest! {
        /// Whatever is nested however deep, valid JSON stays valid JSON
        /// the parser takes, and what is within the limit is unchanged.
        #[test]
        fn flattened_json_always_parses(levels in 0usize..400, key in "[a-z\\[\\]{}\"\\\\]{0,8}") {
            let doc = serde_json::json!({"k": key.clone(), "v": 1}).to_string();
            let line = doc.replace("1}", &format!("{}}}", nested(levels)));
            let flat = flatten(line.as_bytes(), 64);
            let v: Value = serde_json::from_slice(&flat).unwrap();
            prop_assert_eq!(v["k"].as_str(), Some(key.as_str()));
            if levels < 64 {
                prop_assert_eq!(flat.as_ref(), line.as_bytes());
            }
        }
    }

    #[tokio::test]
    async fn lines_are_relayed_whole_and_an_overlong_one_is_dropped() {
        let input = format!(
            "{{\"a\":1}}\n{}\n{{\"b\":{}}}\n",
            "x".repeat(1000),
            nested(100)
        );
        let (mut reader, writer) = tokio::io::duplex(1 << 20);
        relay(input.as_bytes(), writer, 500).await;
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut reader, &mut out)
            .await
            .unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert_eq!(lines[0], r#"{"a":1}"#);
        let v: Value = serde_json::from_str(lines[1]).unwrap();
        assert!(v["b"].is_array());
    }
}
