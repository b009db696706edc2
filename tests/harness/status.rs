//! The morning after (docs/operating.md, "The morning after"): `status` says
//! on one screen, from the state beside the inbox and the records alone,
//! whether a run is going and which tasks it runs, the inbox and `failed/`,
//! how the last run ended, today's spend, the recurring slots, and whether
//! notifications and traces get through — with no secret, and never taking
//! the lock from a run.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::common::*;
use agent_harness::outputs::status::Overview;

/// What `status` prints.
fn status_text(s: &Scene) -> String {
    stdout(&bin(s).arg("status").output().unwrap())
}

/// `status --json`, parsed, and the output.
/// `status --json`, read as the program's own `Overview`.
fn status_json(s: &Scene) -> (Overview, std::process::Output) {
    let out = bin(s).args(["status", "--json"]).output().unwrap();
    let seen = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
    (seen, out)
}

#[tokio::test]
async fn status_of_a_new_project_says_nothing_ran_and_needs_no_secret() {
    let s = offline()
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
    let (seen, out) = status_json(&s);
    assert!(seen.running.is_none() && seen.last_run.is_none());
    assert_eq!(seen.inbox.count, 0);
    // The keys docs/operating.md names, and no other.
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "budget",
            "did_not_end",
            "failed",
            "inbox",
            "last_run",
            "notify",
            "now",
            "problems",
            "recurring",
            "running",
            "traces"
        ]
    );
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

    let (seen, out) = status_json(&s);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let last = seen.last_run.as_ref().expect("the last run");
    assert_eq!(
        (
            last.command.as_str(),
            last.exit_code,
            last.succeeded,
            last.failed
        ),
        ("run", 1, 1, 1),
        "{seen:#?}"
    );
    assert_eq!(seen.failed.count, 1);
    assert_eq!(seen.failed.newest.as_ref().unwrap().task, "b-doomed");
    assert_eq!(seen.inbox.count, 2);
    let oldest = seen.inbox.oldest.as_ref().expect("the oldest task");
    assert_eq!(oldest.task, "z-first", "{seen:#?}");
    assert_eq!(oldest.since, Some(arrived));
    assert!(seen.running.is_none());
    // The ledger is the day's (UTC here): past midnight since the run, 0.
    let budget = seen.budget.expect("a [budget] limit is set");
    let spent = if budget.day == ran_on { 160 } else { 0 };
    assert_eq!(budget.tokens, spent, "the one answer's tokens");
    assert_eq!(budget.tokens_per_day, Some(100000));
    let weekly = &seen.recurring[0];
    assert_eq!(
        (weekly.task.as_str(), weekly.due_now),
        ("weekly", false),
        "a new recurring file waits for its first slot: {seen:#?}"
    );
    assert!(weekly.at.is_some(), "{seen:#?}");

    let text = status_text(&s);
    assert_contains(&text, "exit 1: 1 succeeded, 1 failed, 0 left in the inbox");
    assert_contains(&text, "failed/     1 task(s); the newest b-doomed (run ");
    assert_contains(&text, "of 100000 tokens; at most 5000 tokens a run");
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
    let running = loop {
        let (seen, _) = status_json(&s);
        if let Some(running) = seen.running.filter(|r| !r.tasks.is_empty()) {
            break running;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before its task was seen"
        );
        assert!(Instant::now() < deadline, "never seen running");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(running.command.as_deref(), Some("run"));
    assert_eq!(running.pid, child.id());
    assert_eq!(running.tasks[0].task, "slow");
    assert!(running.since.is_some(), "{running:?}");
    let text = status_text(&s);
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
    assert_lacks(stderr(&runs), "without a readable summary.json");
    let runs = bin(&s).args(["runs", "--json"]).output().unwrap();
    let listed: Vec<Value> = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(
        (
            listed[0]["status"].as_str(),
            listed[0]["task"].as_str(),
            listed[0]["run_id"].as_str() == Some(running.tasks[0].run_id.as_str()),
            listed[0]["started_at"].is_string()
        ),
        (Some("running"), Some("slow"), true, true),
        "{listed:#?}"
    );

    gate.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(child.wait().unwrap().success());
    let (seen, _) = status_json(&s);
    assert!(seen.running.is_none(), "{seen:#?}");
    assert_eq!(seen.last_run.map(|l| l.succeeded), Some(1));
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
    let s = offline().build().await;
    let failed = s.root().join("tasks/failed");
    std::fs::create_dir_all(&failed).unwrap();
    std::fs::write(failed.join("20260409T061400Z-older.md"), "x").unwrap();
    std::fs::write(failed.join("20260409T061500Z-2-my x.md"), "x").unwrap();
    std::fs::create_dir_all(s.root().join("logs/my x/20260409T061500Z-2")).unwrap();

    let (seen, out) = status_json(&s);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(seen.failed.count, 2);
    let newest = seen.failed.newest.as_ref().expect("the newest");
    assert_eq!(
        (newest.task.as_str(), newest.run_id.as_str()),
        ("my x", "20260409T061500Z-2"),
        "{seen:#?}"
    );
    let text = status_text(&s);
    assert_contains(
        &text,
        "the newest my x (run 20260409T061500Z-2): agent-harness show 'my x/20260409T061500Z-2'\n",
    );
}

/// A `run` that stops at its config every night (a secret not set) is
/// the last run `status` shows, not the last one that got going.
#[tokio::test]
async fn a_run_stopped_by_its_config_is_the_last_run() {
    let s = offline()
        .config("[tools.noteworx]\nbase_url = \"http://127.0.0.1:9\"\n")
        .build()
        .await;
    let out = bin(&s)
        .env("NOTEWORX_TOKEN", "t0ken")
        .arg("run")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (seen, _) = status_json(&s);
    assert_eq!(seen.last_run.map(|l| l.exit_code), Some(0));

    let out = bin(&s)
        .env_remove("NOTEWORX_TOKEN")
        .arg("run")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    let (seen, _) = status_json(&s);
    let last = seen.last_run.expect("the last run");
    assert_eq!(
        (last.command.as_str(), last.exit_code),
        ("run", 2),
        "{last:?}"
    );
    assert!(
        last.note
            .as_deref()
            .is_some_and(|n| n.starts_with("configuration error: ") && n.contains("NOTEWORX_TOKEN")),
        "{last:?}"
    );
    // A dry run records nothing.
    let out = bin(&s)
        .env("NOTEWORX_TOKEN", "t0ken")
        .args(["run", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(status_json(&s).0.last_run.map(|l| l.exit_code), Some(2));
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
    let s = offline().build().await;
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
    let s = offline().build().await;
    // What a killed `run` leaves: its note, no process, no lock.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let note = json!({"pid": gone.id(), "command": "run", "since": "2026-11-27T03:00:00Z"});
    let lock = s.cfg().paths.state_dir().join(".agent-harness.lock");
    std::fs::write(lock, format!("{note}\n")).unwrap();

    let out = bin(&s).args(["status", "--utc"]).output().unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = format!(
        "running     none; the run started at 2026-11-27T03:00:00Z (pid {}) did not end",
        gone.id()
    );
    assert!(stdout(&out).contains(&said), "{}", stdout(&out));
    let (seen, _) = status_json(&s);
    assert!(seen.running.is_none());
    assert_eq!(seen.did_not_end.map(|h| h.command).as_deref(), Some("run"));

    // The next run takes the lock over, and as it lets go the note goes.
    let _ = bin(&s).arg("run").output().unwrap();
    assert_contains(status_text(&s), "running     no run holds the lock");
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

    let (seen, _) = status_json(&s);
    assert!(seen.notify.configured);
    let sent = seen.notify.record.expect("a record of the notifications");
    assert_eq!(sent.failures, 2, "the start and the end: {sent:?}");
    let last_error = sent.last_error.unwrap_or_default();
    assert!(last_error.contains("127.0.0.1"), "{last_error}");
    assert!(
        !last_error.contains("check"),
        "a URL's path is never kept: {last_error}"
    );
    assert_eq!(seen.traces.record.map(|r| r.failures), Some(1));
    let text = status_text(&s);
    assert_contains(
        &text,
        "notify      2 failure(s) and none got through yet; the last at ",
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
    let (seen, _) = status_json(&s);
    let sent = seen.notify.record.expect("a record of the notifications");
    assert_eq!(sent.failures, 0, "{sent:?}");
    assert!(sent.last_success.is_some());
    assert!(!seen.traces.configured);
    assert_eq!(
        seen.traces.record.map(|r| r.failures),
        Some(1),
        "kept until a trace gets through"
    );
}

#[tokio::test]
async fn status_of_an_inbox_it_cannot_read_never_says_empty() {
    let s = offline().build().await;
    std::fs::remove_dir_all(s.root().join("tasks/inbox")).unwrap();

    let out = bin(&s).arg("status").output().unwrap();

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_contains(
        stdout(&out),
        "inbox       not read (see the line on stderr)",
    );
    assert!(stderr(&out).contains("[paths] inbox"), "{}", stderr(&out));
}

#[tokio::test]
async fn status_of_a_failed_folder_it_cannot_read_says_so_to_a_monitor() {
    let s = offline().build().await;
    std::fs::remove_dir_all(s.root().join("tasks/inbox")).unwrap();
    // Nor failed/: a monitor reading the JSON sees it was not read.
    let failed = s.root().join("tasks/failed");
    std::fs::remove_dir_all(&failed).ok();
    std::fs::write(&failed, "a file where the folder goes").unwrap();
    let out = bin(&s).arg("status").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_contains(
        stdout(&out),
        "failed/     not read (see the line on stderr)",
    );
    let (seen, _) = status_json(&s);
    assert!(!seen.failed.read && !seen.inbox.read, "{seen:#?}");
}
