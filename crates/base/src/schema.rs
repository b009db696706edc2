//! Structured answers (docs/tasks.md, "Structured answers"): a JSON Schema
//! (draft 2020-12) the final answer must match. The schema is described to the
//! model; an answer is read as JSON (a code fence around it is accepted) and
//! validated with the `jsonschema` crate; a failed answer is asked for once
//! more with the schema as the request's `response_format`, which llama-server
//! turns into a grammar.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::file::{FileError, Links, read_regular};

/// The largest schema file read.
const MAX_SCHEMA_BYTES: u64 = 1024 * 1024;

/// Validation errors quoted back to the model at most.
const MAX_ERRORS: usize = 8;

/// A compiled output schema.
#[derive(Clone)]
pub struct OutputSchema {
    /// The file it came from (for messages).
    pub path: PathBuf,
    pub schema: Value,
    validator: Arc<jsonschema::Validator>,
}

impl fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputSchema")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl PartialEq for OutputSchema {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.schema == other.schema
    }
}

impl OutputSchema {
    /// Reads and compiles a schema file. `Err` says what is wrong with it.
    pub fn load(path: &Path) -> Result<OutputSchema, String> {
        let shown = path.display();
        let bytes = read_regular(path, MAX_SCHEMA_BYTES, Links::Follow).map_err(|e| match e {
            FileError::TooLarge { .. } | FileError::Grew { .. } => {
                format!("the output schema {shown} is over 1 MiB")
            }
            e => format!("cannot read the output schema {shown}: {e}"),
        })?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("the output schema {shown} is not UTF-8 text"))?;
        let schema: Value = serde_json::from_str(&text)
            .map_err(|e| format!("the output schema {shown} is not JSON: {e}"))?;
        let validator = jsonschema::draft202012::new(&schema)
            .map_err(|e| format!("the output schema {shown} is not a valid JSON Schema: {e}"))?;
        Ok(OutputSchema {
            path: path.to_path_buf(),
            schema,
            validator: Arc::new(validator),
        })
    }

    /// The answer as JSON when it matches; `Err` lists why not, in words
    /// the model can act on.
    pub fn check(&self, answer: &str) -> Result<Value, Vec<String>> {
        if answer.len() > MAX_ANSWER_BYTES {
            return Err(vec![format!(
                "the answer is {} bytes; a structured answer may hold at most {MAX_ANSWER_BYTES} (1 MiB)",
                answer.len()
            )]);
        }
        let Some(value) = answer_json(answer) else {
            return Err(vec![
                "the answer is not a JSON value (write only the JSON, optionally in a ```json code fence)"
                    .into(),
            ]);
        };
        let errors: Vec<String> = self
            .validator
            .iter_errors(&value)
            .take(MAX_ERRORS)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() {
                    "the top level".to_string()
                } else {
                    at.to_string()
                };
                // The error quotes the value, which may be the whole answer.
                crate::text::clip(&format!("at {at}: {e}"), 300)
            })
            .collect();
        if errors.is_empty() {
            Ok(value)
        } else {
            Err(errors)
        }
    }

    /// The sentence for the system prompt.
    pub fn describe(&self) -> String {
        format!(
            "Your final answer must be one JSON value matching this JSON Schema, and nothing else: {}",
            self.schema
        )
    }

    /// The `response_format` of the repair request.
    pub fn response_format(&self) -> Value {
        json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": self.schema}})
    }
}

/// The longest answer checked against a schema: it is parsed into a tree,
/// which costs many times its length.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// The JSON of an answer: the whole text, a code fence around it, or —
/// when the reply holds prose around it — its one ```` ```json ```` fence
/// (docs/tasks.md, "Structured answers"). Two such fences are ambiguous and
/// read as no JSON.
pub fn answer_json(answer: &str) -> Option<Value> {
    let t = answer.trim();
    let inner = match t.strip_prefix("```") {
        Some(rest) => {
            let body = rest.split_once('\n').map_or("", |(_, b)| b);
            body.trim_end().strip_suffix("```")
        }
        None => Some(t),
    };
    inner
        .and_then(|i| serde_json::from_str(i.trim()).ok())
        .or_else(|| serde_json::from_str(the_json_fence(answer)?.trim()).ok())
}

/// The text inside the reply's only ```` ```json ```` fence, if it has
/// exactly one that is closed.
fn the_json_fence(text: &str) -> Option<&str> {
    // A fence opens a line (indented too, as in a list item) and says
    // `json` and nothing more (not `json5`).
    // At most one fence opens each line, so the info strings scanned add
    // up to the text at most once.
    let mut fences = text.match_indices("```json").filter(|(at, open)| {
        opens_line(text, *at)
            && text[at + open.len()..]
                .split('\n')
                .next()
                .is_none_or(|info| info.trim().is_empty())
    });
    let (at, open) = fences.next()?;
    if fences.next().is_some() {
        return None;
    }
    let after = &text[at + open.len()..];
    let (_, body) = after.split_once('\n')?;
    let end = body
        .match_indices("```")
        .find(|(i, _)| opens_line(body, *i))?
        .0;
    Some(&body[..end])
}

/// Whether only spaces or tabs stand between the line's start and `at`.
fn opens_line(text: &str, at: usize) -> bool {
    let before = text[..at].trim_end_matches([' ', '\t']);
    before.is_empty() || before.ends_with('\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> OutputSchema {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.json");
        std::fs::write(
            &p,
            r#"{"type":"object","required":["papers"],"properties":{"papers":{"type":"integer","minimum":0}},"additionalProperties":false}"#,
        )
        .unwrap();
        OutputSchema::load(&p).unwrap()
    }

    #[test]
    fn a_matching_answer_passes_bare_or_fenced() {
        let s = schema();
        assert_eq!(s.check(r#"{"papers": 5}"#), Ok(json!({"papers": 5})));
        assert_eq!(
            s.check("```json\n{\"papers\": 3}\n```\n"),
            Ok(json!({"papers": 3}))
        );
        assert_eq!(
            s.check("```\n{\"papers\": 0}\n```"),
            Ok(json!({"papers": 0}))
        );
    }

    #[test]
    fn the_one_json_fence_in_prose_is_the_answer() {
        let s = schema();
        assert_eq!(
            s.check("Here is the count:\n```json\n{\"papers\": 4}\n```\nHope this helps."),
            Ok(json!({"papers": 4}))
        );
        assert_eq!(
            s.check("Result:\r\n```json\r\n{\"papers\": 2}\r\n```"),
            Ok(json!({"papers": 2}))
        );
        // Two fences: which one is meant is not guessed.
        let two = "A:\n```json\n{\"papers\": 1}\n```\nB:\n```json\n{\"papers\": 2}\n```\n";
        assert!(s.check(two).is_err());
        // json5 is not json; an indented fence (a list item) is one.
        assert!(s.check("See:\n```json5\n{\"papers\": 1}\n```\n").is_err());
        assert_eq!(
            s.check("1. The answer:\n   ```json\n   {\"papers\": 6}\n   ```\n"),
            Ok(json!({"papers": 6}))
        );
        // Unclosed, or not at the start of a line.
        assert!(s.check("See:\n```json\n{\"papers\": 1}\n").is_err());
        assert!(
            s.check("inline ```json\n{\"papers\": 1}\n``` here")
                .is_err()
        );
    }

    #[test]
    fn a_wrong_answer_says_where_and_why() {
        let s = schema();
        let e = s.check(r#"{"papers": -1, "extra": true}"#).unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e.iter()
                .any(|m| m.starts_with("at /papers: ") && m.contains("minimum")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.starts_with("at the top level: ") && m.contains("extra")),
            "{e:?}"
        );
        let e = s.check("Five papers.").unwrap_err();
        assert!(e[0].starts_with("the answer is not a JSON value"), "{e:?}");
        assert!(
            s.check("```json\n{\"papers\": 1}").is_err(),
            "an unclosed fence is not JSON"
        );
    }

    #[test]
    fn huge_answers_are_refused_before_parsing_and_errors_stay_short() {
        let s = schema();
        let big = format!("[{}1]", "1,".repeat(MAX_ANSWER_BYTES / 2));
        let e = s.check(&big).unwrap_err();
        assert_eq!(
            e,
            [format!(
                "the answer is {} bytes; a structured answer may hold at most 1048576 (1 MiB)",
                big.len()
            )]
        );
        let long = format!("{{\"papers\": \"{}\"}}", "x".repeat(100_000));
        let e = s.check(&long).unwrap_err();
        assert!(e.iter().all(|m| m.chars().count() <= 300), "{e:?}");
    }

    #[test]
    fn a_broken_schema_file_is_refused_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.json");
        std::fs::write(&p, r#"{"type": 12}"#).unwrap();
        assert!(
            OutputSchema::load(&p)
                .unwrap_err()
                .contains("not a valid JSON Schema")
        );
        std::fs::write(&p, "not json").unwrap();
        assert!(OutputSchema::load(&p).unwrap_err().contains("is not JSON"));
        assert!(
            OutputSchema::load(&dir.path().join("none.json"))
                .unwrap_err()
                .contains("cannot read")
        );
    }
}
