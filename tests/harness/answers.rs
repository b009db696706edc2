//! What a finished task's answer becomes (SPEC §8, §16, §22): `answer.md`,
//! stdout of `run-task` and `run --json`, and an answer cut at `max_tokens`
//! asked for once more, shorter, before it is `answer_truncated`.

use agent_harness::agent::StopReason;
use agent_harness::records::Status;
use serde_json::{Value, json};

use crate::cli::{run_bin, stderr, stdout};
use crate::common::*;

#[tokio::test]
async fn a_cut_answer_is_asked_for_once_more_shorter_with_thinking_off() {
    let (llm, project, cfg) = arrange(
        vec![
            cut("The answer is that the timer runs every"),
            final_answer("The timer runs hourly."),
        ],
        &[("t", "When does the timer run?")],
        "",
    )
    .await;

    assert_eq!(run_all(&cfg).await.exit_code(), 0);

    let s = project.summary("t");
    assert_eq!(s.final_answer.as_deref(), Some("The timer runs hourly."));
    let requests = llm.requests().await;
    assert_eq!(requests.len(), 2);
    let second = messages(&requests[1]);
    let n = second.len();
    assert_eq!(
        second[n - 2]["content"],
        "The answer is that the timer runs every"
    );
    assert_eq!(second[n - 1]["role"], "user");
    assert!(
        second[n - 1]["content"]
            .as_str()
            .unwrap()
            .contains("cut off at the output length limit"),
        "{second:?}"
    );
    assert_eq!(
        requests[1]["chat_template_kwargs"]["enable_thinking"], false,
        "thinking off for the second ask"
    );
    let finishes: Vec<Value> = project
        .conversation("t")
        .iter()
        .map(|l| l["finish_reason"].clone())
        .collect();
    assert_eq!(finishes, [json!("length"), json!("stop")]);
    let log = project.run_log("t");
    assert!(log.contains("finish length); CUT at max_tokens"), "{log}");
    assert!(log.contains("the answer was CUT at max_tokens"), "{log}");
}

#[tokio::test]
async fn only_the_start_of_a_long_cut_answer_is_sent_back() {
    // Long, and no loop (a loop is `repetition`, never asked again).
    let long: String = (0..2000).map(|i| format!("w{i} ")).collect();
    let (llm, _project, cfg) = arrange(
        vec![cut(&long), final_answer("Short.")],
        &[("t", "Explain.")],
        "",
    )
    .await;

    assert_eq!(run_all(&cfg).await.exit_code(), 0);

    let requests = llm.requests().await;
    let second = messages(&requests[1]);
    let replayed = second[second.len() - 2]["content"].as_str().unwrap();
    assert_eq!(replayed.chars().count(), 1000, "{replayed}");
    assert!(replayed.ends_with('…') && long.starts_with(replayed.trim_end_matches('…')));
}

#[tokio::test]
async fn an_answer_cut_twice_or_on_the_last_turn_is_answer_truncated() {
    for (extra, replies, why) in [
        (
            "",
            vec![cut("The answer is that"), cut("The timer")],
            ", again when asked for a shorter one",
        ),
        (
            "[limits]\nmax_turns = 1\n",
            vec![cut("The answer is that")],
            " and no turn is left to ask again",
        ),
    ] {
        let (_llm, project, cfg) =
            arrange(replies, &[("t", "When does the timer run?")], extra).await;

        assert_eq!(run_all(&cfg).await.exit_code(), 1, "{why}");

        let s = project.summary("t");
        assert_eq!(
            (s.status, s.stop_reason, s.final_answer),
            (Status::Failed, StopReason::AnswerTruncated, None),
            "{why}"
        );
        assert_eq!(
            s.error.as_deref(),
            Some(
                format!(
                    "the answer was cut at max_tokens = 2048 (finish_reason \"length\"){why}; \
                     raise max_tokens or ask for a shorter answer"
                )
                .as_str()
            )
        );
        assert_eq!(project.failed().len(), 1);
    }
}

#[tokio::test]
async fn a_final_answer_is_kept_as_answer_md_and_a_failed_task_has_none() {
    let llm = FakeLlm::start(vec![
        ok(final_answer("The answer is 42.")),
        wiremock::ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad"}})),
    ])
    .await;
    let project = Project::new();
    project.task("a-answered", "Answer.");
    project.task("b-refused", "Answer.");
    let cfg = project.config(&llm.base_url(), "");

    assert_eq!(run_all(&cfg).await.exit_code(), 1);

    let answer = std::fs::read_to_string(project.run_dir("a-answered").join("answer.md")).unwrap();
    assert_eq!(answer, "The answer is 42.\n");
    assert!(!project.run_dir("b-refused").join("answer.md").exists());
}

#[tokio::test]
async fn run_task_prints_the_answer_and_nothing_else_on_stdout() {
    let llm = FakeLlm::replies(vec![final_answer("Forty-two.\n\nThat is all.")]).await;
    let project = Project::new();
    project.write_config(&llm.base_url(), "");
    project.task("q", "Answer.");

    let out = run_bin(&project, &["run-task", "q"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Forty-two.\n\nThat is all.\n");
    assert!(stderr(&out).contains("task finished"), "{}", stderr(&out));
}

#[tokio::test]
async fn run_task_prints_a_structured_answer_as_the_json_of_result_json() {
    let llm = FakeLlm::replies(vec![final_answer(
        "Here it is:\n```json\n{\"papers\": 3, \"top\": \"Tool calling\"}\n```",
    )])
    .await;
    let project = Project::new();
    std::fs::create_dir_all(project.root().join("schemas")).unwrap();
    std::fs::write(
        project.root().join("schemas/scan.json"),
        r#"{"type":"object","required":["papers"],"properties":{"papers":{"type":"integer"}}}"#,
    )
    .unwrap();
    project.write_config(&llm.base_url(), "");
    project.task(
        "scan",
        "+++\noutput_schema = \"schemas/scan.json\"\n+++\nCount.",
    );

    let out = run_bin(&project, &["run-task", "scan"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed, json!({"papers": 3, "top": "Tool calling"}));
    let file = std::fs::read_to_string(the_run_dir(&project, "scan").join("result.json")).unwrap();
    assert_eq!(stdout(&out), file, "stdout is result.json");
}

#[tokio::test]
async fn run_json_prints_one_summary_per_line_as_each_task_ends() {
    let llm = FakeLlm::start(vec![
        ok(final_answer("one")),
        wiremock::ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad"}})),
        ok(final_answer("three")),
    ])
    .await;
    let project = Project::new();
    project.write_config(&llm.base_url(), "");
    for t in ["a", "b", "c"] {
        project.task(t, "Answer.");
    }

    let out = run_bin(&project, &["run", "--json"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(&str, &str)> = lines
        .iter()
        .map(|s| (s["task"].as_str().unwrap(), s["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [("a", "succeeded"), ("b", "failed"), ("c", "succeeded")]
    );
    for (line, task) in lines.iter().zip(["a", "b", "c"]) {
        let file: Value = serde_json::from_str(
            &std::fs::read_to_string(the_run_dir(&project, task).join("summary.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(line, &file, "the line is the task's summary.json");
    }
    assert!(
        !stderr(&out).contains("\"run_id\""),
        "stderr keeps only diagnostics"
    );

    let llm = FakeLlm::replies(vec![final_answer("four")]).await;
    let project = Project::new();
    project.write_config(&llm.base_url(), "");
    project.task("d", "Answer.");
    let quiet = run_bin(&project, &["run"]).await;
    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    assert_eq!(project.done().len(), 1);
    assert_eq!(
        stdout(&quiet),
        "",
        "without --json, run prints nothing on stdout"
    );
}
