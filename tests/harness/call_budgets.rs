//! Budgets (docs/untrusted-input.md): calls per reply, writes per task,
//! argument bytes replayed, and the budgets a task's frontmatter sets, held
//! across turns.

use agent_harness::agent::StopReason;
use agent_harness::records::Status;
use serde_json::{Value, json};

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::*;

// -- 6. Budgets --------------------------------------------------------------------

#[tokio::test]
async fn a_reply_asking_for_30_attachments_runs_8_calls_and_writes_5() {
    let notes = FakeNoteworx::start(
        (0..30)
            .map(|i| note(&format!("n{i}"), &format!("Note {i}"), &[], "text"))
            .collect(),
    )
    .await;
    let calls: Vec<(String, Value)> = (0..30)
        .map(|i| {
            (
                format!("c{i}"),
                json!({"slug": format!("n{i}"), "filename": "spam.md", "content": "Buy now."}),
            )
        })
        .collect();
    let spam: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, args)| (id.as_str(), "noteworx_create_attachment", args.clone()))
        .collect();
    let scene = scenario()
        .replies(vec![tool_calls(&spam), final_answer("done")])
        .task("t", "Summarise my notes.")
        .notes(&notes)
        .ran()
        .await;

    let written: usize = (0..30)
        .map(|i| notes.attachments(&format!("n{i}")).len())
        .sum();
    assert_eq!(written, 5, "max_writes = 5");
    let posts = notes
        .calls()
        .await
        .into_iter()
        .filter(|(m, _)| m == "POST")
        .count();
    assert_eq!(posts, 5);
    let lines = scene.tool_lines("t");
    assert_eq!(lines.len(), 30, "every call is answered");
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l.call_id, format!("c{i}"), "in call order");
        match i {
            0..5 => assert!(l.executed && !l.is_error, "{i}: {}", l.result),
            5..8 => {
                assert!(!l.executed && l.is_error);
                assert!(
                    l.result
                        .starts_with("not run: this task's write budget (5) is spent"),
                    "{i}: {}",
                    l.result
                );
            }
            _ => {
                assert!(!l.executed && l.is_error);
                assert!(
                    l.result
                        .starts_with("not run: at most 8 tool calls per reply"),
                    "{i}: {}",
                    l.result
                );
            }
        }
    }
    let s = scene.summary("t");
    assert_eq!((s.tool_calls, s.calls_over_budget), (30, 25));
    let second = &scene.requests().await[1];
    let answered: Vec<String> = messages(second)
        .into_iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id)
        .collect();
    assert_eq!(answered.len(), 30);
}

#[tokio::test]
async fn a_reply_of_5000_calls_reads_256_and_counts_every_other_over_budget() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "text")]).await;
    let ids: Vec<String> = (0..5000).map(|i| format!("c{i}")).collect();
    let calls: Vec<(&str, &str, Value)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            (
                id.as_str(),
                "noteworx_read_note",
                json!({"slug": "n", "offset": i}),
            )
        })
        .collect();
    let scene = scenario()
        .replies(vec![tool_calls(&calls), final_answer("done")])
        .task("t", "Read.")
        // Unmanaged context: 256 answered calls would not fit 8K, and the point here is the counting.
        .config("[limits]\ncontext_tokens = 0")
        .notes(&notes)
        .build()
        .await;

    scene.run().await;

    let s = scene.summary("t");
    assert_eq!(
        (s.status, s.stop_reason),
        (Status::Succeeded, StopReason::FinalAnswer)
    );
    assert_eq!(s.tool_calls, 256, "one answer per call read");
    assert_eq!(s.calls_over_budget, 5000 - 8, "past the 8 a reply may run");
    let second = &scene.requests().await[1];
    let replayed = messages(second)
        .iter()
        .find(|m| m.role == Role::Assistant)
        .map(|m| m.tool_calls.len());
    assert_eq!(replayed, Some(256));
    let log = std::fs::read_to_string(scene.run_dir("t").join("run.log")).unwrap();
    assert_contains(
        &log,
        "4744 more calls past the 256 a reply may hold were not read",
    );
}

#[tokio::test]
async fn calls_with_huge_arguments_are_replayed_within_64_kib_a_reply() {
    // 30 calls of ~500 KB arguments a reply (15 MB, under the 32 MiB cap),
    // every turn: replayed whole, each later request would grow by 15 MB.
    let ids: Vec<String> = (0..30).map(|i| format!("c{i}")).collect();
    let calls: Vec<(&str, &str, Value)> = ids
        .iter()
        .map(|id| {
            let url = format!("https://example.invalid/{id}/{}", "a".repeat(500_000));
            (id.as_str(), "webfetch", json!({ "url": url }))
        })
        .collect();
    let reply = tool_calls(&calls);
    let s = scenario()
        .replies(vec![
            reply.clone(),
            reply.clone(),
            reply,
            final_answer("done"),
        ])
        .task("t", "Fetch.")
        .config("[limits]\ncontext_tokens = 0\nmax_turns = 8")
        .config("[tools.webfetch]\nallow_hosts = [\"example.invalid\"]")
        .build()
        .await;

    s.run().await;

    let requests = s.requests().await;
    assert_eq!(requests.len(), 4);
    for (turn, request) in requests.iter().enumerate() {
        let size = request.to_string().len();
        assert!(
            size < 150_000 * (turn + 1),
            "request {}: {size} bytes",
            turn + 1
        );
        let sent = request["messages"].as_array().unwrap();
        for (m, raw) in messages(request)
            .iter()
            .zip(sent)
            .filter(|(m, _)| m.role == Role::Assistant)
        {
            let calls = &m.tool_calls;
            // On the wire each call's arguments are a JSON string.
            let raw_calls = raw["tool_calls"].as_array().unwrap();
            assert!(
                raw_calls
                    .iter()
                    .all(|c| c["function"]["arguments"].is_string())
            );
            assert_eq!(
                calls.len(),
                30,
                "every call is replayed, to pair with its result"
            );
            let replayed: usize = calls.iter().map(|c| c.function.arguments.len()).sum();
            assert!(replayed <= 64 * 1024, "{replayed}");
            let first: Value = serde_json::from_str(&calls[0].function.arguments).unwrap();
            assert!(
                first["url"].as_str().unwrap().ends_with(&format!(
                    "[… {} more characters not repeated here]",
                    "https://example.invalid/c0/".len() + 500_000 - 1000
                )),
                "the long string is shortened, the call kept"
            );
        }
    }
    assert_eq!(s.summary("t").final_answer.as_deref(), Some("done"));
    // The records hold every argument once, in the response that carried it.
    let records = std::fs::metadata(s.run_dir("t").join("conversation.jsonl")).unwrap();
    assert!(records.len() < 3 * 16_000_000, "{} bytes", records.len());
}

#[tokio::test]
async fn a_reply_padded_with_a_million_numbers_is_read_and_recorded_verbatim() {
    let mut reply = final_answer("the answer");
    reply["pad"] = Value::Array(vec![json!(1); 1_000_000]);
    reply["usage"] =
        json!({"prompt_tokens": 10, "completion_tokens": [1, 2], "total_tokens": {"x": 1}});
    let scene = scenario()
        .replies(vec![reply.clone()])
        .task("t", "Answer.")
        .ran()
        .await;

    let s = scene.summary("t");
    assert_eq!(
        (s.status, s.final_answer.as_deref()),
        (Status::Succeeded, Some("the answer"))
    );
    assert_eq!(
        s.total_tokens, 10,
        "counts of the wrong kind read as absent"
    );
    let line = &scene.conversation("t")[0];
    assert_eq!(line.response, reply, "the body as it came");
}

#[tokio::test]
async fn budgets_set_in_frontmatter_hold_across_turns() {
    let notes = FakeNoteworx::start(
        (0..4)
            .map(|i| note(&format!("n{i}"), &format!("Note {i}"), &[], "text"))
            .collect(),
    )
    .await;
    let attach = |i: usize| {
        (
            format!("c{i}"),
            json!({"slug": format!("n{i}"), "filename": "s.md", "content": format!("Idea {i}.")}),
        )
    };
    let turn = |ids: &[usize]| {
        let calls: Vec<(String, Value)> = ids.iter().map(|&i| attach(i)).collect();
        let calls: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|(id, a)| (id.as_str(), "noteworx_create_attachment", a.clone()))
            .collect();
        tool_calls(&calls)
    };
    let s = scenario()
        .replies(vec![turn(&[0, 1, 2]), turn(&[3]), final_answer("done")])
        .task(
            "t",
            "+++\nmax_calls_per_turn = 2\nmax_writes = 2\n+++\nAttach ideas.",
        )
        .notes(&notes)
        .build()
        .await;

    s.run().await;

    let ran: Vec<bool> = s.tool_lines("t").iter().map(|l| l.executed).collect();
    assert_eq!(
        ran,
        [true, true, false, false],
        "2 per reply, 2 in the task"
    );
    let lines = s.tool_lines("t");
    assert!(
        lines[2]
            .result
            .starts_with("not run: at most 2 tool calls per reply")
    );
    assert!(
        lines[3]
            .result
            .starts_with("not run: this task's write budget (2) is spent")
    );
    assert_eq!(s.summary("t").calls_over_budget, 2);
}
