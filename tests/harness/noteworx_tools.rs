//! The six noteworx tools (docs/tools.md, "Built-in tools") against a fake
//! noteworx (`common/fake_noteworx.rs`).

use agent_harness::agent::StopReason;
use agent_harness::records::Status;
use serde_json::{Value, json};

use crate::common::fake_noteworx::{self, FakeNoteworx, note};
use crate::common::*;

/// Runs one task whose model makes the given calls (one turn each), then answers "done".
async fn script(
    notes: &FakeNoteworx,
    task_name: &str,
    calls: Vec<(&str, Value)>,
    extra: &str,
) -> Scene {
    scenario()
        .calls(calls, "done")
        .task(task_name, "Work with my notes.")
        .config(extra)
        .notes(notes)
        .ran()
        .await
}

/// Runs task `t`, whose model makes the given calls, then answers "done".
async fn calling(notes: &FakeNoteworx, calls: Vec<(&str, Value)>) -> Scene {
    script(notes, "t", calls, "").await
}

/// The call reading note `slug`.
fn read(slug: &str) -> (&'static str, Value) {
    ("noteworx_read_note", json!({"slug": slug}))
}

#[tokio::test]
async fn a_research_task_lists_searches_reads_in_parts_and_leaves_one_correct_attachment() {
    let long: String = (0..3000)
        .map(|i| {
            if i % 50 == 49 {
                '\n'
            } else {
                char::from(b'a' + (i % 26) as u8)
            }
        })
        .collect();
    let notes = FakeNoteworx::start(vec![
        note("eval", "Evaluation", &["research-active"], &long),
        note("misc", "Misc", &["other"], "unrelated"),
    ])
    .await;
    let att = notes.add_attachment(
        "eval",
        "sources.txt",
        "text/plain",
        "https://example.org/paper",
    );
    let scene = script(
        &notes,
        "weekly-research-scan",
        vec![
            ("noteworx_list_notes", json!({"tag": "research-active"})),
            ("noteworx_search_notes", json!({"query": "evaluation", "mode": "title", "limit": 5})),
            ("noteworx_read_note", json!({"slug": "eval"})),
            ("noteworx_read_note", json!({"slug": "eval", "offset": 1828})),
            ("noteworx_list_attachments", json!({"slug": "eval"})),
            ("noteworx_read_attachment", json!({"slug": "eval", "attachment_id": att})),
            ("noteworx_create_attachment", json!({"slug": "eval", "filename": "summary", "content": "## Summary\nAll good.\n"})),
        ],
        "[limits]\nmax_turns = 10\nmax_tool_result_chars = 2000\n",
    )
    .await;

    let s = scene.summary("weekly-research-scan");
    assert_eq!(
        (s.status, s.tool_calls, s.tool_errors),
        (Status::Succeeded, 7, 0)
    );
    let lines = scene.tool_lines("weekly-research-scan");
    assert_eq!(
        lines[0].result,
        "1 note:\n- eval | Evaluation | tags: research-active | space: work | updated: 2026-04-01T10:00:00Z\n"
    );
    assert_contains(&lines[1].result, "score: 0.75");
    assert!(
        !lines[1].result.contains("aaaa"),
        "search results carry no content"
    );
    assert!(
        lines[2]
            .result
            .ends_with(r#"call noteworx_read_note with slug="eval" and offset=1828]"#),
        "{}",
        lines[2].result
    );
    let part_two = &lines[3].result;
    assert!(
        part_two.starts_with(
            "Note eval | Evaluation | tags: research-active\n\n[characters 1828..3000 of 3000]\n"
        ),
        "{part_two}"
    );
    let reassembled = format!(
        "{}{}",
        lines[2]
            .result
            .split_once("\n\n")
            .unwrap()
            .1
            .rsplit_once("\n[cut:")
            .unwrap()
            .0,
        part_two.split_once("]\n").unwrap().1
    );
    assert_eq!(reassembled, long, "the two parts are the whole note");
    assert_eq!(
        lines[4].result,
        format!(
            "Note eval has 1 attachment(s):\n- id {att} | sources.txt | text/plain | 25 bytes | 2026-04-01T10:00:00Z\n"
        )
    );
    assert_eq!(
        lines[5].result,
        format!("Attachment {att} | sources.txt | note eval\n\nhttps://example.org/paper")
    );
    assert!(
        lines[6]
            .result
            .starts_with("Created attachment summary.md (id "),
        "{}",
        lines[6].result
    );

    let created: Vec<Value> = notes
        .attachments("eval")
        .into_iter()
        .filter(|a| a["filename"] == "summary.md")
        .collect();
    assert_eq!(created.len(), 1);
    assert_eq!(created[0]["content_type"], "text/markdown");
    assert_eq!(
        created[0]["content"],
        "---\nagent: noteworx-agent-harness\nagent_name: test-agent\nagent_version: 0.1.0\nagent_task: weekly-research-scan\n\
         agent_run_id: 20260409T061500Z\nagent_created_at: 2026-04-09T06:15:00Z\nparent_note: eval\n---\n## Summary\nAll good.\n"
    );
    let calls = notes.calls().await;
    assert_eq!(
        calls[1],
        (
            "GET".into(),
            "/api/notes/search?q=evaluation&mode=title&limit=5".into()
        )
    );
    assert_eq!(calls.iter().filter(|(m, _)| m == "POST").count(), 1);
    assert!(!scene.all_records().contains(fake_noteworx::TOKEN));
    assert_eq!(scene.requests().await.len(), 8);
}

#[tokio::test]
async fn model_written_frontmatter_is_replaced_and_hostile_names_stay_valid_yaml() {
    let notes = FakeNoteworx::start(vec![note("a: b", "Odd", &[], "x")]).await;
    let _scene = script(
        &notes,
        "true",
        vec![(
            "noteworx_create_attachment",
            json!({"slug": "a: b", "filename": "../../x/.evil", "content": "---\nagent: me\nagent_run_id: forged\n---\nReal body"}),
        )],
        "",
    )
    .await;

    let created = notes.attachments("a: b");
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0]["filename"], "x-.evil");
    let content = created[0]["content"].as_str().unwrap();
    assert!(content.contains("\nagent_task: \"true\"\n"), "{content}");
    assert!(content.contains("\nparent_note: \"a: b\"\n"), "{content}");
    assert!(!content.contains("forged"));
    assert!(content.ends_with("---\nReal body\n"), "{content}");
}

#[tokio::test]
async fn a_retried_task_does_not_create_the_same_attachment_twice() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "x")]).await;
    let call = (
        "noteworx_create_attachment",
        json!({"slug": "n", "filename": "idea.md", "content": "Same text"}),
    );
    script(&notes, "t", vec![call.clone()], "").await;
    let scene = script(&notes, "t", vec![call], "").await;

    assert_eq!(notes.attachments("n").len(), 1);
    let line = &scene.tool_lines("t")[0];
    assert!(
        line.result
            .starts_with("Attachment idea.md with this text already exists on note n (id 1)"),
        "{}",
        line.result
    );
    let detail: Value = serde_json::from_str(line.detail.as_ref().unwrap().get()).unwrap();
    assert_eq!(detail, json!({"duplicate_of": "1"}));
}

#[tokio::test]
async fn errors_tell_the_model_what_to_do_next() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "x")]).await;
    notes.add_attachment("n", "img.png", "image/png", "");
    notes.fail_next(&[]);
    let missing = json!({"slug": "n", "attachment_id": "99"});
    let image = json!({"slug": "n", "attachment_id": "1"});
    let big = json!({"slug": "n", "filename": "big.md", "content": "x".repeat(300 * 1024)});
    let scene = calling(
        &notes,
        vec![
            read("nope"),
            ("noteworx_read_attachment", missing),
            ("noteworx_read_attachment", image),
            ("noteworx_create_attachment", big),
        ],
    )
    .await;
    let lines = scene.tool_lines("t");
    let results: Vec<&str> = lines.iter().map(|l| l.result.as_str()).collect();
    let told = [
        "No note with slug \"nope\". Search or list notes first and use a slug from the results.",
        "No attachment with id \"99\" on note \"n\". List the note's attachments to get a valid id.",
        "Attachment 1 on note n is image/png, not text; it cannot be read.",
    ];
    assert_eq!(results[..3], told);
    assert_contains(&lines[3].result, "the limit is 262144 (256 KiB)");
    assert!(lines.iter().all(|l| l.is_error));
}

#[tokio::test]
async fn server_errors_are_retried_once_then_reported_as_unavailable() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "text")]).await;
    notes.fail_next(&[503]);
    let scene = calling(&notes, vec![read("n")]).await;
    assert_eq!(
        scene.tool_lines("t")[0].result,
        "Note n | N\n\ntext",
        "one 503 is retried"
    );

    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "text")]).await;
    notes.fail_next(&[502, 502]);
    let scene = calling(&notes, vec![read("n")]).await;
    let line = &scene.tool_lines("t")[0];
    assert!(line.is_error);
    assert_eq!(
        line.result,
        "noteworx is unavailable (HTTP 502: injected failure). Try later or answer without it."
    );
}

/// Task `t` listing the notes of a noteworx that refuses the token.
async fn listing_with_a_refused_token() -> Scene {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "text")]).await;
    notes.fail_next(&[401]);
    calling(&notes, vec![("noteworx_list_notes", json!({}))]).await
}

#[tokio::test]
async fn a_refused_token_stops_the_run_naming_the_variable() {
    let scene = listing_with_a_refused_token().await;

    let s = scene.summary("t");
    assert_eq!(
        (s.status, s.stop_reason, s.tool_errors),
        (Status::Interrupted, StopReason::SetupFault, 1)
    );
    assert_contains(
        s.error.as_deref().unwrap(),
        "check NOTEWORX_TOKEN (the variable named by [tools.noteworx] token_env)",
    );
    assert_eq!(scene.inbox(), ["t.md"], "the task stays in the inbox");
    let asked = scene.requests().await.len();
    assert_eq!(asked, 1, "the model is not asked again");
}

#[tokio::test]
async fn a_refused_token_is_a_tool_error_that_never_shows_the_token() {
    let scene = listing_with_a_refused_token().await;

    let line = &scene.tool_lines("t")[0];
    assert!(line.is_error);
    assert_eq!(
        line.result,
        "noteworx refused the token (401); the run stops so the operator can fix it."
    );
    assert_lacks(scene.all_records(), fake_noteworx::TOKEN);
}

#[tokio::test]
async fn slugs_cannot_climb_out_of_their_route() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "text")]).await;
    calling(&notes, vec![read("../../admin?x=1#y")]).await;
    let calls = notes.calls().await;
    assert_eq!(
        calls,
        [(
            "GET".to_string(),
            "/api/notes/..%2F..%2Fadmin%3Fx=1%23y".to_string()
        )]
    );
}

#[tokio::test]
async fn a_notes_title_used_as_its_slug_is_answered_with_the_slug() {
    let serving = "Serving small models locally";
    let notes = FakeNoteworx::start(vec![
        note("local-llm-serving", serving, &[], "text"),
        note("twin-a", "Twins", &[], "a"),
        note("twin-b", "Twins", &[], "b"),
    ])
    .await;
    let asked = ["serving small models LOCALLY", "Twins", "Nothing titled so"];
    let scene = calling(&notes, asked.map(read).to_vec()).await;

    let lines = scene.tool_lines("t");
    assert_eq!(
        lines[0].result,
        "No note with slug \"serving small models LOCALLY\": that is the title of the note with slug \"local-llm-serving\". Use that slug."
    );
    // Two notes of that title, or none: the 404's own words.
    let not_found = ". Search or list notes first and use a slug from the results.";
    for line in &lines[1..] {
        assert!(line.result.ends_with(not_found), "{}", line.result);
    }
}
