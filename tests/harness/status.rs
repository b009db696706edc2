//! The morning after (docs/operating.md, "The morning after"): `status` says
//! on one screen, from the state beside the inbox and the records alone,
//! whether a run is going and which tasks it runs, the inbox and `failed/`,
//! how the last run ended, today's spend, the recurring slots, and whether
//! notifications and traces get through — with no secret, and never taking
//! the lock from a run.

use std::time::{Duration, Instant};

use serde_json::Value;
use wiremock::ResponseTemplate;

use crate::common::*;

/// `status --json`, parsed, and the output.
fn status_json(s: &Scene) -> (Value, std::process::Output) {
    let out = bin(s).args(["status", "--json"]).output().unwrap();
    let value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
    (value, out)
}

#[tokio::test]
async fn status_of_a_new_project_says_nothing_ran_and_needs_no_secret() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .config("[tools.noteworx]\nbase_url = \"http://127.0.0.1:9\"\n")
        .build()
        .await;

    let out = bin(&s)
        .env_remove("NOTEWORX_TOKEN")
        .arg("status")
        .output()
        .unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for line in [
        "running     no run holds the lock",
        "inbox       empty",
        "failed/     empty",
        "last run    none recorded beside the inbox",
        "budget      no [budget] limits",
        "recurring   none",
        "notify      [notify] is not set",
        "traces      [traces] is not set",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    let (json, _) = status_json(&s);
    assert_eq!(json["running"], Value::Null);
    assert_eq!(json["last_run"], Value::Null);
    assert_eq!(json["inbox"]["count"], 0);
    assert!(
        !s.root().join("tasks/.agent-harness.lock").exists(),
        "a look takes no lock and makes no file"
    );
}

#[tokio::test]
async fn status_after_a_run_says_how_it_ended_what_failed_and_what_waits() {
    let s = scenario()
        .script(vec![
            ok(final_answer("fine")),
            ResponseTemplate::new(400)
                .set_body_json(serde_json::json!({"error": {"message": "bad"}})),
        ])
        .task("a-fine", "Answer.")
        .task("b-doomed", "Answer.")
        .config("[budget]\ntokens_per_day = 100000\ntokens_per_run = 5000\n")
        .recurring("weekly", "+++\nschedule = \"@weekly\"\n+++\nScan.")
        .build()
        .await;
    let run = run_bin(&s, &["run"]).await;
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    std::thread::sleep(Duration::from_millis(20));
    s.task("later", "Answer.");

    let (json, out) = status_json(&s);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let last = &json["last_run"];
    assert_eq!(
        (
            last["command"].as_str(),
            last["exit_code"].as_u64(),
            last["succeeded"].as_u64(),
            last["failed"].as_u64()
        ),
        (Some("run"), Some(1), Some(1), Some(1)),
        "{json:#}"
    );
    assert_eq!(json["failed"]["count"], 1);
    assert_eq!(json["failed"]["newest"]["task"], "b-doomed");
    assert_eq!(json["inbox"]["count"], 1);
    assert_eq!(json["inbox"]["oldest"]["task"], "later");
    assert_eq!(json["running"], Value::Null);
    assert_eq!(json["budget"]["tokens"], 160, "the one answer's tokens");
    assert_eq!(json["budget"]["tokens_per_day"], 100000);
    let weekly = &json["recurring"][0];
    assert_eq!(
        (weekly["task"].as_str(), weekly["due_now"].as_bool()),
        (Some("weekly"), Some(false)),
        "a new recurring file waits for its first slot: {json:#}"
    );
    assert!(weekly["at"].is_string(), "{json:#}");

    let text = stdout(&bin(&s).arg("status").output().unwrap());
    assert!(
        text.contains("exit 1: 1 succeeded, 1 failed, 0 left in the inbox"),
        "{text}"
    );
    assert!(
        text.contains("failed/     1 task(s); the newest b-doomed (run "),
        "{text}"
    );
    assert!(
        text.contains("of 100000 tokens; at most 5000 tokens a run"),
        "{text}"
    );
    assert!(text.contains("weekly: next "), "{text}");
}

/// A run going now holds the lock: `status` names it, since when and the
/// task it runs, and `runs` lists that task's folder as running — all
/// without taking the lock from it.
#[tokio::test(flavor = "multi_thread")]
async fn status_and_runs_name_the_run_going_now_and_its_task() {
    let s = scenario()
        .script(vec![
            ok(final_answer("slowly")).set_delay(Duration::from_secs(4)),
        ])
        .task("slow", "Answer.")
        .build()
        .await;
    let mut child = spawn_run(&s, std::process::Stdio::null());

    let deadline = Instant::now() + Duration::from_secs(30);
    let json = loop {
        let (json, _) = status_json(&s);
        if json["running"]["tasks"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
        {
            break json;
        }
        assert!(Instant::now() < deadline, "never seen running: {json:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let running = &json["running"];
    assert_eq!(running["command"], "run");
    assert_eq!(running["pid"].as_u64(), Some(u64::from(child.id())));
    assert_eq!(running["tasks"][0]["task"], "slow");
    assert!(running["since"].is_string(), "{json:#}");
    let text = stdout(&bin(&s).arg("status").output().unwrap());
    assert!(
        text.lines()
            .next()
            .unwrap()
            .starts_with("running     run since ")
            && text.contains(": slow (2"),
        "{text}"
    );
    let runs = bin(&s).arg("runs").output().unwrap();
    let table = stdout(&runs);
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(
        row.starts_with("slow") && row.contains("running"),
        "{table}"
    );
    assert!(
        !stderr(&runs).contains("without a readable summary.json"),
        "{}",
        stderr(&runs)
    );

    assert!(child.wait().unwrap().success());
    let (json, _) = status_json(&s);
    assert_eq!(json["running"], Value::Null, "{json:#}");
    assert_eq!(json["last_run"]["succeeded"], 1);
    assert_eq!(s.done().len(), 1, "the looks took no lock from the run");
}

#[tokio::test]
async fn a_lock_held_without_a_note_is_said_as_held_by_someone() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .build()
        .await;
    let _held = agent_harness::state::RunLock::try_acquire(&s.cfg().paths.state_dir())
        .unwrap()
        .unwrap();

    let out = bin(&s).arg("status").output().unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out)
            .contains("running     a process holds the lock (it did not say what or since when)"),
        "{}",
        stdout(&out)
    );
}

/// A notification or a trace that fails is a warning, never the exit
/// code; `status` is where it shows the morning after, until one gets
/// through again.
#[tokio::test(flavor = "multi_thread")]
async fn status_counts_notification_and_trace_failures_since_the_last_success() {
    let down = format!("http://127.0.0.1:{}", closed_port());
    let channels = format!(
        "[notify]\nping_url = \"{down}/ping/check\"\n[traces]\nendpoint = \"{down}/v1/traces\"\nflush_secs = 1\n"
    );
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task("t", "Answer.")
        .config(&channels)
        .build()
        .await;
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let (json, _) = status_json(&s);
    let notify = &json["notify"];
    assert_eq!(notify["configured"], true);
    assert_eq!(
        notify["record"]["failures"], 2,
        "the start and the end: {json:#}"
    );
    assert!(
        notify["record"]["last_error"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1")
    );
    assert!(
        !notify["record"]["last_error"]
            .as_str()
            .unwrap()
            .contains("check"),
        "a URL's path is never kept: {json:#}"
    );
    assert_eq!(json["traces"]["record"]["failures"], 1, "{json:#}");
    let text = stdout(&bin(&s).arg("status").output().unwrap());
    assert!(
        text.contains("notify      2 failure(s) and none got through yet; the last at "),
        "{text}"
    );

    // A run whose notifications get through clears the count.
    let hc = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200))
        .mount(&hc)
        .await;
    s.task("u", "Answer.");
    let _llm = s
        .then_replies(
            vec![final_answer("done")],
            &format!("[notify]\nping_url = \"{}/ping/check\"\n", hc.uri()),
        )
        .await;
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (json, _) = status_json(&s);
    assert_eq!(json["notify"]["record"]["failures"], 0, "{json:#}");
    assert!(json["notify"]["record"]["last_success"].is_string());
    assert_eq!(json["traces"]["configured"], false);
    assert_eq!(
        json["traces"]["record"]["failures"], 1,
        "kept until a trace gets through"
    );
}
