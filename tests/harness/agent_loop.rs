//! The loop (docs/tasks.md, "The loop") end to end: what the endpoint receives,
//! what the records say, where the task file goes.

use agent_harness::agent::StopReason;
use agent_harness::drain::RunOutcome;
use agent_harness::records::Status;
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::*;

const SAMPLING: &str = "[model]\ntemperature = 0.7\ntop_p = 0.9\ntop_k = 40\nmax_tokens = 512\n\
                        [model.chat_template_kwargs]\nenable_thinking = true\n[model.extra]\nmin_p = 0.05\nseed = 42\n";

#[tokio::test]
async fn a_list_read_final_task_produces_the_spec_records_and_moves() {
    let notes = FakeNoteworx::start(vec![
        note(
            "eval-methods",
            "Evaluation methods",
            &["research"],
            "Use held-out sets.",
        ),
        note("other", "Other", &["misc"], "Nothing here."),
    ])
    .await;
    let scene = scenario()
        .replies(vec![
            tool_calls(&[("call_1", "noteworx_list_notes", json!({"tag": "research"}))]),
            tool_calls(&[(
                "call_2",
                "noteworx_read_note",
                json!({"slug": "eval-methods"}),
            )]),
            final_answer("Evaluation uses held-out sets."),
        ])
        .task("weekly-scan", "# Scan\nSummarise my research notes.\n")
        .config(&format!("{SAMPLING}[tools.webfetch]\nenabled = false"))
        .notes(&notes)
        .build()
        .await;

    let outcome = scene.run().await;

    assert_eq!(
        outcome,
        RunOutcome::Finished(agent_harness::drain::Tally {
            succeeded: 1,
            ..Default::default()
        })
    );
    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(scene.inbox(), Vec::<String>::new());
    assert_eq!(scene.done(), [format!("{RUN_ID}-weekly-scan.md")]);
    assert_eq!(
        std::fs::read_to_string(
            scene
                .root()
                .join("tasks/done")
                .join(format!("{RUN_ID}-weekly-scan.md"))
        )
        .unwrap(),
        "# Scan\nSummarise my research notes.\n"
    );

    // What the endpoint received.
    let requests = scene.requests().await;
    assert_eq!(requests.len(), 3);
    let first = &requests[0];
    let asked = sent(first);
    assert_eq!(
        (asked.temperature, asked.top_p, asked.top_k, asked.min_p),
        (Some(0.7), Some(0.9), Some(40), Some(0.05))
    );
    assert_eq!((asked.max_tokens, asked.seed), (Some(512), Some(42)));
    assert_eq!(
        asked.chat_template_kwargs,
        Some(json!({"enable_thinking": true}))
    );
    assert_eq!(
        asked.tool_names(),
        [
            "noteworx_list_notes",
            "noteworx_search_notes",
            "noteworx_read_note",
            "noteworx_list_attachments",
            "noteworx_read_attachment",
            "noteworx_create_attachment"
        ]
    );
    assert_eq!(messages(first)[0].role, Role::System);
    assert_eq!(
        first["messages"][1],
        json!({"role": "user", "content": "# Scan\nSummarise my research notes.\n"})
    );
    let third = messages(&requests[2]);
    assert_eq!(third.len(), 6);
    assert_eq!(third[2].tool_calls[0].id, "call_1");
    assert_eq!(third[3].role, Role::Tool);
    assert_eq!(third[3].tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(
        third[3].content,
        "1 note:\n- eval-methods | Evaluation methods | tags: research | space: work | updated: 2026-04-01T10:00:00Z\n"
    );
    assert_eq!(third[5].tool_call_id.as_deref(), Some("call_2"));
    assert_eq!(
        third[5].content,
        "Note eval-methods | Evaluation methods | tags: research\n\nUse held-out sets."
    );
    assert!(
        !third[3].content.as_str().contains("held-out"),
        "listings never carry note content"
    );

    // The fake noteworx got exactly these calls.
    assert_eq!(
        notes.calls().await,
        [
            (
                "GET".to_string(),
                "/api/notes?tag=research&limit=20".to_string()
            ),
            ("GET".into(), "/api/notes/eval-methods".into())
        ]
    );

    // The records.
    let s = scene.summary("weekly-scan");
    assert_eq!(s.task, "weekly-scan");
    assert_eq!(s.run_id, RUN_ID);
    assert_eq!(
        (s.status, s.stop_reason, s.retryable, s.attempt),
        (Status::Succeeded, StopReason::FinalAnswer, false, 1)
    );
    assert_eq!((s.turns, s.tool_calls, s.tool_errors), (3, 2, 0));
    assert_eq!(
        (s.prompt_tokens, s.completion_tokens, s.total_tokens),
        (350, 50, 400)
    );
    assert_eq!((s.runpod_exec_ms, s.runpod_delay_ms), (None, None));
    assert_eq!(
        s.final_answer.as_deref(),
        Some("Evaluation uses held-out sets.")
    );
    assert_eq!(s.error, None);
    assert!(!s.dry_run);

    let conversation = scene.conversation("weekly-scan");
    assert_eq!(conversation.len(), 3);
    for (i, line) in conversation.iter().enumerate() {
        assert_eq!((line.turn, line.attempt), (i + 1, 1));
        assert_eq!(line.http_status, Some(200));
        assert_eq!(line.request, requests[i]);
        assert!(line.started_at <= line.finished_at, "{line:?}");
    }
    assert_eq!(
        conversation[2].response["choices"][0]["message"]["content"],
        "Evaluation uses held-out sets."
    );

    let tools = scene.tool_lines("weekly-scan");
    assert_eq!(tools.len(), 2);
    assert_eq!(
        (
            tools[0].turn,
            tools[0].call_id.as_str(),
            tools[0].name.as_str()
        ),
        (1, "call_1", "noteworx_list_notes")
    );
    assert_eq!(tools[0].arguments, r#"{"tag":"research"}"#);
    assert_eq!(tools[1].result, third[5].content.as_str());
    assert!(tools.iter().all(|t| !t.is_error
        && t.executed
        && t.repeat == 1
        && t.original_chars == t.returned_chars));

    let log = scene.run_log("weekly-scan");
    assert!(log.contains("turn 1: request"), "{log}");
    assert_contains(&log, "noteworx_read_note {\"slug\":\"eval-methods\"}");
    assert_contains(&log, "final answer:\n    Evaluation uses held-out sets.");
    assert!(log.contains("succeeded: final_answer"), "{log}");

    // The token never reaches a record, and every noteworx call carried it.
    assert!(!scene.all_records().contains(fake_noteworx::TOKEN));
    assert!(
        notes
            .authorization_headers()
            .await
            .iter()
            .all(|h| h == &format!("Bearer {}", fake_noteworx::TOKEN))
    );
}

use crate::common::fake_noteworx;

/// Task `t` whose model thinks (in `reasoning_content` and inline)
/// before it reads note `a`, then answers after a `<think>` block.
async fn thought_through() -> Scene {
    let notes = FakeNoteworx::start(vec![note("a", "A", &[], "text")]).await;
    let mut first = tool_calls(&[("c1", "noteworx_read_note", json!({"slug": "a"}))]);
    first["choices"][0]["message"]["reasoning_content"] = json!("I should read note a.");
    first["choices"][0]["message"]["content"] =
        json!("<|channel>thought\ninline plan<channel|>Reading it.");
    scenario()
        .replies(vec![first, final_answer("<think>hidden</think>All done.")])
        .task("t", "Read note a.")
        .notes(&notes)
        .ran()
        .await
}

#[tokio::test]
async fn thinking_is_never_replayed() {
    let scene = thought_through().await;

    let requests = scene.requests().await;
    let replayed = &messages(&requests[1])[2];
    assert_eq!(replayed.role, Role::Assistant);
    assert_eq!(replayed.content, "Reading it.");
    let raw = &requests[1]["messages"][2];
    assert!(raw.get("reasoning_content").is_none(), "{raw}");
    assert!(!requests[1].to_string().contains("inline plan"));
    assert!(!requests[1].to_string().contains("I should read note a."));
}

#[tokio::test]
async fn thinking_is_logged_and_kept_in_the_raw_responses() {
    let scene = thought_through().await;

    let s = scene.summary("t");
    assert_eq!(s.final_answer.as_deref(), Some("All done."));
    let log = scene.run_log("t");
    assert!(log.contains("I should read note a."), "{log}");
    assert!(log.contains("inline plan"), "{log}");
    let raw = &scene.conversation("t")[0].response["choices"][0]["message"];
    assert_eq!(
        raw["reasoning_content"], "I should read note a.",
        "raw responses keep the thinking"
    );
}

#[tokio::test]
async fn replay_thinking_keep_sends_reasoning_back_on_tool_call_turns() {
    let notes = FakeNoteworx::start(vec![note("a", "A", &[], "text")]).await;
    let mut first = tool_calls(&[("c1", "noteworx_read_note", json!({"slug": "a"}))]);
    first["choices"][0]["message"]["reasoning_content"] = json!("plan");
    let s = scenario()
        .replies(vec![first, final_answer("ok")])
        .task("t", "Read note a.")
        .config("[model]\nreplay_thinking = \"keep\"")
        .notes(&notes)
        .ran()
        .await;

    assert_eq!(
        messages(&s.requests().await[1])[2]
            .reasoning_content
            .as_deref(),
        Some("plan")
    );
}

#[tokio::test]
async fn parallel_calls_are_answered_in_call_order_with_their_ids() {
    let notes = FakeNoteworx::start(vec![
        note("a", "A", &[], "alpha"),
        note("b", "B", &[], "beta"),
    ])
    .await;
    let scene = scenario()
        .replies(vec![
            tool_calls(&[
                ("id_b", "noteworx_read_note", json!({"slug": "b"})),
                ("id_a", "noteworx_read_note", json!({"slug": "a"})),
                ("id_x", "noteworx_read_note", json!({"slug": "missing"})),
            ]),
            final_answer("done"),
        ])
        .task("t", "Read both.")
        .notes(&notes)
        .ran()
        .await;

    let msgs = messages(&scene.requests().await[1]);
    let tool_msgs: Vec<(&str, &str)> = msgs
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| (m.tool_call_id.as_deref().unwrap(), m.content.as_str()))
        .collect();
    assert_eq!(tool_msgs.len(), 3);
    assert_eq!(tool_msgs[0], ("id_b", "Note b | B\n\nbeta"));
    assert_eq!(tool_msgs[1], ("id_a", "Note a | A\n\nalpha"));
    let (id, told) = tool_msgs[2];
    assert_eq!(id, "id_x");
    assert!(told.starts_with("No note with slug \"missing\""), "{told}");
    let s = scene.summary("t");
    assert_eq!((s.tool_calls, s.tool_errors), (3, 1));
}

#[tokio::test]
async fn long_results_are_cut_with_a_note_on_how_to_read_on() {
    let long: String = (0..5000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let notes = FakeNoteworx::start(vec![note("long", "Long", &[], &long)]).await;
    let page_two = json!({"slug": "long", "offset": 1858});
    let read = ("noteworx_read_note", json!({"slug": "long"}));
    let s = notes_task(&notes)
        .calls(vec![read, ("noteworx_read_note", page_two)], "read")
        .config("[limits]\nmax_tool_result_chars = 2000")
        .ran()
        .await;

    let msgs = messages(&s.requests().await[2]);
    let first = msgs[3].content.as_str();
    let shown = first.chars().count();
    assert!(shown <= 2000, "{shown} chars");
    assert!(first.ends_with(r#"[cut: characters 0..1858 of 5000 shown, 3142 more. To read on, call noteworx_read_note with slug="long" and offset=1858]"#), "{first}");
    let second = msgs[5].content.as_str();
    assert!(
        second.contains(&long[1858..1916]),
        "the second page starts where the first ended"
    );
    assert_contains(second, "offset=3716");
    assert_eq!(s.tool_lines("t")[0].returned_chars, shown);
}

#[tokio::test]
async fn bad_calls_are_answered_as_tool_errors_and_the_loop_goes_on() {
    let notes = FakeNoteworx::start(vec![note("a", "A", &[], "text")]).await;
    let bad_json = json!({"choices": [{"finish_reason": "tool_calls", "message": {"content": "", "tool_calls": [
        {"id": "j", "type": "function", "function": {"name": "noteworx_read_note", "arguments": "{\"slug\": \"a\""}}
    ]}}]});
    let scene = scenario()
        .replies(vec![
            tool_calls(&[
                ("u", "read_file", json!({"path": "/etc/passwd"})),
                ("d", "webfetch", json!({"url": "http://example.com"})),
                (
                    "s",
                    "noteworx_read_note",
                    json!({"slgu": "a", "offset": "x"}),
                ),
            ]),
            bad_json,
            final_answer("gave up politely"),
        ])
        .task("t", "+++\ntools = [\"noteworx_read_note\"]\n+++\nRead a.")
        .notes(&notes)
        .build()
        .await;

    scene.run().await;

    let s = scene.summary("t");
    assert_eq!(
        (s.status, s.tool_calls, s.tool_errors),
        (Status::Succeeded, 4, 4)
    );
    let requests = scene.requests().await;
    assert_eq!(
        sent(&requests[0]).tools.len(),
        1,
        "the task narrowed the tools"
    );
    let lines = scene.tool_lines("t");
    assert_eq!(
        lines[0].result,
        "Unknown tool \"read_file\". The tools you can call are: noteworx_read_note."
    );
    assert!(
        lines[1]
            .result
            .starts_with("Tool webfetch is not available in this task"),
        "{}",
        lines[1].result
    );
    assert_eq!(
        lines[2].result,
        "Invalid arguments for noteworx_read_note: `offset` must be a non-negative integer, not \"x\"; unknown argument `slgu`; \
         missing required `slug`. Expected noteworx_read_note{slug: string (required), offset: integer}."
    );
    assert!(
        lines[3].result.starts_with("Arguments are not valid JSON"),
        "{}",
        lines[3].result
    );
    assert!(lines.iter().all(|l| l.is_error && !l.executed));
    assert!(
        notes.calls().await.is_empty(),
        "nothing invalid reached noteworx"
    );
    // The invalid arguments were replayed as `{}` so llama-server accepts the history.
    assert_eq!(sent_arguments(&requests[2], 6, 0), "{}");
}

#[tokio::test]
async fn max_turns_stops_a_model_that_never_answers() {
    let notes = FakeNoteworx::start(vec![note("a", "A", &[], "text")]).await;
    let replies = (0..10)
        .map(|i| tool_calls(&[(&format!("c{i}"), "noteworx_list_notes", json!({"limit": i}))]))
        .collect();
    let scene = scenario()
        .replies(replies)
        .task("t", "+++\nmax_turns = 3\n+++\nLoop forever.")
        .notes(&notes)
        .build()
        .await;

    let outcome = scene.run().await;

    assert_eq!(outcome.exit_code(), 1);
    let s = scene.summary("t");
    assert_eq!(
        (s.status, s.stop_reason, s.turns),
        (Status::Failed, StopReason::MaxTurns, 3)
    );
    assert_eq!(scene.requests().await.len(), 3);
    assert_eq!(
        s.tool_calls, 2,
        "the calls of the reply that reached max_turns are not executed"
    );
    assert!(
        s.error.as_deref().unwrap().contains("not executed"),
        "{:?}",
        s.error
    );
    assert_eq!(scene.failed(), [format!("{RUN_ID}-t.md")]);
}

#[tokio::test]
async fn max_total_tokens_sends_no_request_after_the_budget_is_spent() {
    let notes = FakeNoteworx::start(vec![note("a", "A", &[], "text")]).await;
    let replies = (0..10)
        .map(|i| tool_calls(&[(&format!("c{i}"), "noteworx_list_notes", json!({"limit": i}))]))
        .collect();
    let scene = scenario()
        .replies(replies)
        .task("t", "+++\nmax_total_tokens = 250\n+++\nSpend tokens.")
        .notes(&notes)
        .ran()
        .await;

    let s = scene.summary("t");
    assert_eq!(
        (s.stop_reason, s.total_tokens),
        (StopReason::MaxTotalTokens, 360)
    );
    assert_eq!(
        scene.requests().await.len(),
        3,
        "120 + 120 < 250, the third reply reaches it, no fourth request"
    );
    assert_eq!(s.tool_calls, 2);
}

#[tokio::test]
async fn max_wall_secs_cuts_a_call_in_flight() {
    let scene = scenario()
        .script(vec![
            ok(final_answer("late")).set_delay(std::time::Duration::from_secs(30)),
        ])
        .task("t", "+++\nmax_wall_secs = 1\n+++\nBe slow.")
        .build()
        .await;

    let outcome = scene.run().await;

    // Cut, not waited for: the one attempt ended on the wall clock (1 s)
    // with no reply, long before the reply would have come (after 30 s).
    let lines = scene.conversation("t");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(
        lines[0].error_kind.as_deref(),
        Some("wall_clock"),
        "{:?}",
        lines[0]
    );
    assert!(lines[0].response.is_null(), "{:?}", lines[0]);
    let took = lines[0].latency_ms;
    assert!(took < 15_000, "cut at {took} ms, not at the 1 s wall clock");
    let s = scene.summary("t");
    assert_eq!(
        (s.status, s.stop_reason, s.retryable),
        (Status::Failed, StopReason::MaxWallSecs, false)
    );
    assert_eq!(outcome.exit_code(), 1);
    let line = &scene.conversation("t")[0];
    assert_eq!(line.error.as_deref(), Some("the task's wall clock ran out"));
}

#[tokio::test]
async fn a_request_never_sends_null_fields_or_ends_on_an_assistant_tool_call() {
    let notes = FakeNoteworx::start(vec![note("a", "A", &[], "text")]).await;
    let s = scenario()
        .replies(vec![
            tool_calls(&[("c1", "noteworx_read_note", json!({"slug": "a"}))]),
            final_answer("ok"),
        ])
        .task("t", "Read a.")
        .notes(&notes)
        .build()
        .await;

    s.run().await;

    for body in s.requests().await {
        fn has_null(v: &Value) -> bool {
            match v {
                Value::Null => true,
                Value::Array(a) => a.iter().any(has_null),
                Value::Object(o) => o.values().any(has_null),
                _ => false,
            }
        }
        assert!(!has_null(&body), "{body}");
        let all = messages(&body);
        let last = all.last().unwrap();
        assert!(last.role != Role::Assistant, "{last:?}");
        assert_eq!(sent(&body).stream, Some(false));
    }
}

#[tokio::test]
async fn a_server_error_is_retried_with_a_new_seed() {
    let error = ResponseTemplate::new(500).set_body_json(
        json!({"error": {"code": 500, "type": "server_error", "message": "The model produced output that does not match the expected peg-gemma4 format"}}),
    );
    let s = scenario()
        .script(vec![error, ok(final_answer("fine"))])
        .task("t", "Hi.")
        .config("[model.extra]\nseed = 7")
        .ran()
        .await;

    let requests = s.requests().await;
    assert_eq!(requests.len(), 2);
    assert_eq!(sent(&requests[0]).seed, Some(7));
    let retried = sent(&requests[1]).seed;
    assert!(
        matches!(retried, Some(s) if s != 7),
        "the retry changes the seed: {retried:?}"
    );
    let lines = s.conversation("t");
    assert_eq!((lines[0].attempt, lines[1].attempt), (1, 2));
    assert_eq!(lines[0].http_status, Some(500));
    assert_eq!(s.summary("t").status, Status::Succeeded);
}
