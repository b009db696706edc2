//! What a finished task's answer becomes: `answer.md` (docs/operating.md,
//! "Records"), stdout of `run-task` and `run --json` ("Commands" there), and
//! an answer cut at `max_tokens` asked for once more, shorter, before it is
//! `answer_truncated` (docs/tasks.md, "The loop").

use agent_harness::agent::StopReason;
use agent_harness::records::Status;
use serde_json::{Value, json};

use crate::common::*;

/// Task `t` run: its first answer cut at `max_tokens`, its second whole.
async fn a_cut_then_a_whole_answer() -> Scene {
    let scene = scenario()
        .replies(vec![
            cut("The answer is that the timer runs every"),
            final_answer("The timer runs hourly."),
        ])
        .task("t", "When does the timer run?")
        .build()
        .await;
    assert_eq!(scene.run().await.exit_code(), 0);
    scene
}

#[tokio::test]
async fn a_cut_answer_is_asked_for_once_more_shorter_with_thinking_off() {
    let scene = a_cut_then_a_whole_answer().await;

    let s = scene.summary("t");
    assert_eq!(s.final_answer.as_deref(), Some("The timer runs hourly."));
    let requests = scene.requests().await;
    assert_eq!(requests.len(), 2);
    let second = messages(&requests[1]);
    let n = second.len();
    assert_eq!(
        second[n - 2].content,
        "The answer is that the timer runs every"
    );
    assert_eq!(second[n - 1].role, Role::User);
    assert_contains(&second[n - 1].content, "cut off at the output length limit");
    // Thinking off for the second ask.
    assert_eq!(sent(&requests[1]).thinking(), Some(false));
}

#[tokio::test]
async fn a_cut_answer_asked_for_again_is_recorded_as_cut() {
    let scene = a_cut_then_a_whole_answer().await;

    let finishes: Vec<Option<String>> = scene
        .conversation("t")
        .into_iter()
        .map(|l| l.finish_reason)
        .collect();
    assert_eq!(finishes, [Some("length".into()), Some("stop".into())]);
    let log = scene.run_log("t");
    assert_contains(&log, "finish length); CUT at max_tokens");
    assert_contains(&log, "the answer was CUT at max_tokens");
}

#[tokio::test]
async fn only_the_start_of_a_long_cut_answer_is_sent_back() {
    // Long, and no loop (a loop is `repetition`, never asked again).
    let long: String = (0..2000).map(|i| format!("w{i} ")).collect();
    let s = scenario()
        .replies(vec![cut(&long), final_answer("Short.")])
        .task("t", "Explain.")
        .build()
        .await;

    assert_eq!(s.run().await.exit_code(), 0);

    let requests = s.requests().await;
    let second = messages(&requests[1]);
    let replayed = second[second.len() - 2].content.as_str();
    assert_eq!(replayed.chars().count(), 1000, "{replayed}");
    assert!(replayed.ends_with('…') && long.starts_with(replayed.trim_end_matches('…')));
}

/// Task `t`, failed `answer_truncated` (one run, exit 1), its error
/// saying `why` it was not asked again.
async fn assert_answer_truncated(scene: &Scene, why: &str) {
    assert_eq!(scene.run().await.exit_code(), 1, "{why}");
    let s = scene.summary("t");
    assert_eq!(
        (s.status, s.stop_reason, s.final_answer),
        (Status::Failed, StopReason::AnswerTruncated, None),
        "{why}"
    );
    let error = format!(
        "the answer was cut at max_tokens = 2048 (finish_reason \"length\"){why}; \
         raise max_tokens or ask for a shorter answer"
    );
    assert_eq!(s.error.as_deref(), Some(error.as_str()));
    assert_eq!(scene.failed().len(), 1);
}

#[tokio::test]
async fn an_answer_cut_twice_is_answer_truncated() {
    let scene = scenario()
        .replies(vec![cut("The answer is that"), cut("The timer")])
        .task("t", "When does the timer run?")
        .build()
        .await;

    assert_answer_truncated(&scene, ", again when asked for a shorter one").await;
}

#[tokio::test]
async fn an_answer_cut_on_the_last_turn_is_answer_truncated() {
    let scene = scenario()
        .replies(vec![cut("The answer is that")])
        .task("t", "When does the timer run?")
        .config("[limits]\nmax_turns = 1")
        .build()
        .await;

    assert_answer_truncated(&scene, " and no turn is left to ask again").await;
}

/// The endpoint's refusal of a request (400).
fn refused() -> wiremock::ResponseTemplate {
    wiremock::ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad"}}))
}

/// The record `file` of `task`'s one run by the binary.
fn record_of(s: &Scene, task: &str, file: &str) -> String {
    std::fs::read_to_string(the_run_dir(s, task).join(file)).unwrap()
}

#[tokio::test]
async fn a_final_answer_is_kept_as_answer_md_and_a_failed_task_has_none() {
    let s = scenario()
        .script(vec![ok(final_answer("The answer is 42.")), refused()])
        .task("a-answered", "Answer.")
        .task("b-refused", "Answer.")
        .build()
        .await;

    assert_eq!(s.run().await.exit_code(), 1);

    let answer = std::fs::read_to_string(s.run_dir("a-answered").join("answer.md")).unwrap();
    assert_eq!(answer, "The answer is 42.\n");
    assert!(!s.run_dir("b-refused").join("answer.md").exists());
}

#[tokio::test]
async fn run_task_prints_the_answer_and_nothing_else_on_stdout() {
    let s = scenario()
        .replies(vec![final_answer("Forty-two.\n\nThat is all.")])
        .task("q", "Answer.")
        .build()
        .await;

    let out = run_bin(&s, &["run-task", "q"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Forty-two.\n\nThat is all.\n");
    assert!(stderr(&out).contains("task finished"), "{}", stderr(&out));
}

/// A scan result's schema: `papers` an integer.
const SCAN_SCHEMA: &str =
    r#"{"type":"object","required":["papers"],"properties":{"papers":{"type":"integer"}}}"#;

#[tokio::test]
async fn run_task_prints_a_structured_answer_as_the_json_of_result_json() {
    let answer = "Here it is:\n```json\n{\"papers\": 3, \"top\": \"Tool calling\"}\n```";
    let s = scenario()
        .answers(&[answer])
        .task(
            "scan",
            "+++\noutput_schema = \"schemas/scan.json\"\n+++\nCount.",
        )
        .build()
        .await;
    std::fs::create_dir_all(s.root().join("schemas")).unwrap();
    std::fs::write(s.root().join("schemas/scan.json"), SCAN_SCHEMA).unwrap();

    let out = run_bin(&s, &["run-task", "scan"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed, json!({"papers": 3, "top": "Tool calling"}));
    let file = record_of(&s, "scan", "result.json");
    assert_eq!(stdout(&out), file, "stdout is result.json");
}

/// `run --json` of tasks `a`, `b` (refused) and `c`: the scene and the
/// lines of stdout, read as JSON.
async fn run_json_of_three() -> (Scene, Vec<Value>, std::process::Output) {
    let scene = scenario()
        .script(vec![
            ok(final_answer("one")),
            refused(),
            ok(final_answer("three")),
        ])
        .task("a", "Answer.")
        .task("b", "Answer.")
        .task("c", "Answer.")
        .build()
        .await;
    let out = run_bin(&scene, &["run", "--json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let lines = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect::<Vec<Value>>();
    assert_eq!(lines.len(), 3, "one line a task: {}", stdout(&out));
    (scene, lines, out)
}

#[tokio::test]
async fn run_json_prints_one_summary_per_line_as_each_task_ends() {
    let (_scene, lines, out) = run_json_of_three().await;

    let seen: Vec<(&str, &str)> = lines
        .iter()
        .map(|s| (s["task"].as_str().unwrap(), s["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [("a", "succeeded"), ("b", "failed"), ("c", "succeeded")]
    );
    // stderr keeps only diagnostics.
    assert_lacks(stderr(&out), "\"run_id\"");
}

#[tokio::test]
async fn each_line_of_run_json_is_the_tasks_summary_json() {
    let (scene, lines, _out) = run_json_of_three().await;

    for (line, task) in lines.iter().zip(["a", "b", "c"]) {
        let file: Value = serde_json::from_str(&record_of(&scene, task, "summary.json")).unwrap();
        assert_eq!(line, &file, "the line is the task's summary.json");
    }
}

#[tokio::test]
async fn without_json_run_prints_nothing_on_stdout() {
    let scene = scenario()
        .answers(&["four"])
        .task("d", "Answer.")
        .build()
        .await;

    let quiet = run_bin(&scene, &["run"]).await;

    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    assert_eq!(scene.done().len(), 1);
    assert_eq!(
        stdout(&quiet),
        "",
        "without --json, run prints nothing on stdout"
    );
}
