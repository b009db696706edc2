//! The ground beside the inbox is shared (docs/operating.md, "The folder beside
//! the inbox"): another local user may plant links, FIFOs, devices and deep
//! trees where the harness keeps its state, moves its files and prunes. Nothing
//! planted is written through, read from, waited on or followed, and a run
//! still ends as its tasks say.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent_harness::app::exit::Exit;
use agent_harness::base::folder::Folder;
use agent_harness::records::Status;
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::common::*;

/// A file outside the project that a planted link points at.
struct Victim {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Victim {
    fn new() -> Victim {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("victim.txt");
        std::fs::write(&path, "the victim's own text").unwrap();
        Victim { _dir: dir, path }
    }

    fn untouched(&self) {
        assert_eq!(
            std::fs::read_to_string(&self.path).unwrap(),
            "the victim's own text",
            "nothing was written through a planted link"
        );
    }

    /// A link at `at` to the victim.
    fn link_at(&self, at: impl AsRef<Path>) {
        symlink(&self.path, at).unwrap();
    }
}

/// Where the attempt counts are kept, in the project.
const ATTEMPT_STATE: &str = "tasks/.agent-harness-attempts.json";

/// Task `t`, "Answer.", that the model answers "done".
fn answered_task() -> Scenario {
    scenario().answers(&["done"]).task("t", "Answer.")
}

/// The error that stops a run of the inbox before any task, with its causes.
async fn refusal(s: &Scene) -> String {
    let e = agent_harness::app::run_inbox(&s.cfg(), &s.deps(), &Default::default())
        .await
        .unwrap_err();
    format!("{e:#}")
}

/// A folder `name` on /dev/shm, a file system other than the project's
/// (and the temporary folder holding it).
fn folder_on_another_file_system(name: &str) -> (tempfile::TempDir, PathBuf) {
    let shm = Path::new("/dev/shm");
    assert!(
        shm.is_dir(),
        "this test needs /dev/shm (tmpfs) as a second file system"
    );
    let other = tempfile::tempdir_in(shm).unwrap();
    let folder = other.path().join(name);
    std::fs::create_dir_all(&folder).unwrap();
    (other, folder)
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path).unwrap()
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
}

#[tokio::test]
async fn links_planted_at_the_attempt_state_and_its_old_temporary_name_are_never_written_through() {
    let s = answered_task().build().await;
    let victim = Victim::new();
    let state = s.root().join(ATTEMPT_STATE);
    victim.link_at(&state);
    victim.link_at(s.root().join("tasks/.agent-harness-attempts.json.tmp"));

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
    assert_eq!(s.summary("t").status, Status::Succeeded);
    victim.untouched();
    assert!(
        !state.exists() || !std::fs::symlink_metadata(&state).unwrap().is_symlink(),
        "the planted link was replaced or removed, never followed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_or_a_device_at_the_attempt_state_is_a_warning_and_nothing_waits_on_it() {
    for plant in ["fifo", "dev-zero"] {
        let s = answered_task().build().await;
        match plant {
            "fifo" => mkfifo(&s.root().join(ATTEMPT_STATE)),
            _ => symlink("/dev/zero", s.root().join(ATTEMPT_STATE)).unwrap(),
        }

        let out = run_bin(&s, &["run"]).await;

        // Nothing waited on it: it was refused by its type, unread (and a
        // run that blocked on it is killed by `bin`'s 120 s limit, no code).
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{plant}: {err}");
        assert!(err.contains("attempt counts unreadable"), "{plant}: {err}");
        assert!(err.contains("not a regular file"), "{plant}: {err}");
        assert_eq!(s.done().len(), 1, "{plant}");
        // The next run is not told "another run holds the lock".
        s.task("u", "Answer.");
        let next = run_bin(&s, &["run"]).await;
        assert_eq!(next.status.code(), Some(0), "{plant}: {}", stderr(&next));
        assert_eq!(s.done().len(), 2, "{plant}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_planted_at_the_lock_creates_nothing_and_stops_the_run_naming_it() {
    let s = answered_task().build().await;
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("made-through-the-link");
    symlink(&target, s.root().join("tasks/.agent-harness.lock")).unwrap();

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(".agent-harness.lock") && stderr(&out).contains("symbolic link"),
        "{}",
        stderr(&out)
    );
    assert!(!target.exists(), "no file was created through the link");
    assert_eq!(s.inbox(), ["t.md"], "every task as it was");
    assert!(s.requests().await.is_empty());
}

#[tokio::test]
async fn a_move_to_another_file_system_writes_through_no_planted_link() {
    let (_other, done) = folder_on_another_file_system("done");
    let s = answered_task()
        .config(&format!("[paths]\ndone = \"{}\"", done.display()))
        .build()
        .await;
    let victim = Victim::new();
    // Where the move's temporary file used to be: a name anyone could guess.
    victim.link_at(done.join(format!(".agent-harness-move-{RUN_ID}.tmp")));
    victim.link_at(done.join(".agent-harness-move.tmp"));

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
    assert_eq!(read(done.join(format!("{RUN_ID}-t.md"))), "Answer.");
    assert!(s.inbox().is_empty());
    victim.untouched();
}

#[tokio::test]
async fn a_linked_done_folder_beside_the_inbox_is_refused_naming_its_key() {
    let s = answered_task().build().await;
    let elsewhere = tempfile::tempdir().unwrap();
    symlink(elsewhere.path(), s.root().join("tasks/done")).unwrap();

    let e = refusal(&s).await;

    assert!(
        e.contains("[paths] done") && e.contains("symbolic link"),
        "{e}"
    );
    assert_eq!(s.inbox(), ["t.md"]);
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

/// A tree 100,000 folders deep in `dir` (made here, and dropped from the
/// harness's folder handles).
fn plant_a_tree_too_deep(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let mut at = Folder::open(dir).unwrap();
    for _ in 0..100_000 {
        at = at.create_sub("d", 0o700).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tree_too_deep_to_remove_is_reported_and_the_run_still_writes_its_metrics() {
    let s = answered_task()
        .config("[retention]\nkeep_days = 1\nkeep_runs = 0")
        .build()
        .await;
    // An old run folder holding a tree 100,000 folders deep.
    let logs = s.root().join("logs/old-task");
    plant_a_tree_too_deep(&logs.join("20200101T000000Z"));

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(stderr(&out), "more than 64 folders deep");
    let metrics = std::fs::read_to_string(s.root().join("logs/agent-harness.prom")).unwrap();
    assert_contains(&metrics, "agent_harness_last_run_exit_code 0\n");
    assert_eq!(s.done().len(), 1);
    // `prune` says the same and exits 1; nothing crashed either time.
    let out = run_bin(&s, &["prune"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_contains(stderr(&out), "more than 64 folders deep");
    let rm = Command::new("rm").arg("-rf").arg(&logs).status();
    assert!(rm.unwrap().success());
}

/// A run folder as a killed run leaves it: `start.json` and the first
/// reply (a final answer) recorded, no summary. Made by a real run of
/// another task with the same text, then copied.
async fn planted_run(project: &Project, task: &str, run_id: &str, body: &str) {
    let other = scenario()
        .replies(vec![final_answer("the planted answer")])
        .task("other", body)
        .ran()
        .await;
    let from = other.run_dir("other");
    let to = project.root().join("logs").join(task).join(run_id);
    std::fs::create_dir_all(&to).unwrap();
    for file in ["start.json", "conversation.jsonl", "run.log", "task.md"] {
        if from.join(file).exists() {
            std::fs::copy(from.join(file), to.join(file)).unwrap();
        }
    }
}

#[tokio::test]
async fn a_planted_run_folder_is_never_resumed_from_and_a_new_task_starts_fresh() {
    let scene = scenario()
        .replies(vec![final_answer("the real answer")])
        .task("t", "What is the answer?")
        .build()
        .await;
    planted_run(&scene, "t", "20260409T061400Z", "What is the answer?").await;

    scene.run().await;

    let s = scene.summary("t");
    assert_eq!(s.final_answer.as_deref(), Some("the real answer"));
    assert_eq!((s.resumed_from, s.resumed_turns), (None, 0));
    assert_eq!(scene.requests().await.len(), 1, "the model was asked");
}

#[tokio::test]
async fn a_task_file_placed_again_after_its_name_was_forgotten_starts_fresh() {
    let down = || ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "busy"}}));
    let fetch = tool_calls(&[("c1", "webfetch", json!({"url": "http://127.0.0.1:9/"}))]);
    let mut script = vec![ok(fetch)];
    script.extend((0..8).map(|_| down()));
    let scene = scenario().script(script).task("t", "Fetch it.").ran().await;
    assert_eq!(scene.summary("t").status, Status::Failed);
    assert_eq!(attempt_runs(&scene, "t"), [RUN_ID], "the state names it");

    // Taken out of the inbox: its name is forgotten by the next run.
    std::fs::remove_file(scene.root().join("tasks/inbox/t.md")).unwrap();
    scene.run().await;
    assert_eq!(attempt_counts(&scene), json!({}));
    scene.task("t", "Fetch it.");
    let llm2 = scene.then_replies(vec![final_answer("fresh")], "").await;
    scene.run().await;

    let dirs = &scene.run_dirs("t");
    let s = scene.summary_in(dirs.last().unwrap());
    assert_eq!(s.final_answer.as_deref(), Some("fresh"));
    assert_eq!(s.resumed_from, None, "its old records are not its own");
    assert_eq!(llm2.requests().await.len(), 1);
}

#[tokio::test]
async fn a_linked_folder_holding_the_inbox_keeps_its_recurring_state() {
    let s = scenario().replies(vec![final_answer("ran")]).build().await;
    // `tasks` is the operator's link to the queue on another disk.
    let real = s.root().join("queue-disk");
    std::fs::rename(s.root().join("tasks"), &real).unwrap();
    symlink(&real, s.root().join("tasks")).unwrap();
    std::fs::create_dir_all(real.join("recurring")).unwrap();
    std::fs::write(
        real.join("recurring/hourly.md"),
        "+++\nschedule = \"@hourly\"\n+++\nDo it.",
    )
    .unwrap();

    let first = s.run().await;
    assert_eq!(first.exit_code(), 0, "{first:?}");
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(real.join(".agent-harness-recurring.json")).unwrap(),
    )
    .unwrap();
    assert!(state["hourly"]["since"].is_string(), "{state}");
}

#[tokio::test(flavor = "multi_thread")]
async fn requeue_keeps_a_name_byte_for_byte_and_says_which_files_it_leaves() {
    let s = offline().build().await;
    let failed = s.root().join("tasks/failed");
    std::fs::create_dir_all(&failed).unwrap();
    let latin1 = std::ffi::OsStr::from_bytes(b"20260409T061500Z-caf\xe9.md");
    std::fs::write(failed.join(latin1), "not UTF-8").unwrap();
    std::fs::write(failed.join("20260409T061500Z-a\x07b.md"), "a bell").unwrap();
    std::fs::write(failed.join("notes.txt"), "not a filed task").unwrap();

    let out = run_bin(&s, &["requeue", "--all-failed"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let inbox = s.root().join("tasks/inbox");
    let cafe = inbox.join(std::ffi::OsStr::from_bytes(b"caf\xe9.md"));
    assert_eq!(read(cafe), "not UTF-8");
    assert_eq!(read(inbox.join("a\x07b.md")), "a bell");
    assert_contains(stderr(&out), "notes.txt: not named like a filed task");
    assert!(failed.join("notes.txt").exists());
    // A control character is shown escaped.
    assert_lacks(stdout(&out), "\x07");
}

#[tokio::test(flavor = "multi_thread")]
async fn requeue_moves_a_task_back_across_file_systems() {
    let (_other, failed) = folder_on_another_file_system("failed");
    std::fs::write(failed.join(format!("{RUN_ID}-t.md")), "Again.").unwrap();
    let s = offline()
        .config(&format!("[paths]\nfailed = \"{}\"", failed.display()))
        .build()
        .await;

    let out = bin(&s).args(["requeue", "t"]).output().unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["t.md"]);
    assert_eq!(std::fs::read_dir(&failed).unwrap().count(), 0);
}

/// A task whose first turn was recorded and whose second met an endpoint
/// that stayed down: retryable, its run named in the attempt state.
async fn left_for_a_retry() -> Scene {
    let fetch = tool_calls(&[("c1", "webfetch", json!({"url": "http://127.0.0.1:9/"}))]);
    let mut script = vec![ok(fetch)];
    script.extend((0..8).map(|_| busy()));
    let scene = scenario().script(script).task("t", "Fetch it.").ran().await;
    assert_eq!(scene.summary("t").status, Status::Failed);
    assert!(scene.summary("t").retryable);
    assert_eq!(attempt_runs(&scene, "t"), [RUN_ID]);
    scene
}

/// A model that answers every call with a retryable 503.
fn busy() -> ResponseTemplate {
    ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "busy"}}))
}

/// The run folder `named` moved away and a copy of its records put in a
/// new folder under its name: the same records, another folder on disk.
fn put_a_copy_in_its_place(project: &Project, named: &Path) {
    let away = project.root().join("logs/t/away");
    std::fs::rename(named, &away).unwrap();
    std::fs::create_dir(named).unwrap();
    for f in std::fs::read_dir(&away).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), named.join(f.file_name())).unwrap();
    }
}

/// The next run of task `t` starts fresh: the model is asked turn 1 and
/// the summary names no run it went on from.
async fn next_run_starts_fresh(scene: &Scene) {
    let llm = scene.then_replies(vec![final_answer("fresh")], "").await;

    scene.run().await;

    // The runs only: `away` holds the records a copy replaced.
    let dirs: Vec<_> = scene
        .run_dirs("t")
        .into_iter()
        .filter(|d| d.join("summary.json").exists())
        .filter(|d| d.file_name().unwrap().to_string_lossy().starts_with("20"))
        .collect();
    let s = scene.summary_in(dirs.last().unwrap());
    assert_eq!(s.final_answer.as_deref(), Some("fresh"));
    assert_eq!((s.resumed_from, s.resumed_turns), (None, 0));
    assert_eq!(
        llm.requests().await.len(),
        1,
        "turn 1 was asked of the model"
    );
}

#[tokio::test]
async fn a_run_folder_put_in_the_place_of_the_named_one_is_never_resumed_from() {
    let s = left_for_a_retry().await;
    put_a_copy_in_its_place(&s, &s.run_dir("t"));
    next_run_starts_fresh(&s).await;
}

/// Of two runs the state names, the newest put in another folder's place
/// makes the task start fresh: an older run is no truer, and going on from
/// it would send again what the newer one already sent.
#[tokio::test]
async fn the_newest_named_run_replaced_never_sends_the_task_back_to_an_older_one() {
    let s = left_for_a_retry().await;
    let _llm = s.then_script((0..8).map(|_| busy()).collect(), "").await;
    s.run().await;
    let dirs = &s.run_dirs("t");
    assert_eq!(dirs.len(), 2);
    let newest = dirs.last().unwrap().clone();
    let second = s.summary_in(&newest);
    assert_eq!(
        second.resumed_from.as_deref(),
        Some(RUN_ID),
        "the second run went on from the first"
    );
    assert!(second.retryable);
    put_a_copy_in_its_place(&s, &newest);
    next_run_starts_fresh(&s).await;
}

#[tokio::test]
async fn a_task_file_put_back_before_the_next_run_starts_fresh_with_its_count() {
    let scene = left_for_a_retry().await;
    // Taken out and placed again (another file) with no run between.
    let file = scene.root().join("tasks/inbox/t.md");
    std::fs::remove_file(&file).unwrap();
    let draft = scene.root().join("t.md");
    std::fs::write(&draft, "Fetch it.").unwrap();
    std::fs::rename(&draft, &file).unwrap();
    let _llm = scene.then_replies(vec![final_answer("fresh")], "").await;

    scene.run().await;

    let dirs = &scene.run_dirs("t");
    let s = scene.summary_in(dirs.last().unwrap());
    assert_eq!(s.final_answer.as_deref(), Some("fresh"));
    assert_eq!(s.resumed_from, None);
    assert_eq!(s.attempt, 1, "its count starts afresh too");
}

/// A lock file another user put there (and could hold locked forever) is
/// refused, naming it; one of this user's is taken.
#[tokio::test]
async fn a_lock_file_of_another_user_is_refused_and_one_of_this_users_taken() {
    let s = answered_task().build().await;
    let lock = s.root().join("tasks/.agent-harness.lock");
    std::fs::write(&lock, "").unwrap();
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&lock, Some(65534), Some(65534)).unwrap();
        let e = refusal(&s).await;
        assert!(
            e.contains(".agent-harness.lock") && e.contains("belongs to user 65534"),
            "{e}"
        );
        assert_eq!(s.inbox(), ["t.md"]);
        std::fs::remove_file(&lock).unwrap();
        std::fs::write(&lock, "").unwrap();
    }
    assert_eq!(s.run().await.exit_code(), 0);
    assert_eq!(s.done().len(), 1);
}
