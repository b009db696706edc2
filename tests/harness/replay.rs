//! `replay RUN_DIR` (docs/resume-replay-eval.md, "Replay"): a recorded run
//! answered from its own records, with no endpoint or tool service to talk to,
//! compared request by request.

use agent_harness::agent::StopReason;
use agent_harness::config::Config;
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::fake_runpod::{FakeRunpod, completed, job};
use crate::common::*;

/// The config of `s` rewritten to point at closed ports: a replay that
/// tried the network would fail.
fn offline_config(s: &Scene, extra: &str) -> Config {
    let port = closed_port();
    s.write_config(
        &format!("http://127.0.0.1:{port}/v1"),
        &format!("{extra}\n[tools.noteworx]\nbase_url = \"http://127.0.0.1:{port}\"\n"),
    );
    s.cfg()
}

/// The summary of the replay's own run (the newest run folder of the task).
fn replayed_summary(s: &Scene, task: &str) -> agent_harness::records::Summary {
    s.summary_in(s.run_dirs(task).last().unwrap())
}

/// Records a two-turn task: a note read, then an answer.
async fn recorded_note_task() -> (Scene, FakeNoteworx) {
    let notes = FakeNoteworx::start(vec![note("n", "Note", &["x"], "The answer is 42.")]).await;
    let s = scenario()
        .replies(vec![
            tool_calls(&[("c1", "noteworx_read_note", json!({"slug": "n"}))]),
            final_answer("It is 42."),
        ])
        .task("t", "Read note n.")
        .notes(&notes)
        .build()
        .await;
    s.run().await;
    assert_eq!(s.summary("t").stop_reason, StopReason::FinalAnswer);
    (s, notes)
}

#[tokio::test]
async fn a_recorded_run_replays_with_no_network_and_every_request_matching() {
    let (s, notes) = recorded_note_task().await;
    let cfg = offline_config(&s, "");

    let (code, out) = replay_of(&cfg, &s.run_dir("t"), None).await;

    assert_eq!(code, 0, "{out}");
    assert!(out.contains("every request matched the recording"), "{out}");
    assert_contains(
        &out,
        "stop reason: recorded final_answer, replayed final_answer",
    );
    assert_eq!(s.requests().await.len(), 2, "the replay sent no request");
    assert_eq!(notes.calls().await.len(), 1, "nor read a note");
    let replayed = replayed_summary(&s, "t");
    assert_eq!(replayed.replay_of.as_deref(), Some(&*format!("t/{RUN_ID}")));
    assert_eq!(replayed.final_answer.as_deref(), Some("It is 42."));
    assert_eq!(replayed.turns, 2);
    assert_eq!(s.done().len(), 1, "the task file was not touched");
}

#[tokio::test]
async fn a_changed_system_prompt_makes_the_replay_differ_at_turn_1() {
    let (s, _notes) = recorded_note_task().await;
    let cfg = offline_config(&s, "[prompt]\nsystem = \"You are terse.\"\n");

    let (code, out) = replay_of(&cfg, &s.run_dir("t"), None).await;

    assert_eq!(code, 1, "{out}");
    assert_contains(
        &out,
        "turn 1: the request differs from the recorded one (2 difference(s) in all; the first is shown)",
    );
    assert!(out.contains("--- recorded\n+++ replayed\n"), "{out}");
    assert_contains(
        &out,
        "+      \"content\": \"You are terse.\\n\\nA call, written out:",
    );
    assert_contains(
        &out,
        "-      \"content\": \"You complete one task on your own.",
    );
}

#[tokio::test]
async fn a_folder_that_is_not_a_run_exits_2() {
    let s = scenario().no_config_file().build().await;
    let cfg = offline_config(&s, "");
    let (code, out) = replay_of(&cfg, &s.root().join("logs/nothing/here"), None).await;
    assert_eq!(code, 2);
    assert!(out.contains("not a readable run"), "{out}");
}

/// Records task `t` against `model` with `extra` config, then replays it offline.
async fn record_and_replay(model: Scenario, body: &str, extra: &str) -> (Scene, u8, String) {
    let s = model.task("t", body).config(extra).build().await;
    s.run().await;
    let offline = {
        let port = closed_port();
        s.write_config(&format!("http://127.0.0.1:{port}/v1"), extra);
        s.cfg()
    };
    let (code, out) = replay_of(&offline, &s.run_dir("t"), None).await;
    (s, code, out)
}

#[tokio::test]
async fn a_run_with_a_retried_call_replays_its_retries() {
    let model = scenario().script(vec![
        ResponseTemplate::new(503).insert_header("Retry-After", "0"),
        ResponseTemplate::new(500)
            .set_body_json(json!({"error": {"message": "boom", "type": "server_error"}})),
        ok(final_answer("after two retries")),
    ]);
    let (s, code, out) = record_and_replay(model, "Hello.", "").await;
    assert_eq!(s.conversation("t").len(), 3, "three attempts were recorded");
    assert_eq!(code, 0, "{out}");
    let summary = replayed_summary(&s, "t");
    assert_eq!(summary.final_answer.as_deref(), Some("after two retries"));
    let replayed = jsonl(
        &s.root()
            .join("logs/t")
            .join(&summary.run_id)
            .join("conversation.jsonl"),
    );
    assert_eq!(replayed.len(), 3, "the same three attempts");
    assert_eq!(replayed[0]["error_kind"], "status");
    assert_eq!(s.requests().await.len(), 3);
}

#[tokio::test]
async fn a_recovered_text_call_and_a_loop_replay_to_the_same_stop() {
    let text_call = reply(
        json!({"role": "assistant", "content": "<|tool_call>call:noteworx_list_notes{}<tool_call|>"}),
        "stop",
    );
    let notes = FakeNoteworx::start(vec![note("n", "Note", &[], "x")]).await;
    let model = scenario().replies(vec![text_call]);
    let (s, code, out) = record_and_replay(model, "List forever.", &notes.config_section()).await;
    let recorded = s.summary("t");
    assert_eq!(recorded.stop_reason, StopReason::LoopDetected);
    assert!(s.tool_lines("t")[0].recovered);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        replayed_summary(&s, "t").stop_reason,
        StopReason::LoopDetected
    );
}

#[tokio::test]
async fn a_run_that_elided_its_context_replays_the_same_requests() {
    let long = "word ".repeat(1500);
    let notes = FakeNoteworx::start(vec![
        note("a", "A", &[], &long),
        note("b", "B", &[], &long),
        note("c", "C", &[], &long),
    ])
    .await;
    // No `usage`: the harness counts the prompt itself, so the notes fill the window.
    let without_usage = |mut v: Value| {
        v.as_object_mut().unwrap().remove("usage");
        v
    };
    let model = scenario().replies(
        vec![
            tool_calls(&[("c1", "noteworx_read_note", json!({"slug": "a"}))]),
            tool_calls(&[("c2", "noteworx_read_note", json!({"slug": "b"}))]),
            tool_calls(&[("c3", "noteworx_read_note", json!({"slug": "c"}))]),
            final_answer("read all three"),
        ]
        .into_iter()
        .map(without_usage)
        .collect(),
    );
    let extra = format!(
        "[limits]\ncontext_tokens = 4000\n[model]\nmax_tokens = 1000\n{}",
        notes.config_section()
    );
    let (s, code, out) = record_and_replay(model, "Read a, b and c.", &extra).await;
    let elided = s
        .conversation("t")
        .iter()
        .any(|l| !l.context().elided_call_ids.is_empty());
    assert!(elided, "the recorded run elided old results");
    assert_eq!(code, 0, "{out}");
}

#[tokio::test]
async fn a_runpod_run_replays_from_its_job_records() {
    let queued = vec![ok(job("job-1", "IN_QUEUE"))];
    let done = vec![ok(completed("job-1", final_answer("from runpod"), 10, 20))];
    let rp = FakeRunpod::start(queued, done, false).await;
    let s = scenario()
        .task("t", "Hello.")
        .config_file(&rp.config_sections())
        .ran()
        .await;
    let calls_before = rp.calls().await.len();

    let (code, out) = replay_of(&s.cfg(), &s.run_dir("t"), None).await;

    assert_eq!(code, 0, "{out}");
    assert_eq!(rp.calls().await.len(), calls_before, "no request to RunPod");
    let replayed = replayed_summary(&s, "t");
    assert_eq!(replayed.final_answer.as_deref(), Some("from runpod"));
    assert_eq!(
        (replayed.runpod_delay_ms, replayed.runpod_exec_ms),
        (Some(10), Some(20))
    );
}

#[tokio::test]
async fn from_turn_forks_live_with_writes_dry_run() {
    let (s, notes) = recorded_note_task().await;
    // Turn 2 goes to a new endpoint, which now asks for an attachment.
    let attach = json!({"slug": "n", "filename": "x.md", "content": "An idea."});
    let ask = tool_calls(&[("c9", "noteworx_create_attachment", attach)]);
    let live = FakeLlm::replies(vec![ask, final_answer("attached")]).await;
    s.write_config(&live.base_url(), &notes.config_section());

    let (code, out) = replay_of(&s.cfg(), &s.run_dir("t"), Some(2)).await;

    assert_eq!(code, 0, "the replayed turn matched: {out}");
    assert!(out.contains("replayed final_answer"), "{out}");
    let sent = live.requests().await;
    assert_eq!(sent.len(), 2, "turns 2 and 3 went live");
    let first = messages(&sent[0]);
    let result = first.iter().find(|m| m.role == Role::Tool).unwrap();
    // Turn 1's recorded result was replayed into the live request.
    assert_contains(&result.content, "The answer is 42.");
    assert!(notes.attachments("n").is_empty(), "writes are dry-run");
    let replayed = replayed_summary(&s, "t");
    assert!(replayed.dry_run);
    assert_eq!(replayed.final_answer.as_deref(), Some("attached"));
}

#[tokio::test]
async fn the_command_exits_2_on_an_unreadable_run_and_1_on_a_difference() {
    let s = offline().build().await;
    let out = assert_cmd::Command::cargo_bin("agent-harness")
        .unwrap()
        .args(["replay", "logs/none/20260101T000000Z"])
        .current_dir(s.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("not a readable run"));
}
