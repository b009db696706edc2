//! Unit tests of `tools::noteworx`.

use super::*;
use chrono::TimeZone;

fn sig<'a>(task: &'a str, slug: &'a str) -> Signature<'a> {
    Signature {
        agent_name: "default-agent",
        task,
        run_id: "20260409T061500Z",
        created_at: Utc.with_ymd_and_hms(2026, 4, 9, 6, 15, 14).unwrap(),
        parent_note: slug,
    }
}

#[test]
fn the_signature_matches_the_spec_byte_for_byte() {
    assert_eq!(
        sign(
            "Body text\n",
            &sig("weekly-research-scan", "some-note-slug")
        ),
        "---\nagent: noteworx-agent-harness\nagent_name: default-agent\nagent_version: 0.1.0\n\
         agent_task: weekly-research-scan\nagent_run_id: 20260409T061500Z\n\
         agent_created_at: 2026-04-09T06:15:14Z\nparent_note: some-note-slug\n---\nBody text\n"
    );
}

#[test]
fn hostile_names_are_quoted_into_valid_yaml() {
    let out = sign("x", &sig("a: b\n---\nagent: evil", "#slug \"q\" \\"));
    assert!(
        out.contains("agent_task: \"a: b\\n---\\nagent: evil\"\n"),
        "{out}"
    );
    assert!(
        out.contains("parent_note: \"#slug \\\"q\\\" \\\\\"\n"),
        "{out}"
    );
    assert_eq!(
        out.matches("\n---\n").count(),
        1,
        "only the closing fence: {out}"
    );
    for s in [
        "true", "No", "123", "1.5", "null", "-x", "", "12:30", "0x1f", "ok:",
    ] {
        assert!(yaml_scalar(s).starts_with('"'), "{s:?} left plain");
    }
    for s in [
        "default-agent",
        "0.1.0",
        "20260409T061500Z",
        "2026-04-09T06:15:14Z",
        "a_b",
    ] {
        assert_eq!(yaml_scalar(s), s);
    }
}

#[test]
fn model_written_frontmatter_is_removed() {
    assert_eq!(
        strip_frontmatter("---\nagent: me\ntitle: x\n---\n# Body\n"),
        "# Body\n"
    );
    assert_eq!(strip_frontmatter("\n+++\na = 1\n+++\nBody"), "Body");
    assert_eq!(
        strip_frontmatter("# No frontmatter\n---\n"),
        "# No frontmatter\n---\n"
    );
    assert_eq!(
        strip_frontmatter("---\nnever closed\n"),
        "---\nnever closed\n"
    );
}

#[test]
fn filenames_are_made_safe() {
    assert_eq!(sanitize_filename("summary"), "summary.md");
    assert_eq!(sanitize_filename("../../etc/passwd"), "etc-passwd.md");
    assert_eq!(sanitize_filename(".hidden.txt"), "hidden.txt");
    assert_eq!(sanitize_filename("notes.csv"), "notes.csv");
    assert_eq!(sanitize_filename("a\\b\nc.md"), "a-b-c.md");
    assert_eq!(sanitize_filename("..."), "suggestion.md");
    assert_eq!(sanitize_filename("trailing."), "trailing.md");
    assert!(!sanitize_filename("x/y/z").contains('/'));
}

#[test]
fn listings_are_one_line_per_note_without_content() {
    let notes = vec![ListedNote {
        slug: "eval".into(),
        title: "Evaluation".into(),
        tags: vec!["research".into(), "ml".into()],
        space: "work".into(),
        updated_at: "2026-01-02".into(),
        score: Some(0.87654),
    }];
    let text = list_notes_text(&notes);
    assert_eq!(
        text,
        "1 note:\n- eval | Evaluation | tags: research, ml | space: work | updated: 2026-01-02 | score: 0.877\n"
    );
    assert_eq!(list_notes_text(&[]), "No notes found.");
}

/// A listing whose body is still coming when `timeout_secs` ends is told as
/// a timeout (the operator raises `timeout_secs`), never as a dropped
/// connection; the connection stays open the whole time.
#[tokio::test]
async fn a_body_still_coming_at_the_timeout_is_a_timeout_not_a_dropped_connection() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The start of a body, then nothing, the connection held open well
    // past the timeout (an unreadable body is not retried).
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let _ = s.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"notes\": [",
        );
        std::thread::sleep(std::time::Duration::from_secs(3));
    });
    let client = NoteworxClient::new(
        &harness_config::NoteworxConfig {
            base_url: format!("http://127.0.0.1:{port}"),
            token: harness_config::Secret::new("t0ken-for-tests"),
            token_env: "NOTEWORX_TOKEN".into(),
            agent_name: "default-agent".into(),
            timeout_secs: 1,
        },
        &harness_base::http::Trust::bundled(),
    )
    .unwrap();
    let err = client.list_notes(None, None, None).await.unwrap_err();
    let text = err.to_string();
    assert_eq!(
        text,
        "noteworx could not be reached: timed out while the answer came"
    );
}
