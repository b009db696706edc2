//! `exec` (docs/tasks.md, "exec"): a task from the command line or stdin, no
//! inbox, its flags over its frontmatter, its exit code the task's.

use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn exec_runs_a_prompt_with_no_inbox_and_prints_the_answer() {
    let s = scenario()
        .replies(vec![final_answer("Paris.")])
        .build()
        .await;
    std::fs::remove_dir(s.root().join("tasks/inbox")).unwrap();

    let out = run_bin(&s, &["exec", "What is the capital of France?"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Paris.\n");
    let dir = the_run_dir(&s, "exec");
    assert_eq!(
        std::fs::read_to_string(dir.join("task.md")).unwrap(),
        "What is the capital of France?"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("answer.md")).unwrap(),
        "Paris.\n"
    );
    assert!(!s.root().join("tasks/inbox").exists(), "no inbox is made");
    assert!(!s.root().join("tasks/done").exists(), "nothing is filed");
}

/// `args` run by the binary in the scene with `stdin` on its standard input.
async fn exec_with_stdin(
    s: &Scene,
    args: &[&str],
    stdin: impl Into<Vec<u8>>,
) -> std::process::Output {
    let mut cmd = bin(s);
    cmd.args(args).write_stdin(stdin);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// A model that fetches a closed port every turn, webfetch enabled: a
/// task that never answers.
fn fetching_forever() -> Scenario {
    scenario()
        .replies(vec![call(
            "webfetch",
            json!({"url": "http://127.0.0.1:9/"}),
        )])
        .config("[tools.webfetch]\nenabled = true")
}

/// What `answer.txt` held before a run.
const YESTERDAY: &str = "Yesterday's answer.\n";

/// `answer.txt` in the scene, holding [`YESTERDAY`].
fn yesterdays_answer(s: &Scene) -> std::path::PathBuf {
    let answer = s.root().join("answer.txt");
    std::fs::write(&answer, YESTERDAY).unwrap();
    answer
}

#[tokio::test]
async fn exec_reads_stdin_with_frontmatter_and_the_flags_win() {
    let s = scenario()
        .answers(&["fetched nothing"])
        .config("[tools.webfetch]\nenabled = true")
        .build()
        .await;
    let args = ["exec", "--name", "probe", "--tools", "webfetch", "-"];
    let stdin = "+++\nmax_turns = 2\ntools = [\"noteworx_list_notes\"]\n+++\nLook it up.\n";

    let out = exec_with_stdin(&s, &args, stdin).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "fetched nothing\n");
    let task = std::fs::read_to_string(the_run_dir(&s, "probe").join("task.md")).unwrap();
    assert_contains(&task, "max_turns = 2");
    assert_contains(&task, "tools = [\"webfetch\"]");
    assert!(task.ends_with("+++\nLook it up.\n"), "{task}");
    let requests = s.requests().await;
    assert_eq!(sent(&requests[0]).tool_names(), ["webfetch"]);
}

#[tokio::test]
async fn exec_exits_with_its_tasks_code() {
    let s = scenario()
        .script(vec![
            wiremock::ResponseTemplate::new(400)
                .set_body_json(json!({"error": {"message": "bad"}})),
        ])
        .build()
        .await;

    let out = run_bin(&s, &["exec", "Answer."]).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "no answer, nothing on stdout");
}

#[tokio::test]
async fn exec_exits_2_for_what_is_no_task_and_calls_no_model() {
    let s = scenario().build().await;

    for args in [
        &["exec", "--name", "../up", "Answer."][..],
        &["exec", "  \n"][..],
        &["exec", "+++\nmax_turns = 0\n+++\nAnswer."][..],
        &["exec", "--tools", "", "Answer."][..],
        &["exec", "--tools", "webfetch,,shell", "Answer."][..],
        &["exec", "--agent", "nobody", "Answer."][..],
        &["exec", "--max-turns", "5000", "Answer."][..],
    ] {
        let out = run_bin(&s, args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    let out = exec_with_stdin(&s, &["exec", "-"], vec![b'x'; 1024 * 1024 + 1]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_contains(stderr(&out), "over 1048576 bytes");
    assert!(s.requests().await.is_empty(), "no exec called the model");
}

#[tokio::test]
async fn exec_quiet_prints_only_the_answer() {
    let s = scenario().answers(&["Paris."]).build().await;

    let out = run_bin(&s, &["exec", "-q", "Capital?"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Paris.\n");
    assert_eq!(stderr(&out), "", "nothing on stderr when it succeeds");
}

#[tokio::test]
async fn exec_output_writes_the_answer_to_a_private_file() {
    let s = scenario().answers(&["Lyon."]).build().await;
    let args = ["exec", "--quiet", "--output", "answer.txt", "Second city?"];

    let out = run_bin(&s, &args).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "the answer goes to the file only");
    let answer = s.root().join("answer.txt");
    assert_eq!(std::fs::read_to_string(&answer).unwrap(), "Lyon.\n");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&answer).unwrap().permissions())
            & 0o777,
        0o600,
        "as private as the records it comes from"
    );
}

#[tokio::test]
async fn exec_output_of_a_run_with_no_answer_leaves_the_file_as_it_was_and_fails() {
    let s = fetching_forever().build().await;
    let answer = yesterdays_answer(&s);
    let args = [
        "exec",
        "-q",
        "--max-turns",
        "1",
        "-o",
        "answer.txt",
        "Loop.",
    ];

    let out = run_bin(&s, &args).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // A file the operator keeps is never removed; the exit code says it failed.
    assert_eq!(std::fs::read_to_string(&answer).unwrap(), YESTERDAY);
    let err = stderr(&out);
    assert_contains(&err, "no answer this run: answer.txt left as it was");
}

#[tokio::test]
async fn exec_output_of_a_run_that_never_got_to_an_end_leaves_the_file() {
    // The endpoint down: 75.
    let s = offline().build().await;
    let kept = yesterdays_answer(&s);

    let out = run_bin(&s, &["exec", "-q", "-o", "answer.txt", "Hi."]).await;

    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), YESTERDAY);
}

#[tokio::test]
async fn exec_max_turns_and_model_override_the_config_for_that_run() {
    let s = fetching_forever().build().await;
    let args = [
        "exec",
        "--max-turns",
        "1",
        "--model",
        "qwen-test",
        "--name",
        "loop.md",
        "Loop.",
    ];

    let out = run_bin(&s, &args).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let summary = s.summary_in(&the_run_dir(&s, "loop"));
    assert_eq!(summary.stop_reason.as_str(), "max_turns");
    assert_eq!(summary.turns, 1);
    let sent = s.requests().await;
    assert_eq!(sent.len(), 1, "one turn, one request");
    assert_eq!(sent[0]["model"], "qwen-test");
}

#[tokio::test]
async fn exec_refuses_an_empty_model_name_as_a_usage_error() {
    let s = scenario().build().await;

    let out = run_bin(&s, &["exec", "--model", "", "Hi."]).await;

    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_contains(stderr(&out), "--model <NAME>");
    assert!(s.requests().await.is_empty(), "nothing was sent");
}

#[tokio::test]
async fn exec_quiet_says_in_one_line_that_a_task_did_not_succeed() {
    let s = fetching_forever().build().await;

    let out = run_bin(
        &s,
        &["exec", "-q", "--max-turns", "1", "--name", "loop", "Loop."],
    )
    .await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "no answer");
    assert_eq!(
        stderr(&out),
        "agent-harness: exec loop did not succeed (exit 1); `agent-harness show loop` tells why\n"
    );
}
