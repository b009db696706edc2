//! Expectations and `eval DIR` (docs/tasks.md, "Expectations";
//! docs/resume-replay-eval.md, "Eval"): what a task must achieve, and how often
//! a suite of tasks achieves it.

use std::process::Output;

use agent_harness::agent::StopReason;
use agent_harness::drain::RunOutcome;
use agent_harness::records::Status;
use serde_json::{Value, json};

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::*;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `args` run by the binary in the project with the notes service's token.
fn with_token(s: &Scene, args: &[&str]) -> Output {
    bin(s)
        .env("NOTEWORX_TOKEN", fake_noteworx::TOKEN)
        .args(args)
        .output()
        .unwrap()
}

const SUITE_READ: &str = "+++\ntools = [\"noteworx_read_note\", \"noteworx_create_attachment\"]\n\
    [expect]\ntools_called = [\"noteworx_read_note\"]\nanswer_matches = \"(?i)forty-two\"\nattachments = 1\nmax_turns_used = 3\n+++\n\
    Read note n, attach a summary, and say the number.";
const SUITE_PLAIN: &str =
    "+++\ntools = []\n[expect]\nanswer_matches = \"never said\"\n+++\nSay hello.";

/// The model's call reading note `n`.
fn read_n() -> (&'static str, Value) {
    ("noteworx_read_note", json!({"slug": "n"}))
}

/// The model's call attaching a summary to note `n`.
fn attach_to_n() -> (&'static str, Value) {
    let args = json!({"slug": "n", "filename": "s.md", "content": "42."});
    ("noteworx_create_attachment", args)
}

/// Task `t` of [`SUITE_READ`] run: the model reads note `n` and answers
/// the number, attaching nothing.
async fn read_and_answered_unattached() -> (Scene, RunOutcome) {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "42")]).await;
    let s = scenario()
        .calls(vec![read_n()], "It is forty-two.")
        .task("t", SUITE_READ)
        .notes(&notes)
        .build()
        .await;
    let outcome = s.run().await;
    (s, outcome)
}

#[tokio::test]
async fn a_final_answer_that_misses_an_expectation_fails_for_good() {
    let (s, outcome) = read_and_answered_unattached().await;

    assert_eq!(outcome.exit_code(), 1);
    let t = s.summary("t");
    assert_eq!(
        (t.status, t.stop_reason, t.retryable),
        (Status::Failed, StopReason::ExpectationFailed, false)
    );
    assert_eq!(
        t.error.as_deref(),
        Some("missed expectations: attachments (0 created, expected 1)")
    );
    assert_eq!(s.failed().len(), 1);
}

#[tokio::test]
async fn a_missed_expectation_is_told_with_every_verdict() {
    let (s, _) = read_and_answered_unattached().await;

    let v = serde_json::to_value(s.summary("t").expectations.unwrap()).unwrap();
    assert_eq!(
        v,
        json!([
            {"check": "tools_called", "ok": true, "detail": "ran without error: noteworx_read_note"},
            {"check": "answer_matches", "ok": true, "detail": "the answer matches (?i)forty-two"},
            {"check": "attachments", "ok": false, "detail": "0 created, expected 1"},
            {"check": "max_turns_used", "ok": true, "detail": "2 turn(s) used, at most 3 expected"}
        ])
    );
}

#[tokio::test]
async fn a_task_that_meets_every_expectation_succeeds() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "42")]).await;
    let s = scenario()
        .calls(vec![read_n(), attach_to_n()], "Forty-two.")
        .task("t", SUITE_READ)
        .notes(&notes)
        .ran()
        .await;

    let t = s.summary("t");
    assert_eq!(t.stop_reason, StopReason::FinalAnswer);
    // Each of the four checks SUITE_READ declares has a verdict, and each is met.
    let verdicts: Vec<(String, bool)> = t
        .expectations
        .expect("a task with [expect] has verdicts")
        .into_iter()
        .map(|v| (v.check, v.ok))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("tools_called".to_string(), true),
            ("answer_matches".to_string(), true),
            ("attachments".to_string(), true),
            ("max_turns_used".to_string(), true),
        ]
    );
}

#[tokio::test]
async fn check_refuses_a_bad_pattern_an_unknown_key_and_a_tool_the_task_cannot_call() {
    let s = offline()
        .task("a", "+++\n[expect]\nanswer_matches = \"((\"\n+++\nGo.")
        .task("b", "+++\n[expect]\nanswers = 1\n+++\nGo.")
        .task(
            "c",
            "+++\ntools = []\n[expect]\ntools_called = [\"webfetch\"]\n+++\nGo.",
        )
        .build()
        .await;
    let out = with_token(&s, &["check"]);
    assert_eq!(out.status.code(), Some(1));
    let o = text(&out.stdout);
    assert_contains(
        &o,
        "a.md:3: frontmatter: [expect] answer_matches is not a valid regular expression",
    );
    assert_contains(&o, "b.md:3: frontmatter: [expect] answers: unknown key");
    assert_contains(
        &o,
        "c.md: frontmatter: [expect] tools_called names \"webfetch\", which this task cannot call (its tools: none)",
    );
}

/// A project with the two-task suite in `suite/` and a fake that makes the
/// first task pass and the plain one fail its expectation.
async fn suite() -> (Scene, FakeNoteworx) {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "42")]).await;
    let s = scenario()
        .by_progress(vec![
            ok(tool_calls(&[(
                "c1",
                "noteworx_read_note",
                json!({"slug": "n"}),
            )])),
            ok(tool_calls(&[(
                "c2",
                "noteworx_create_attachment",
                json!({"slug": "n", "filename": "s.md", "content": "42."}),
            )])),
            ok(final_answer("Forty-two.")),
        ])
        .notes(&notes)
        .build()
        .await;
    std::fs::create_dir_all(s.root().join("suite")).unwrap();
    std::fs::write(s.root().join("suite/read.md"), SUITE_READ).unwrap();
    std::fs::write(s.root().join("suite/plain.md"), SUITE_PLAIN).unwrap();
    (s, notes)
}

fn eval_json(out: &Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread")]
async fn eval_reports_pass_rates_per_task_and_leaves_the_suite_and_the_notes_alone() {
    let (s, notes) = suite().await;

    let out = with_token(&s, &["eval", "suite", "--repeat", "2", "--json"]);

    let report = eval_json(&out);
    assert_eq!(report["repeat"], 2);
    let v = &report["variants"][0];
    assert_eq!(v["set"], json!({}));
    assert_eq!(
        v["tasks"],
        json!([
            {"task": "plain", "runs": 2, "passes": 0, "pass_rate": 0.0, "ci_low": 0.0, "ci_high": 0.658,
             "pass_hat_k": 0, "median_turns": 3, "median_tokens": 400, "median_wall_ms": v["tasks"][0]["median_wall_ms"],
             "stop_reasons": {"expectation_failed": 2}, "top_failure": "answer_matches"},
            {"task": "read", "runs": 2, "passes": 2, "pass_rate": 1.0, "ci_low": 0.342, "ci_high": 1.0,
             "pass_hat_k": 1, "median_turns": 3, "median_tokens": 400, "median_wall_ms": v["tasks"][1]["median_wall_ms"],
             "stop_reasons": {"final_answer": 2}}
        ])
    );
    assert_eq!(
        v["totals"],
        json!({"runs": 4, "passes": 2, "pass_rate": 0.5, "ci_low": 0.15, "ci_high": 0.85, "pass_hat_k": 0.5})
    );
    assert!(
        report.get("comparison").is_none(),
        "no two-value matrix, no comparison"
    );
    assert!(notes.attachments("n").is_empty(), "writes are dry-run");
    assert!(s.root().join("suite/read.md").exists() && s.root().join("suite/plain.md").exists());
    assert!(s.inbox().is_empty() && s.done().is_empty());
    let eval_dir = s
        .root()
        .join("logs/eval")
        .join(report["eval_id"].as_str().unwrap());
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(eval_dir.join("eval.json")).unwrap())
            .unwrap();
    assert_eq!(written, report);
    let runs = std::fs::read_dir(eval_dir.join("v1/read")).unwrap().count();
    assert_eq!(runs, 2, "one run folder per repeat");
    assert_eq!(s.requests().await.len(), 2 * 3 + 2 * 3);
    let listed = with_token(&s, &["runs"]);
    assert!(
        !text(&listed.stderr).contains("without a readable summary"),
        "eval folders are not runs: {}",
        text(&listed.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_matrix_runs_the_suite_once_per_value_and_prints_the_variants_side_by_side() {
    let (s, _notes) = suite().await;

    let out = with_token(
        &s,
        &[
            "eval",
            "suite",
            "--repeat",
            "1",
            "--set",
            "limits.max_turns=5",
            "--matrix",
            "model.temperature=0.1,0.9",
        ],
    );

    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let o = text(&out.stdout);
    let lines: Vec<&str> = o.lines().collect();
    assert!(
        lines[0].starts_with("eval ") && lines[0].ends_with(": 1 run(s) of each task per variant"),
        "{o}"
    );
    assert!(lines[1].starts_with("TASK   VARIANT"), "{o}");
    assert!(
        lines[2].starts_with("plain  limits.max_turns=5 model.temperature=0.1  0/1"),
        "{o}"
    );
    assert!(
        lines[3].starts_with("plain  limits.max_turns=5 model.temperature=0.9  0/1"),
        "{o}"
    );
    assert!(
        lines[4].starts_with("read   limits.max_turns=5 model.temperature=0.1  1/1"),
        "{o}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("TOTAL  limits.max_turns=5 model.temperature=0.9  1/2")),
        "{o}"
    );
    let temps: Vec<f64> = s
        .requests()
        .await
        .iter()
        .map(|r| r["temperature"].as_f64().unwrap())
        .collect();
    assert_eq!(temps.iter().filter(|t| **t == 0.1).count(), 6);
    assert_eq!(temps.iter().filter(|t| **t == 0.9).count(), 6);
}

/// A project whose endpoint is unreachable, with a one-task suite in `suite/`.
async fn unreachable_with_a_suite() -> Scene {
    let s = scenario()
        .endpoint_at(&format!("http://127.0.0.1:{}/v1", closed_port()))
        .build()
        .await;
    std::fs::create_dir_all(s.root().join("suite")).unwrap();
    std::fs::write(s.root().join("suite/plain.md"), SUITE_PLAIN).unwrap();
    s
}

#[tokio::test]
async fn eval_exits_75_when_the_endpoint_is_unreachable() {
    let s = unreachable_with_a_suite().await;

    let out = with_token(&s, &["eval", "suite"]);

    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("unreachable"));
    assert!(!s.root().join("logs/eval").exists(), "nothing was run");
}

#[tokio::test]
async fn eval_exits_2_on_usage_errors() {
    let s = unreachable_with_a_suite().await;
    std::fs::create_dir_all(s.root().join("logs")).unwrap();

    for (args, says) in [
        (vec!["eval", "missing"], "missing"),
        (vec!["eval", "logs"], "no *.md task files"),
        (
            vec!["eval", "suite", "--set", "limits.max_turnz=3"],
            "[limits] max_turnz: unknown key",
        ),
        (
            vec!["eval", "suite", "--set", "nonsense"],
            "is not KEY=VALUE",
        ),
        (
            vec!["eval", "suite", "--repeat", "0"],
            "0 is not in 1..=1000",
        ),
    ] {
        let out = with_token(&s, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_contains(text(&out.stderr), says);
    }
}

#[tokio::test]
async fn the_shipped_suite_is_valid_and_covers_every_tool() {
    let evals = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("evals");
    let s = offline()
        .config(&format!(
            "[paths]\ninbox = \"{}\"\n[tools.noteworx]\nbase_url = \"http://127.0.0.1:9\"\n",
            evals.display()
        ))
        .build()
        .await;
    let out = with_token(&s, &["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let mut files = 0;
    let mut tools = std::collections::BTreeSet::new();
    for f in std::fs::read_dir(&evals).unwrap() {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        assert!(
            text.contains("[expect]"),
            "every suite task says what success is"
        );
        for t in agent_harness::tools::ToolName::ALL {
            if text.contains(&format!("\"{}\"", t.as_str())) {
                tools.insert(t.as_str());
            }
        }
        files += 1;
    }
    assert!((6..=10).contains(&files), "{files} tasks");
    assert!(tools.contains("webfetch") && tools.contains("noteworx_create_attachment"));
    assert_eq!(
        tools.len(),
        agent_harness::tools::ToolName::ALL.len(),
        "{tools:?}"
    );
}

/// Answers the task whose prompt says "slow" after a delay, others at once.
struct SlowForA;

impl wiremock::Respond for SlowForA {
    fn respond(&self, req: &wiremock::Request) -> wiremock::ResponseTemplate {
        let slow = String::from_utf8_lossy(&req.body).contains("slow");
        let reply = ok(final_answer("done"));
        if slow {
            reply.set_delay(std::time::Duration::from_millis(500))
        } else {
            reply
        }
    }
}

/// Runs end in the order they finish: a run whose records could not be
/// written is counted against its own task, not the one that started
/// first.
#[tokio::test(flavor = "multi_thread")]
async fn a_broken_run_is_counted_against_its_own_task_whatever_finishes_first() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(SlowForA)
        .mount(&server)
        .await;
    let s = scenario().llm(FakeLlm { server }).build().await;
    let suite = s.root().join("suite");
    std::fs::create_dir_all(&suite).unwrap();
    std::fs::write(suite.join("a.md"), "A slow one.").unwrap();
    std::fs::write(suite.join("b.md"), "A quick one.").unwrap();
    // b's records cannot be made: its log folder is a link.
    let logs = s.root().join("evallogs");
    std::fs::create_dir_all(&logs).unwrap();
    std::os::unix::fs::symlink(s.root(), logs.join("b")).unwrap();
    let opts = agent_harness::lab::eval::EvalOptions {
        dir: suite,
        repeat: 1,
        batch: agent_harness::drain::BatchOptions {
            concurrency: 2,
            ..Default::default()
        },
        ..agent_harness::lab::eval::EvalOptions::default()
    };

    let report = agent_harness::lab::eval::run_variant(&s.cfg(), &s.deps(), &opts, &[], &logs)
        .await
        .unwrap();

    let row = |t: &str| report.tasks.iter().find(|r| r.task == t).unwrap().clone();
    assert_eq!(
        (row("a").runs, row("a").passes),
        (1, 1),
        "{:?}",
        report.tasks
    );
    assert_eq!(
        (row("b").runs, row("b").passes),
        (1, 0),
        "{:?}",
        report.tasks
    );
}
