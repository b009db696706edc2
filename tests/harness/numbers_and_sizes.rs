//! Numbers, sizes and time from outside (docs/untrusted-input.md): absurd
//! numbers in task files, configs and server answers, replies and listings past
//! their caps, replies and pages built to overflow a parser, and servers that
//! never answer — each bounded, none a crash or a hang.

use agent_harness::agent::StopReason;
use agent_harness::drain::RunOutcome;
use agent_harness::records::Status;
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::*;

// -- 2. Numbers ----------------------------------------------------------------

/// A task file whose `max_wall_secs` is `i64::MAX`.
const ABSURD: &str = "+++\nmax_wall_secs = 9223372036854775807\n+++\nGo.";

#[test]
fn an_absurd_number_in_a_task_file_is_an_invalid_task_not_a_crash() {
    let s = offline()
        .task("a-absurd", ABSURD)
        .task("b-nan", "+++\ntemperature = nan\n+++\nGo.")
        .build_blocking();

    let out = s.binary(&["check"]);

    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_contains(
        &text,
        "a-absurd.md:2: frontmatter: max_wall_secs = 9223372036854775807 is above its ceiling, 86400",
    );
    assert_contains(
        &text,
        "b-nan.md:2: frontmatter: temperature = NaN is not a finite number",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_absurd_task_file_is_filed_and_the_rest_of_the_inbox_runs() {
    let s = scenario()
        .answers(&["fine"])
        .task("a-absurd", ABSURD)
        .task("b-fine", "Say hi.")
        .build()
        .await;

    let out = s.binary(&["run"]);

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let failed = s.failed();
    let done = s.done();
    assert!(
        failed.len() == 1 && failed[0].ends_with("-a-absurd.md"),
        "{failed:?}"
    );
    assert!(
        done.len() == 1 && done[0].ends_with("-b-fine.md"),
        "{done:?}"
    );
    assert_eq!(s.requests().await.len(), 1);
}

#[test]
fn a_config_number_past_its_ceiling_exits_2_naming_the_key() {
    let s = offline()
        .config("[limits]\nmax_wall_secs = 9223372036854775807")
        .task("t", "Go.")
        .build_blocking();
    for cmd in ["run", "check"] {
        let out = s.binary(&[cmd]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_contains(
            &err,
            "[limits] max_wall_secs = 9223372036854775807 is above its ceiling, 86400",
        );
    }
    assert_eq!(s.inbox(), ["t.md"]);
}

#[tokio::test]
async fn a_retry_after_of_two_to_the_64_ends_the_task_at_once_retryable() {
    let wait_2_64 = ResponseTemplate::new(503).insert_header("Retry-After", "18446744073709551615");
    let scene = scenario()
        .script(vec![wait_2_64, ok(final_answer("the next task is fine"))])
        .task("a-told-to-wait", "First.")
        .task("b-fine", "Second.")
        .build()
        .await;

    let outcome = scene.run().await;

    assert_eq!(outcome.exit_code(), 75);
    let s = scene.summary("a-told-to-wait");
    assert_eq!(
        (s.stop_reason, s.retryable, s.status),
        (StopReason::EndpointError, true, Status::Failed)
    );
    assert_contains(s.error.as_deref().unwrap(), "after the task's wall clock");
    assert_eq!(scene.inbox(), ["a-told-to-wait.md"]);
    assert_eq!(scene.done(), [format!("{RUN_ID}-b-fine.md")]);
    // No retry was waited for: one call per task.
    assert_eq!(scene.requests().await.len(), 2);
}

#[tokio::test]
async fn a_usage_count_near_two_to_the_64_stops_the_task_as_max_total_tokens() {
    let mut huge = tool_calls(&[("c1", "noteworx_list_notes", json!({}))]);
    huge["usage"] =
        json!({"prompt_tokens": u64::MAX - 5, "completion_tokens": 100, "total_tokens": u64::MAX});
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "x")]).await;
    let scene = scenario()
        .replies(vec![huge, final_answer("never asked")])
        .task("t", "Count.")
        .notes(&notes)
        .ran()
        .await;

    let s = scene.summary("t");
    assert_eq!(s.stop_reason, StopReason::MaxTotalTokens);
    assert_eq!(s.total_tokens, u64::MAX, "saturated, not wrapped");
    assert_eq!(scene.requests().await.len(), 1);
    assert!(
        notes.calls().await.is_empty(),
        "the reply's calls were not run"
    );
}
// -- 3. Sizes ------------------------------------------------------------------

/// Task `t` run against a model whose reply is 40 MiB of JSON.
async fn flooded_by_a_reply() -> (Scene, RunOutcome) {
    let body = format!(
        "{{\"choices\":[{{\"message\":{{\"content\":\"{}\"}}}}]}}",
        "a".repeat(40 * 1024 * 1024)
    );
    let scene = scenario()
        .script(vec![
            ResponseTemplate::new(200).set_body_raw(body.into_bytes(), "application/json"),
        ])
        .task("t", "Flood me.")
        .build()
        .await;
    let outcome = scene.run().await;
    (scene, outcome)
}

#[tokio::test]
async fn a_reply_over_32_mib_is_not_read_on_and_fails_the_task_for_good() {
    let (scene, outcome) = flooded_by_a_reply().await;

    assert_eq!(outcome.exit_code(), 1);
    let s = scene.summary("t");
    assert_eq!(
        (s.stop_reason, s.retryable),
        (StopReason::EndpointError, false)
    );
    assert_contains(s.error.unwrap(), "over 32 MiB");
    // Not retried: the server would send it again.
    assert_eq!(scene.requests().await.len(), 1);
    assert_eq!(scene.failed(), [format!("{RUN_ID}-t.md")]);
}

#[tokio::test]
async fn a_reply_over_32_mib_is_recorded_by_its_first_64_kib() {
    let (scene, _) = flooded_by_a_reply().await;

    let lines = scene.conversation("t");
    assert_eq!(lines.len(), 1);
    let kept = lines[0].response.as_str().unwrap();
    assert_eq!(kept.len(), 64 * 1024, "the record keeps the first 64 KiB");
    let size = std::fs::metadata(scene.run_dir("t").join("conversation.jsonl"))
        .unwrap()
        .len();
    assert!(size < 200 * 1024, "{size} bytes of records");
}

/// A notes listing whose note text is `per_note` bytes each.
async fn flooded_notes(count: usize, per_note: usize) -> FakeNoteworx {
    let text = "n".repeat(per_note);
    let notes = (0..count)
        .map(|i| note(&format!("note-{i}"), &format!("Note {i}"), &["big"], &text))
        .collect();
    FakeNoteworx::start(notes).await
}

/// Task `t` run: the model lists the notes, asking for `limit` of them,
/// then answers.
async fn listed(notes: &FakeNoteworx, limit: u32) -> Scene {
    scenario()
        .calls(
            vec![("noteworx_list_notes", json!({"limit": limit}))],
            "done",
        )
        .task("t", "Work with my notes.")
        .config(&notes.config_section_waiting(60))
        .ran()
        .await
}

#[tokio::test]
async fn a_listing_drops_note_text_while_parsing() {
    // 30 MiB of note text: read, the text never kept.
    let notes = flooded_notes(30, 1024 * 1024).await;

    let s = listed(&notes, 500).await;

    let lines = s.tool_lines("t");
    let result = &lines[0].result;
    assert!(!lines[0].is_error, "{result}");
    assert!(result.starts_with("30 notes:"), "{result}");
    assert!(!result.contains("nnnn"), "no note text in a listing");
    let asked = notes.calls().await;
    assert_eq!(
        asked,
        [("GET".to_string(), "/api/notes?limit=100".to_string())],
        "the model's limit of 500 was capped at 100"
    );
    assert_eq!(
        s.summary("t").status,
        Status::Succeeded,
        "{:?}",
        s.requests().await.len()
    );
}

#[tokio::test]
async fn a_listing_over_32_mib_is_a_tool_error() {
    // 40 MiB: not read past 32 MiB.
    let notes = flooded_notes(40, 1024 * 1024).await;

    let s = listed(&notes, 100).await;

    let lines = s.tool_lines("t");
    assert!(lines[0].is_error);
    assert_contains(&lines[0].result, "over 32 MiB");
}

// -- 4. Time -------------------------------------------------------------------

/// Task `name` run against a model whose one reply's content is `content`.
async fn answered_with(name: &str, content: &str) -> (Scene, RunOutcome) {
    let scene = scenario()
        .replies(vec![json!({
            "choices": [{"finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
        })])
        .task(name, "Answer.")
        .build()
        .await;
    let outcome = scene.run().await;
    (scene, outcome)
}

/// A tool call whose arguments open 300,000 arrays: deep enough to
/// overflow the stack of a parser that recurses.
fn nested_too_deep() -> String {
    format!("<|tool_call>call:webfetch{{url:{}", "[".repeat(300_000))
}

#[tokio::test]
async fn a_reply_built_to_overflow_the_stack_is_read_as_plain_text() {
    let deep = nested_too_deep();

    let (scene, outcome) = answered_with("deep", &deep).await;

    let s = scene.summary("deep");
    assert_eq!(s.tool_calls, 0, "nothing was recovered as a call");
    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(s.stop_reason, StopReason::FinalAnswer);
    // Its one control string is defanged: a word joiner after `<`.
    assert_eq!(
        s.final_answer.as_deref().map(str::len),
        Some(deep.len() + '\u{2060}'.len_utf8())
    );
}

#[tokio::test]
async fn a_reply_built_to_loop_is_read_as_plain_text() {
    let openers = "<|tool_call>".repeat(200_000);

    let (scene, _) = answered_with("openers", &openers).await;

    let s = scene.summary("openers");
    assert_eq!(s.tool_calls, 0, "nothing was recovered as a call");
    // Nothing but control strings: debris, no answer (docs/tasks.md,
    // "The loop").
    assert_eq!(s.stop_reason, StopReason::EmptyResponse);
}

/// A server whose every page nests 150,000 lists around "the words":
/// too deep to lay out.
async fn pages_nested_too_deep() -> MockServer {
    let page = MockServer::start().await;
    let html = format!(
        "<html><body>{}the words{}</body></html>",
        "<ul><li>".repeat(150_000),
        "</li></ul>".repeat(150_000)
    );
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(html.into_bytes(), "text/html; charset=utf-8"),
        )
        .mount(&page)
        .await;
    page
}

#[tokio::test]
async fn a_page_nested_too_deep_to_lay_out_comes_back_as_its_text() {
    let page = pages_nested_too_deep().await;
    let url = format!("{}/deep", page.uri());

    let s = scenario()
        .calls(vec![("webfetch", json!({"url": url}))], "read it")
        .task("t", "Read the page.")
        .config("[tools.webfetch]\nallow_private = true\nmax_bytes = 4000000")
        .ran()
        .await;

    let lines = s.tool_lines("t");
    let result = &lines[0].result;
    assert!(!lines[0].is_error, "{result}");
    assert!(result.ends_with("the words"), "{result}");
    assert_eq!(s.summary("t").stop_reason, StopReason::FinalAnswer);
}
