//! Unit tests of `tools`.

use super::*;
use serde_json::json;

const ALL: &[Tool] = &[
    Tool::Builtin(ToolName::Webfetch),
    Tool::Builtin(ToolName::NoteworxListNotes),
    Tool::Builtin(ToolName::NoteworxSearchNotes),
    Tool::Builtin(ToolName::NoteworxReadNote),
    Tool::Builtin(ToolName::NoteworxListAttachments),
    Tool::Builtin(ToolName::NoteworxReadAttachment),
    Tool::Builtin(ToolName::NoteworxCreateAttachment),
];

#[test]
fn every_tool_has_a_schema_with_its_required_keys() {
    let d = ToolName::NoteworxReadAttachment.definition();
    assert_eq!(d["function"]["name"], "noteworx_read_attachment");
    assert_eq!(
        d["function"]["parameters"]["required"],
        json!(["slug", "attachment_id"])
    );
    assert_eq!(
        d["function"]["parameters"]["properties"]["attachment_id"]["type"],
        "string"
    );
    for t in ToolName::ALL {
        assert_eq!(ToolName::parse(t.as_str()), Some(t));
        assert!(
            t.description().len() < 160,
            "{} description too long for a small model",
            t.as_str()
        );
    }
    assert!(
        ToolName::NoteworxCreateAttachment
            .description()
            .contains("frontmatter")
    );
}

#[test]
fn an_unknown_tool_lists_the_allowed_ones() {
    let e = validate(
        "read_file",
        "{}",
        &[
            Tool::Builtin(ToolName::Webfetch),
            Tool::Builtin(ToolName::NoteworxReadNote),
        ],
    )
    .unwrap_err();
    assert_eq!(
        e,
        "Unknown tool \"read_file\". The tools you can call are: webfetch, noteworx_read_note."
    );
}

#[test]
fn a_tool_the_task_does_not_allow_is_refused() {
    let e = validate(
        "webfetch",
        r#"{"url":"http://x"}"#,
        &[Tool::Builtin(ToolName::NoteworxReadNote)],
    )
    .unwrap_err();
    assert!(
        e.starts_with("Tool webfetch is not available in this task"),
        "{e}"
    );
}

#[test]
fn every_argument_problem_is_named_with_the_expected_schema() {
    let e = validate(
        "noteworx_read_attachment",
        r#"{"slgu":"a","offset":"x","attachment_id":true}"#,
        ALL,
    )
    .unwrap_err();
    assert_eq!(
        e,
        "Invalid arguments for noteworx_read_attachment: `attachment_id` must be a string, not a boolean; \
         `offset` must be a non-negative integer, not \"x\"; unknown argument `slgu`; missing required `slug`. \
         Expected noteworx_read_attachment{slug: string (required), attachment_id: string (required), offset: integer}."
    );
}

#[test]
fn invalid_json_and_non_objects_are_explained() {
    let e = validate("noteworx_read_note", r#"{"slug": "cut off"#, ALL).unwrap_err();
    assert!(e.starts_with("Arguments are not valid JSON"), "{e}");
    assert!(e.contains("slug: string (required)"), "{e}");
    let e = validate("noteworx_read_note", "[1]", ALL).unwrap_err();
    assert!(
        e.starts_with("Arguments must be a JSON object, not an array"),
        "{e}"
    );
    let huge = format!(r#"{{"slug": "a", "pad": [{}1]}}"#, "1,".repeat(600_000));
    let e = validate("noteworx_read_note", &huge, ALL).unwrap_err();
    assert!(
        e.starts_with("Arguments are 1200025 bytes; the limit is 1048576 (1 MiB)."),
        "{e}"
    );
}

#[test]
fn enums_and_empty_required_strings_are_checked() {
    let e = validate(
        "noteworx_search_notes",
        r#"{"query":" ","mode":"fuzzy"}"#,
        ALL,
    )
    .unwrap_err();
    assert!(
        e.contains("`mode` must be one of fulltext, title, semantic"),
        "{e}"
    );
    assert!(e.contains("`query` must not be empty"), "{e}");
}

#[test]
fn slugs_and_ids_that_would_change_the_address_are_refused_before_any_request() {
    for (name, args) in [
        ("noteworx_read_note", r#"{"slug":".."}"#),
        ("noteworx_read_note", r#"{"slug":"."}"#),
        ("noteworx_list_attachments", r#"{"slug":"a\u0000b"}"#),
        (
            "noteworx_create_attachment",
            r#"{"slug":"..","filename":"x","content":"y"}"#,
        ),
        (
            "noteworx_read_attachment",
            r#"{"slug":"n","attachment_id":".."}"#,
        ),
        (
            "noteworx_read_attachment",
            r#"{"slug":"n","attachment_id":"1\n2"}"#,
        ),
    ] {
        let e = validate(name, args, ALL).unwrap_err();
        assert!(
            e.contains("must be a slug or id as a listing gave it"),
            "{args}: {e}"
        );
    }
    // Separators are fine: the client percent-encodes them into one segment.
    assert!(validate("noteworx_read_note", r#"{"slug":"a/b"}"#, ALL).is_ok());
    assert!(validate("noteworx_read_note", r#"{"slug":"..x"}"#, ALL).is_ok());
}

#[test]
fn small_model_spellings_of_numbers_and_ids_are_accepted() {
    assert_eq!(
        validate(
            "noteworx_read_attachment",
            r#"{"slug":"n","attachment_id":42,"offset":"100"}"#,
            ALL
        )
        .unwrap(),
        Call::ReadAttachment {
            slug: "n".into(),
            attachment_id: "42".into(),
            offset: 100
        }
    );
    assert_eq!(
        validate("noteworx_list_notes", r#"{"limit":5.0,"tag":null}"#, ALL).unwrap(),
        Call::ListNotes {
            space: None,
            tag: None,
            limit: Some(5)
        }
    );
    assert_eq!(
        validate("noteworx_list_notes", "", ALL).unwrap(),
        Call::ListNotes {
            space: None,
            tag: None,
            limit: None
        }
    );
}
