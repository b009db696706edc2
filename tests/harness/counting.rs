//! Exact prompt counting and the elision rules (docs/tasks.md, "The loop"),
//! against a llama-server stand-in whose `/apply-template` and `/tokenize`
//! agree with the `usage` it reports and the window it enforces.

use agent_harness::records::Status;
use serde_json::{Value, json};

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::*;

const WINDOW: u64 = 2500;
const MAX_TOKENS: u64 = 256;

fn reads(slugs: &[&str]) -> Vec<Value> {
    let mut replies: Vec<Value> = slugs
        .iter()
        .enumerate()
        .map(|(i, slug)| {
            tool_calls(&[(
                &format!("c{i}"),
                "noteworx_read_note",
                json!({"slug": slug}),
            )])
        })
        .collect();
    replies.push(final_answer("Read them."));
    replies
}

async fn four_long_notes() -> FakeNoteworx {
    FakeNoteworx::start(
        (1..=4)
            .map(|i| {
                note(
                    &format!("n{i}"),
                    &format!("Note {i}"),
                    &[],
                    &format!("Note {i}: {}", "findings on evaluation ".repeat(100)),
                )
            })
            .collect(),
    )
    .await
}

/// Runs the four-read task against `llm`; returns the scene.
async fn read_four(llm: FakeLlm, notes: &FakeNoteworx) -> Scene {
    let scene = scenario()
        .llm(llm)
        .task(
            "read",
            "+++\ntools = [\"noteworx_read_note\"]\n+++\nRead n1 to n4.",
        )
        .config(&format!(
            "[model]\nmax_tokens = {MAX_TOKENS}\n[limits]\ncontext_tokens = {WINDOW}\nmax_turns = 8"
        ))
        .notes(notes)
        .build()
        .await;
    scene.run().await;
    scene
}

/// The model's server answers `body` at `route`.
async fn answer_at(llm: &FakeLlm, route: &str, body: Value) {
    wiremock::Mock::given(wiremock::matchers::path(route))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(body))
        .mount(&llm.server)
        .await;
}

fn elided(lines: &[ConversationRecord]) -> usize {
    lines
        .iter()
        .map(|l| l.context().elided_call_ids.len())
        .sum()
}

#[tokio::test]
async fn counted_prompts_match_the_servers_usage_and_keep_more_than_the_estimate() {
    let notes = four_long_notes().await;
    let counting = FakeLlm::counting(reads(&["n1", "n2", "n3", "n4"]), WINDOW).await;
    let exact = read_four(counting, &notes).await;

    let s = exact.summary("read");
    assert_eq!(s.status, Status::Succeeded, "{:?}", s.error);
    let lines = exact.conversation("read");
    assert_eq!(lines.len(), 5, "no request was refused for its size");
    for l in &lines {
        let c = l.context();
        assert_eq!(c.counted, "exact", "{c:?}");
        assert_eq!(
            json!(c.prompt_tokens),
            l.response["usage"]["prompt_tokens"],
            "the count is the server's: {c:?}"
        );
        assert!(c.prompt_tokens <= WINDOW - MAX_TOKENS);
        assert_eq!(c.counts.last(), Some(&c.prompt_tokens));
    }
    // Each chat request was counted as sent: the last template request
    // before it carried the same body.
    let all = exact.llm().server.received_requests().await.unwrap();
    let mut last_template: Option<Value> = None;
    for r in &all {
        let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
        match r.url.path() {
            "/apply-template" => last_template = Some(body),
            "/v1/chat/completions" => assert_eq!(last_template.take(), Some(body)),
            _ => {}
        }
    }

    // The same task against a server that reports usage but cannot count.
    let reporting = FakeLlm::reporting(reads(&["n1", "n2", "n3", "n4"]), WINDOW).await;
    let estimated = read_four(reporting, &notes).await;
    let est_lines = estimated.conversation("read");
    assert!(est_lines.iter().all(|l| l.context().counted == "estimated"));
    assert_eq!(
        estimated.llm().requests_to("/apply-template").await,
        1,
        "asked once, then estimated for the rest of the run"
    );
    // By the fourth request the estimate had removed a result the exact
    // count shows still fits.
    assert_eq!(
        (elided(&lines[..4]), elided(&est_lines[..4])),
        (0, 1),
        "exact counts keep more in the window"
    );

    // The counted run replays exactly, its counts answered from the records.
    let port = closed_port();
    exact.write_config(
        &format!("http://127.0.0.1:{port}/v1"),
        &format!(
            "[model]\nmax_tokens = {MAX_TOKENS}\n[limits]\ncontext_tokens = {WINDOW}\nmax_turns = 8\n[tools.noteworx]\nbase_url = \"http://127.0.0.1:{port}\"\n"
        ),
    );
    let (code, out) = replay_of(&exact.cfg(), &exact.run_dir("read"), None).await;
    assert_eq!(code, 0, "{out}");
}

#[tokio::test]
async fn a_count_too_small_for_the_prompt_is_not_believed() {
    // A server that says every prompt is 3 tokens: believed, it would let
    // any prompt through as a small one.
    let notes = four_long_notes().await;
    let llm = FakeLlm::reporting(reads(&["n1", "n2", "n3", "n4"]), WINDOW).await;
    answer_at(&llm, "/apply-template", json!({"prompt": "x"})).await;
    answer_at(&llm, "/tokenize", json!({"tokens": [1, 2, 3]})).await;

    let scene = read_four(llm, &notes).await;

    let s = scene.summary("read");
    assert_eq!(s.status, Status::Succeeded, "{:?}", s.error);
    let lines = scene.conversation("read");
    assert_eq!(lines.len(), 5, "no request was refused for its size");
    for l in &lines {
        assert_eq!(l.context().counted, "estimated", "{:?}", l.context);
        assert!(l.context().prompt_tokens > 3);
    }
    // Each request is counted, and each count disbelieved on its own.
    let counted = scene.llm().requests_to("/tokenize").await;
    assert_eq!(counted, lines.len());
    assert!(elided(&lines) >= 1, "the estimate still elides");
}

#[tokio::test]
async fn a_model_that_reads_an_elided_note_again_is_not_told_it_has_it() {
    let body = "a long note body ".repeat(150);
    let notes = FakeNoteworx::start(vec![note("big", "Big", &[], &body)]).await;
    let scene = scenario()
        .llm(FakeLlm::counting(reads(&["big"; 4]), 1400).await)
        .task(
            "again",
            "+++\ntools = [\"noteworx_read_note\"]\n+++\nRead big.",
        )
        .config("[model]\nmax_tokens = 200\n[limits]\ncontext_tokens = 1400")
        .notes(&notes)
        .ran()
        .await;

    let s = scene.summary("again");
    assert_eq!(s.status, Status::Succeeded, "{:?}", s.error);
    // Each earlier result had left the context, so no read was a repeat.
    let tools = scene.tool_lines("again");
    let ran: Vec<_> = tools.iter().map(|t| (t.executed, t.is_error)).collect();
    assert_eq!(ran, [(true, false); 4]);
    assert!(elided(&scene.conversation("again")) >= 3);
}

#[tokio::test]
async fn a_repeat_whose_result_is_still_in_the_context_is_refused() {
    let notes = FakeNoteworx::start(vec![note("small", "Small", &[], "short")]).await;
    let s = scenario()
        .llm(FakeLlm::counting(reads(&["small", "small", "small"]), 8192).await)
        .task("again", "Read small.")
        .config("[limits]\ncontext_tokens = 8192")
        .notes(&notes)
        .ran()
        .await;

    let executed: Vec<bool> = s.tool_lines("again").iter().map(|t| t.executed).collect();
    assert_eq!(
        executed,
        [true, true, false],
        "the third identical read is refused"
    );
}

#[tokio::test]
async fn replayed_thinking_is_elided_before_any_tool_result() {
    let notes = FakeNoteworx::start(vec![
        note("n1", "One", &[], &"first note ".repeat(60)),
        note("n2", "Two", &[], &"second note ".repeat(60)),
    ])
    .await;
    let thinking_read = |id: &str, slug: &str| {
        reply(
            json!({"role": "assistant", "content": "", "reasoning_content": "I should read it. ".repeat(120),
                "tool_calls": [{"id": id, "type": "function",
                    "function": {"name": "noteworx_read_note", "arguments": json!({"slug": slug}).to_string()}}]}),
            "tool_calls",
        )
    };
    let llm = FakeLlm::counting(
        vec![
            thinking_read("c1", "n1"),
            thinking_read("c2", "n2"),
            final_answer("done"),
        ],
        1500,
    )
    .await;
    let scene = scenario()
        .llm(llm)
        .task(
            "think",
            "+++\ntools = [\"noteworx_read_note\"]\n+++\nRead n1 and n2.",
        )
        .config("[model]\nmax_tokens = 200\nreplay_thinking = \"keep\"")
        .config("[limits]\ncontext_tokens = 1500")
        .notes(&notes)
        .build()
        .await;

    scene.run().await;

    let s = scene.summary("think");
    assert_eq!(s.status, Status::Succeeded, "{:?}", s.error);
    let contexts: Vec<(u32, usize)> = scene
        .conversation("think")
        .iter()
        .map(|l| {
            let c = l.context();
            (c.elided_reasoning, c.elided_call_ids.len())
        })
        .collect();
    let first = contexts
        .iter()
        .position(|&(r, c)| r > 0 || c > 0)
        .expect("something was elided");
    assert!(contexts[first].0 > 0, "thinking went first: {contexts:?}");
    let thinking_left = |request: &Value| {
        let sent = request["messages"].as_array().unwrap();
        sent.iter()
            .filter(|m| m.get("reasoning_content").is_some())
            .count()
    };
    let requests = scene.requests().await;
    let last = requests.last().unwrap();
    assert!(
        thinking_left(last) < 2,
        "the oldest thinking left the last request"
    );
}
