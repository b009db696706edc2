//! Numbers, sizes and time from outside (docs/untrusted-input.md): absurd
//! numbers in task files, configs and server answers, replies and listings past
//! their caps, replies and pages built to overflow a parser, and servers that
//! never answer — each bounded, none a crash or a hang.

use agent_harness::agent::StopReason;
use agent_harness::records::Status;
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::*;

// -- 2. Numbers ----------------------------------------------------------------

#[test]
fn an_absurd_number_in_a_task_file_is_an_invalid_task_not_a_crash() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .task(
            "a-absurd",
            "+++\nmax_wall_secs = 9223372036854775807\n+++\nGo.",
        )
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
        .replies(vec![final_answer("fine")])
        .task(
            "a-absurd",
            "+++\nmax_wall_secs = 9223372036854775807\n+++\nGo.",
        )
        .task("b-fine", "Say hi.")
        .build()
        .await;

    let out = s.binary(&["run"]);

    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
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
    let scene = scenario()
        .script(vec![
            ResponseTemplate::new(503).insert_header("Retry-After", "18446744073709551615"),
            ok(final_answer("the next task is fine")),
        ])
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
    assert!(
        s.error
            .as_deref()
            .unwrap()
            .contains("after the task's wall clock"),
        "{s:?}"
    );
    assert_eq!(scene.inbox(), ["a-told-to-wait.md"]);
    assert_eq!(scene.done(), [format!("{RUN_ID}-b-fine.md")]);
    assert_eq!(
        scene.requests().await.len(),
        2,
        "no retry was waited for: one call per task"
    );
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

#[tokio::test]
async fn a_reply_over_32_mib_is_not_read_on_and_fails_the_task_for_good() {
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

    assert_eq!(outcome.exit_code(), 1);
    let s = scene.summary("t");
    assert_eq!(
        (s.stop_reason, s.retryable),
        (StopReason::EndpointError, false)
    );
    assert!(s.error.unwrap().contains("over 32 MiB"));
    assert_eq!(
        scene.requests().await.len(),
        1,
        "not retried: the server would send it again"
    );
    let lines = scene.conversation("t");
    assert_eq!(lines.len(), 1);
    let kept = lines[0].response.as_str().unwrap();
    assert_eq!(kept.len(), 64 * 1024, "the record keeps the first 64 KiB");
    let size = std::fs::metadata(scene.run_dir("t").join("conversation.jsonl"))
        .unwrap()
        .len();
    assert!(size < 200 * 1024, "{size} bytes of records");
    assert_eq!(scene.failed(), [format!("{RUN_ID}-t.md")]);
}

/// A notes listing whose note text is `per_note` bytes each.
async fn flooded_notes(count: usize, per_note: usize) -> FakeNoteworx {
    let text = "n".repeat(per_note);
    let notes = (0..count)
        .map(|i| note(&format!("note-{i}"), &format!("Note {i}"), &["big"], &text))
        .collect();
    FakeNoteworx::start(notes).await
}

#[tokio::test]
async fn a_listing_drops_note_text_while_parsing_and_one_over_32_mib_is_a_tool_error() {
    // 30 MiB of note text: read, the text never kept.
    let notes = flooded_notes(30, 1024 * 1024).await;
    let s = scenario()
        .replies(vec![
            tool_calls(&[("c1", "noteworx_list_notes", json!({"limit": 500}))]),
            final_answer("done"),
        ])
        .task("t", "Work with my notes.")
        .config(&notes.config_section_waiting(60))
        .build()
        .await;
    s.run().await;
    let lines = s.tool_lines("t");
    assert!(!lines[0].is_error, "{}", lines[0].result);
    assert!(
        lines[0].result.starts_with("30 notes:"),
        "{}",
        lines[0].result
    );
    assert!(
        !lines[0].result.contains("nnnn"),
        "no note text in a listing"
    );
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

    // 40 MiB: not read past 32 MiB.
    let notes = flooded_notes(40, 1024 * 1024).await;
    let s = scenario()
        .replies(vec![
            tool_calls(&[("c1", "noteworx_list_notes", json!({"limit": 100}))]),
            final_answer("done"),
        ])
        .task("t", "Work with my notes.")
        .config(&notes.config_section_waiting(60))
        .build()
        .await;
    s.run().await;
    let lines = s.tool_lines("t");
    assert!(lines[0].is_error);
    assert_contains(&lines[0].result, "over 32 MiB");
}

// -- 4. Time -------------------------------------------------------------------

#[tokio::test]
async fn replies_built_to_overflow_the_stack_or_loop_are_read_as_plain_text() {
    let deep = format!("<|tool_call>call:webfetch{{url:{}", "[".repeat(300_000));
    let openers = "<|tool_call>".repeat(200_000);
    for (name, content) in [("deep", &deep), ("openers", &openers)] {
        let scene = scenario()
            .replies(vec![json!({
                "choices": [{"finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
            })])
            .task(name, "Answer.")
            .build()
            .await;

        let outcome = scene.run().await;

        let s = scene.summary(name);
        assert_eq!(s.tool_calls, 0, "{name}: nothing was recovered as a call");
        if name == "deep" {
            assert_eq!(outcome.exit_code(), 0, "{name}");
            assert_eq!(s.stop_reason, StopReason::FinalAnswer, "{name}");
            // Its one control string is defanged: a word joiner after `<`.
            assert_eq!(
                s.final_answer.as_deref().map(str::len),
                Some(content.len() + '\u{2060}'.len_utf8())
            );
        } else {
            // Nothing but control strings: debris, no answer (docs/tasks.md,
            // "The loop").
            assert_eq!(s.stop_reason, StopReason::EmptyResponse, "{name}");
        }
    }
}

#[tokio::test]
async fn a_page_nested_too_deep_to_lay_out_comes_back_as_its_text() {
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
    let s = scenario()
        .replies(vec![
            tool_calls(&[(
                "c1",
                "webfetch",
                json!({"url": format!("{}/deep", page.uri())}),
            )]),
            final_answer("read it"),
        ])
        .task("t", "Read the page.")
        .config("[tools.webfetch]\nallow_private = true\nmax_bytes = 4000000")
        .build()
        .await;

    s.run().await;

    let lines = s.tool_lines("t");
    assert!(!lines[0].is_error, "{}", lines[0].result);
    assert!(
        lines[0].result.ends_with("the words"),
        "{}",
        lines[0].result
    );
    assert_eq!(s.summary("t").stop_reason, StopReason::FinalAnswer);
}
