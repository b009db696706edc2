//! An eval that decides (docs/resume-replay-eval.md, "Eval"): pass^k, the
//! paired comparison of a two-value matrix, the `--min-pass-rate` gate, why
//! rows failed, and the eval in the report.

use std::process::Output;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::common::*;
use agent_harness::records::Report;

/// Answers "right" at a temperature under 0.5 and "wrong" above it; at
/// exactly 0.5, right, wrong, wrong, right, … (with two tasks run in
/// order, each passes one run of two: a flaky arm).
struct ByTemperature(std::sync::atomic::AtomicU32);

impl Respond for ByTemperature {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or_default();
        let t = body["temperature"].as_f64().unwrap_or(1.0);
        let right = if t == 0.5 {
            matches!(
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 4,
                0 | 3
            )
        } else {
            t < 0.5
        };
        ok(final_answer(if right { "right" } else { "wrong" }))
    }
}

async fn project() -> Scene {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ByTemperature(Default::default()))
        .mount(&server)
        .await;
    list_models(&server).await;
    let s = scenario().llm(FakeLlm { server }).build().await;
    let suite = s.root().join("suite");
    std::fs::create_dir_all(&suite).unwrap();
    for name in ["one", "two"] {
        std::fs::write(
            suite.join(format!("{name}.md")),
            "+++\ntools = []\n[expect]\nanswer_matches = \"^right$\"\n+++\nSay right.\n",
        )
        .unwrap();
    }
    s
}

fn eval(project: &Project, args: &[&str]) -> Output {
    bin(project)
        .arg("eval")
        .arg("suite")
        .args(args)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap()
}

/// `eval --json`'s report, read as the program's own type.
fn report_of(out: &Output) -> Report {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_arm_that_always_passes_is_called_better_with_its_exact_p_value() {
    let s = project().await;
    let out = eval(
        &s,
        &[
            "--repeat",
            "3",
            "--matrix",
            "model.temperature=0.9,0.1",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let report = report_of(&out);
    assert_eq!(
        serde_json::to_value(&report.comparison).unwrap(),
        json!({"key": "model.temperature", "a": "0.9", "b": "0.1", "pairs": 6, "a_only": 0, "b_only": 6,
               "difference": -1.0, "ci_low": -1.0, "ci_high": -0.448,
               "p_value": 0.0313, "verdict": "model.temperature=0.1 better"})
    );
    assert_eq!(report.variants[0].totals.pass_hat_k, 0.0);
    assert_eq!(report.variants[1].totals.pass_hat_k, 1.0);
    assert_eq!(
        report.variants[0].tasks[0].top_failure.as_deref(),
        Some("answer_matches")
    );

    // The table says the same, the verdict on a line of its own.
    let out = eval(
        &s,
        &["--repeat", "3", "--matrix", "model.temperature=0.9,0.1"],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_contains(
        &text,
        "A passed and B did not: 0; B passed and A did not: 6",
    );
    assert_contains(&text, "difference in pass rate (A − B): -1.000, 95% CI");
    assert!(text.contains("exact McNemar p = 0.0313"), "{text}");
    assert!(
        text.lines().any(|l| l == "model.temperature=0.1 better"),
        "{text}"
    );
    let header = text.lines().nth(1).unwrap();
    assert!(
        header.contains("PASS^K") && header.contains("MOSTLY FAILS ON"),
        "{header}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("one")
            && l.contains("model.temperature=0.9")
            && l.trim_end().ends_with("answer_matches")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn identical_arms_find_no_difference() {
    let s = project().await;
    let out = eval(
        &s,
        &[
            "--repeat",
            "2",
            "--matrix",
            "model.temperature=0.1,0.2",
            "--json",
        ],
    );
    let c = report_of(&out).comparison.expect("a comparison");
    assert_eq!((c.difference, c.p_value), (0.0, 1.0));
    assert_eq!(c.verdict, "no difference found at 95 %");
}

/// Half the runs pass: no task passes all its runs, pass^k is 0.
#[tokio::test(flavor = "multi_thread")]
async fn a_flaky_arm_is_not_reliable() {
    let s = project().await;
    let out = eval(
        &s,
        &["--repeat", "2", "--set", "model.temperature=0.5", "--json"],
    );
    let report = report_of(&out);
    let v = &report.variants[0];
    assert_eq!((v.totals.pass_rate, v.totals.pass_hat_k), (0.5, 0.0));
    assert!(!v.tasks.is_empty(), "{v:?}");
    assert!(v.tasks.iter().all(|t| t.pass_hat_k == 0), "{v:?}");
    assert!(report.comparison.is_none());
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json.get("comparison").is_none(), "left out, not null");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gate_exits_1_below_the_pass_rate_and_0_at_or_above_it() {
    let s = project().await;
    let below = eval(
        &s,
        &[
            "--repeat",
            "1",
            "--matrix",
            "model.temperature=0.1,0.9",
            "--min-pass-rate",
            "0.8",
        ],
    );
    assert_eq!(below.status.code(), Some(1));
    let err = String::from_utf8_lossy(&below.stderr).into_owned();
    assert_contains(
        &err,
        "pass rate 0/2 = 0.0000 is below --min-pass-rate 0.8 (model.temperature=0.9)",
    );
    assert!(
        !err.contains("model.temperature=0.1)"),
        "the passing arm is not named: {err}"
    );
    let at = eval(
        &s,
        &[
            "--repeat",
            "1",
            "--set",
            "model.temperature=0.1",
            "--min-pass-rate",
            "1",
        ],
    );
    assert_eq!(
        at.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&at.stderr)
    );
    let none = eval(
        &s,
        &[
            "--repeat",
            "1",
            "--set",
            "model.temperature=0.9",
            "--min-pass-rate",
            "0",
        ],
    );
    assert_eq!(none.status.code(), Some(0));
    for bad in ["1.5", "-0.1", "nan", "eighty"] {
        let out = eval(&s, &["--min-pass-rate", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/test: headless Chromium (Debian chromium)"]
async fn the_report_shows_the_eval_its_runs_and_why_runs_failed() {
    let s = project().await;
    let out = eval(
        &s,
        &[
            "--repeat",
            "2",
            "--matrix",
            "model.temperature=0.9,0.1",
            "--json",
        ],
    );
    let eval_id = report_of(&out).eval_id;
    // One inbox run that misses its expectation, for the index.
    s.task(
        "t",
        "+++\ntools = []\ntemperature = 0.9\n[expect]\nanswer_matches = \"^right$\"\n+++\nSay right.\n",
    );
    let bin = |args: &[&str]| bin(&s).args(args).output().unwrap();
    assert_eq!(bin(&["run"]).status.code(), Some(1));
    let made = bin(&["report", "--out", "report"]);
    let said = String::from_utf8_lossy(&made.stdout).into_owned();
    assert!(
        said.starts_with("report of 1 run(s) and 1 eval(s): file:///"),
        "{said}"
    );

    let work = tempfile::tempdir().unwrap();
    let out_dir = s.root().join("report");
    let (index, requests) = crate::report::render(&out_dir.join("index.html"), work.path());
    assert!(requests.is_empty(), "{requests:?}");
    assert_contains(
        &index,
        "1 run(s), newest first: 0 succeeded, 1 failed, 0 interrupted",
    );
    assert!(
        index.contains("missed expectations: answer_matches"),
        "the failed run's error: {index}"
    );
    let page = format!("{eval_id}.html");
    assert!(index.contains(&format!("href=\"evals/{page}\"")), "{index}");
    // Four pairs all one way are not enough at 95 % (p = 2/16).
    assert!(
        index.contains("0/4 (0.000) · 4/4 (1.000)")
            && index.contains("no difference found at 95 %"),
        "{index}"
    );

    let (eval_page, requests) =
        crate::report::render(&out_dir.join("evals").join(&page), work.path());
    assert!(requests.is_empty(), "{requests:?}");
    assert!(
        eval_page.contains("A against B") && eval_page.contains("exact McNemar p = 0.1250"),
        "{eval_page}"
    );
    assert!(
        eval_page.contains("pass^k") && eval_page.contains("answer_matches"),
        "{eval_page}"
    );
    let links: Vec<&str> = eval_page
        .split("href=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .filter(|l| l.starts_with(&format!("{eval_id}-v")))
        .collect();
    assert_eq!(
        links.len(),
        8,
        "2 tasks × 2 repeats × 2 variants: {links:?}"
    );
    for l in links {
        let run = std::fs::read_to_string(out_dir.join("evals").join(l)).unwrap();
        assert!(run.contains("Say right."), "{l}");
    }
}

#[tokio::test]
async fn planted_evals_are_shown_as_unreadable_never_followed_or_crashed_on() {
    let s = offline().build().await;
    let evals = s.root().join("logs/eval");
    for (id, body) in [
        ("20261101T000000Z", "[".repeat(300_000)),
        ("20261102T000000Z", "{\"eval_id\": 1}".to_string()),
        ("20261103T000000Z", " ".repeat(9 << 20)),
    ] {
        std::fs::create_dir_all(evals.join(id)).unwrap();
        std::fs::write(evals.join(id).join("eval.json"), body).unwrap();
    }
    // A linked eval.json and a linked variant folder are not followed.
    let linked = evals.join("20261104T000000Z");
    std::fs::create_dir_all(&linked).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", linked.join("eval.json")).unwrap();
    std::os::unix::fs::symlink("/etc", linked.join("v1")).unwrap();
    std::os::unix::fs::symlink("/etc", evals.join("20261105T000000Z")).unwrap();

    let made = bin(&s)
        .args(["report", "--out", "report"])
        .output()
        .unwrap();
    assert_eq!(made.status.code(), Some(0));
    let said = String::from_utf8_lossy(&made.stdout).into_owned();
    assert!(
        said.starts_with("report of 0 run(s) and 4 eval(s)"),
        "{said}"
    );
    let err = String::from_utf8_lossy(&made.stderr).into_owned();
    assert_eq!(err.matches("eval.json").count(), 4, "one line each: {err}");
    let index = std::fs::read_to_string(s.root().join("report/index.html")).unwrap();
    assert_eq!(index.matches("(eval.json unreadable)").count(), 4);
    let page =
        std::fs::read_to_string(s.root().join("report/evals/20261104T000000Z.html")).unwrap();
    assert!(
        page.contains("could not be read") && !page.contains("root:"),
        "{page}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_matrix_value_never_reaches_the_comparison() {
    let s = project().await;
    let out = eval(
        &s,
        &[
            "--repeat",
            "1",
            "--matrix",
            "model.extra.api_key=sekrit-aaaa,sekrit-bbbb",
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = report_of(&out);
    let c = report.comparison.as_ref().expect("a comparison");
    assert_eq!((c.a.as_str(), c.b.as_str()), ("***", "***"));
    let eval_json = std::fs::read_to_string(
        s.root()
            .join("logs/eval")
            .join(&report.eval_id)
            .join("eval.json"),
    )
    .unwrap();
    assert!(
        !eval_json.contains("sekrit") && !String::from_utf8_lossy(&out.stdout).contains("sekrit")
    );
}
