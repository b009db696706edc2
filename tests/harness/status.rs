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
    let ran_on = chrono::Utc::now().date_naive();
    let run = run_bin(&s, &["run"]).await;
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    // The oldest task is the one that arrived first, whatever its mtime
    // says: a move or `cp -p` keeps an old one.
    let first = s.task("z-first", "Answer.");
    set_mtime(&first, "2030-01-01T00:00:00Z");
    let arrived = ctime(&first);
    let probe = s.root().join("probe");
    while {
        std::fs::write(&probe, "").unwrap();
        ctime(&probe) <= arrived
    } {}
    let later = s.task("a-later", "Answer.");
    set_mtime(&later, "2020-01-01T00:00:00Z");

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
    assert_eq!(json["inbox"]["count"], 2);
    assert_eq!(json["inbox"]["oldest"]["task"], "z-first", "{json:#}");
    let since: chrono::DateTime<chrono::Utc> = json["inbox"]["oldest"]["since"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(since, arrived);
    assert_eq!(json["running"], Value::Null);
    // The ledger is the day's (UTC here): past midnight since the run, 0.
    let today = json["budget"]["day"].as_str().unwrap().to_string();
    let spent = if today == ran_on.to_string() { 160 } else { 0 };
    assert_eq!(json["budget"]["tokens"], spent, "the one answer's tokens");
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
/// without taking the lock from it. The model's reply waits behind a gate
/// the test opens once it has looked.
#[tokio::test(flavor = "multi_thread")]
async fn status_and_runs_name_the_run_going_now_and_its_task() {
    let (llm, gate) = FakeLlm::gated(ok(final_answer("slowly"))).await;
    let s = scenario().llm(llm).task("slow", "Answer.").build().await;
    // Looked at from the moment it starts: a look never makes the run
    // find its lock taken.
    let mut child = spawn_run(&s, std::process::Stdio::null());

    let deadline = Instant::now() + Duration::from_secs(60);
    let json = loop {
        let (json, _) = status_json(&s);
        if json["running"]["tasks"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
        {
            break json;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before its task was seen: {json:#}"
        );
        assert!(Instant::now() < deadline, "never seen running: {json:#}");
        std::thread::sleep(Duration::from_millis(20));
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
    let runs = bin(&s).args(["runs", "--json"]).output().unwrap();
    let listed: Vec<Value> = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(
        (
            listed[0]["status"].as_str(),
            listed[0]["task"].as_str(),
            listed[0]["run_id"].as_str() == running["tasks"][0]["run_id"].as_str(),
            listed[0]["started_at"].is_string()
        ),
        (Some("running"), Some("slow"), true, true),
        "{listed:#?}"
    );

    gate.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(child.wait().unwrap().success());
    let (json, _) = status_json(&s);
    assert_eq!(json["running"], Value::Null, "{json:#}");
    assert_eq!(json["last_run"]["succeeded"], 1);
    assert_eq!(s.done().len(), 1, "the looks took no lock from the run");
    let runs = bin(&s).args(["runs", "--json"]).output().unwrap();
    let listed: Vec<Value> = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(listed[0]["status"], "succeeded", "{listed:#?}");
}

/// `failed/`'s newest is read as `requeue` reads it (`…Z-2-x.md` is run
/// `…Z-2` of `x` when that run folder exists), and the `show` to run is
/// one shell word.
#[tokio::test]
async fn status_names_the_newest_failed_task_as_requeue_reads_it() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .build()
        .await;
    let failed = s.root().join("tasks/failed");
    std::fs::create_dir_all(&failed).unwrap();
    std::fs::write(failed.join("20260409T061400Z-older.md"), "x").unwrap();
    std::fs::write(failed.join("20260409T061500Z-2-my x.md"), "x").unwrap();
    std::fs::create_dir_all(s.root().join("logs/my x/20260409T061500Z-2")).unwrap();

    let (json, out) = status_json(&s);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json["failed"]["count"], 2);
    assert_eq!(
        (
            json["failed"]["newest"]["task"].as_str(),
            json["failed"]["newest"]["run_id"].as_str()
        ),
        (Some("my x"), Some("20260409T061500Z-2")),
        "{json:#}"
    );
    let text = stdout(&bin(&s).arg("status").output().unwrap());
    assert!(
        text.contains("the newest my x (run 20260409T061500Z-2): agent-harness show 'my x/20260409T061500Z-2'\n"),
        "{text}"
    );
}

/// A `run` that stops at its config every night (a secret not set) is
/// the last run `status` shows, not the last one that got going.
#[tokio::test]
async fn a_run_stopped_by_its_config_is_the_last_run() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .config("[tools.noteworx]\nbase_url = \"http://127.0.0.1:9\"\n")
        .build()
        .await;
    let out = bin(&s)
        .env("NOTEWORX_TOKEN", "t0ken")
        .arg("run")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (json, _) = status_json(&s);
    assert_eq!(json["last_run"]["exit_code"], 0, "{json:#}");

    let out = bin(&s)
        .env_remove("NOTEWORX_TOKEN")
        .arg("run")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    let (json, _) = status_json(&s);
    let last = &json["last_run"];
    assert_eq!(
        (last["command"].as_str(), last["exit_code"].as_u64()),
        (Some("run"), Some(2)),
        "{json:#}"
    );
    assert!(
        last["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("configuration error: ") && n.contains("NOTEWORX_TOKEN")),
        "{json:#}"
    );
    // A dry run records nothing.
    let out = bin(&s)
        .env("NOTEWORX_TOKEN", "t0ken")
        .args(["run", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(status_json(&s).0["last_run"]["exit_code"], 2);
}

/// The file's status change time (when it arrived) and a set mtime.
fn ctime(path: &std::path::Path) -> chrono::DateTime<chrono::Utc> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    chrono::DateTime::from_timestamp(m.ctime(), m.ctime_nsec() as u32).unwrap()
}

fn set_mtime(path: &std::path::Path, at: &str) {
    let at: chrono::DateTime<chrono::Utc> = at.parse().unwrap();
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(at.into())
        .unwrap();
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
    let said = format!(
        "running     process {} holds the lock (it did not say what or since when)",
        std::process::id()
    );
    assert!(stdout(&out).contains(&said), "{}", stdout(&out));
}

/// A run killed outright (SIGKILL, out of memory) never empties the lock's
/// note as it lets go: the kernel drops the lock, the note stays. `status`
/// says that run did not end, where it would otherwise say nothing runs.
#[tokio::test]
async fn a_run_that_never_let_go_of_the_lock_is_said_not_to_have_ended() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .build()
        .await;
    // What a killed `run` leaves: its note, no process, no lock.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let note =
        serde_json::json!({"pid": gone.id(), "command": "run", "since": "2026-11-27T03:00:00Z"});
    std::fs::write(
        s.cfg().paths.state_dir().join(".agent-harness.lock"),
        format!("{note}\n"),
    )
    .unwrap();

    let out = bin(&s).args(["status", "--utc"]).output().unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = format!(
        "running     none; the run started at 2026-11-27T03:00:00Z (pid {}) did not end",
        gone.id()
    );
    assert!(stdout(&out).contains(&said), "{}", stdout(&out));
    let (json, _) = status_json(&s);
    assert_eq!(json["running"], Value::Null);
    assert_eq!(json["did_not_end"]["command"], "run");

    // The next run takes the lock over, and as it lets go the note goes.
    let _ = bin(&s).arg("run").output().unwrap();
    let out = bin(&s).arg("status").output().unwrap();
    assert!(
        stdout(&out).contains("running     no run holds the lock"),
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

#[tokio::test]
async fn status_of_an_inbox_it_cannot_read_never_says_empty() {
    let s = scenario()
        .endpoint_at("http://127.0.0.1:9/v1")
        .build()
        .await;
    std::fs::remove_dir_all(s.root().join("tasks/inbox")).unwrap();

    let out = bin(&s).arg("status").output().unwrap();

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("inbox       not read (see the line on stderr)"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("[paths] inbox"), "{}", stderr(&out));

    // Nor failed/: a monitor reading the JSON sees it was not read.
    let failed = s.root().join("tasks/failed");
    std::fs::remove_dir_all(&failed).ok();
    std::fs::write(&failed, "a file where the folder goes").unwrap();
    let out = bin(&s).arg("status").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("failed/     not read (see the line on stderr)"),
        "{}",
        stdout(&out)
    );
    let out = bin(&s).args(["status", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["failed"]["read"], false, "{json:#}");
    assert_eq!(json["inbox"]["read"], false, "{json:#}");
}
