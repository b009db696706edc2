//! Resume, don't restart (docs/resume-replay-eval.md, "Resume"): a task that
//! did not finish goes on from its records — the turns recorded whole are
//! answered from them, no request sent and no tool run — and a kill at any
//! instant costs at most the one model call it cut.

use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use agent_harness::agent::StopReason;
use agent_harness::drain::exec::{ExecOptions, exec};
use agent_harness::records::{Status, Summary};
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::*;

/// A six-turn task: four reads and two attachments, then the answer.
fn six_turns() -> Vec<Value> {
    let call = |id: &str, name: &str, args: Value| tool_calls(&[(id, name, args)]);
    vec![
        call("c1", "noteworx_list_notes", json!({"tag": "research"})),
        call("c2", "noteworx_read_note", json!({"slug": "eval"})),
        call(
            "c3",
            "noteworx_create_attachment",
            json!({"slug": "eval", "filename": "summary.md", "content": "First summary."}),
        ),
        call("c4", "noteworx_search_notes", json!({"query": "held-out"})),
        call(
            "c5",
            "noteworx_create_attachment",
            json!({"slug": "eval", "filename": "ideas.md", "content": "Two ideas."}),
        ),
        final_answer("Two attachments written."),
    ]
}

const TASK: &str = "Summarise my research notes and suggest ideas.";

async fn notes() -> FakeNoteworx {
    FakeNoteworx::start(vec![note(
        "eval",
        "Evaluation methods",
        &["research"],
        "Use held-out sets.",
    )])
    .await
}

/// The TOML of these tests beside `[endpoint]`: the notes service, room
/// for six turns and many attempts, then `extra`.
fn toml(notes: &FakeNoteworx, extra: &str) -> String {
    format!(
        "{}\n[limits]\nmax_turns = 10\nmax_attempts = 100\n{extra}",
        notes.config_section()
    )
}

/// A scenario with these tests' config against `notes`, its model
/// answering `replies` by progress.
fn with_notes(notes: &FakeNoteworx, replies: Vec<ResponseTemplate>) -> Scenario {
    scenario().by_progress(replies).config(&toml(notes, ""))
}

/// The six-turn task `scan` in a project of its own, beside its notes
/// service; each run against an endpoint of its own.
struct Scan {
    notes: FakeNoteworx,
    scene: Scene,
}

impl Scan {
    async fn new() -> Scan {
        Scan {
            notes: notes().await,
            scene: scenario().task("scan", TASK).no_config_file().build().await,
        }
    }

    /// The endpoint of the next run, answering `replies`, `extra`
    /// appended to the config; returned to count what it was asked.
    async fn endpoint(&self, replies: Vec<ResponseTemplate>, extra: &str) -> FakeLlm {
        self.scene
            .then_by_progress(replies, &toml(&self.notes, extra))
            .await
    }

    /// The summary of the scan's run `n` (0 the first).
    fn summary(&self, n: usize) -> Summary {
        self.scene.summary_in(&self.scene.run_dirs("scan")[n])
    }

    /// The `run.log` of the scan's run `n` (0 the first).
    fn run_log(&self, n: usize) -> String {
        std::fs::read_to_string(self.scene.run_dirs("scan")[n].join("run.log")).unwrap()
    }

    /// One in-process `run` against an endpoint of its own whose reply
    /// `fail_at` is a 503; returns the endpoint, to count what it was asked.
    async fn run(&self, fail_at: Option<usize>, extra: &str) -> FakeLlm {
        let llm = self.endpoint(served(Duration::ZERO, fail_at), extra).await;
        self.scene.run().await;
        llm
    }
}

/// The replies of [`six_turns`], each after `delay`; reply `fail_at` (by
/// tool results seen) is a 503 instead.
fn served(delay: Duration, fail_at: Option<usize>) -> Vec<ResponseTemplate> {
    six_turns()
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            if Some(i) == fail_at {
                ResponseTemplate::new(503)
            } else {
                ok(r).set_delay(delay)
            }
        })
        .collect()
}

/// The replies of [`six_turns`] at once; reply `fail_at` is a 503.
fn at_once(fail_at: Option<usize>) -> Vec<ResponseTemplate> {
    served(Duration::ZERO, fail_at)
}

/// A JSON file, as a value.
fn json_file(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn flagged(lines: &[Value]) -> usize {
    lines.iter().filter(|l| l["resumed"] == true).count()
}

#[tokio::test]
async fn a_retryable_failure_goes_on_from_its_records() {
    let scan = Scan::new().await;
    let (notes, scene) = (&scan.notes, &scan.scene);
    // Run 1: three turns, then the endpoint fails for good (retryable).
    scan.run(Some(3), "").await;
    let first = scene.summary("scan");
    assert_eq!(
        (first.status, first.retryable, first.turns),
        (Status::Failed, true, 3)
    );
    assert_eq!(notes.attachments("eval").len(), 1);

    // Run 2, on a server of its own: only the turns not recorded are asked.
    let llm2 = scan.run(None, "").await;
    let dirs = scene.run_dirs("scan");
    assert_eq!(dirs.len(), 2);
    let s = scene.summary_in(&dirs[1]);
    assert_eq!(
        (s.status, s.stop_reason, s.turns, s.tool_calls),
        (Status::Succeeded, StopReason::FinalAnswer, 6, 5)
    );
    assert_eq!(s.resumed_from.as_deref(), Some(RUN_ID));
    assert_eq!(s.resumed_turns, 3, "the reply of turn 3 was recorded whole");
    assert_eq!(llm2.requests().await.len(), 3, "turns 4 to 6 only");
    let all: u64 = six_turns()
        .iter()
        .map(|r| r["usage"]["total_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(s.total_tokens, all, "tokens count over the whole task");
    // The metrics count what this run used: turns 4 to 6.
    let prom = std::fs::read_to_string(scene.root().join("logs/agent-harness.prom")).unwrap();
    let live = &six_turns()[3..];
    let used = |kind: &str| {
        live.iter()
            .map(|r| r["usage"][kind].as_u64().unwrap())
            .sum::<u64>()
    };
    assert!(
        prom.contains(&format!(
            "agent_harness_last_run_tokens{{kind=\"prompt\"}} {}",
            used("prompt_tokens")
        )) && prom.contains(&format!(
            "agent_harness_last_run_tokens{{kind=\"completion\"}} {}",
            used("completion_tokens")
        )),
        "{prom}"
    );
    assert_eq!(notes.attachments("eval").len(), 2, "each attachment once");

    // The new run's folder is complete on its own, the resumed part marked.
    let conversation = jsonl(&dirs[1].join("conversation.jsonl"));
    assert_eq!(conversation.len(), 6);
    assert_eq!(flagged(&conversation), 3);
    assert!(conversation[..3].iter().all(|l| l["resumed"] == true));
    let tools = jsonl(&dirs[1].join("tools.jsonl"));
    assert_eq!((tools.len(), flagged(&tools)), (5, 3));
    let log = std::fs::read_to_string(dirs[1].join("run.log")).unwrap();
    assert_contains(&log, &format!("resuming from run {RUN_ID}: 3 turn(s)"));
    assert_contains(
        &log,
        &format!("the records of run {RUN_ID} end here; turn 4 is asked of the model"),
    );
    let start = json_file(&dirs[1].join("start.json"));
    assert_eq!(start["resumed_from"], RUN_ID);
    assert_eq!(scene.done().len(), 1);
    assert!(scene.done()[0].starts_with(&format!("{}-scan", s.run_id)));

    // Complete on its own: the resumed run replays, every request matching,
    // with no endpoint and no notes service behind it.
    let port = closed_port();
    scene.write_config(
        &format!("http://127.0.0.1:{port}/v1"),
        &format!(
            "[tools.noteworx]\nbase_url = \"http://127.0.0.1:{port}\"\n[limits]\nmax_turns = 10\n"
        ),
    );
    let (code, said) = replay_of(&scene.cfg(), &dirs[1], None).await;
    assert_eq!(code, 0, "{said}");
    assert_contains(&said, "every request matched the recording");
}

#[tokio::test]
async fn a_changed_system_prompt_starts_fresh_and_says_why() {
    let scan = Scan::new().await;
    scan.run(Some(3), "").await;

    let prompt = "[prompt]\nsystem = \"You are a careful research assistant.\"\n";
    let llm2 = scan.run(None, prompt).await;
    let s = scan.summary(1);
    assert_eq!(s.status, Status::Succeeded);
    assert_eq!(s.resumed_from, None);
    let why = s.resume_refused.expect("the summary says why");
    assert_contains(&why, RUN_ID);
    assert_contains(&why, "turn 1");
    assert_contains(&why, "messages[0].content");
    assert_eq!(llm2.requests().await.len(), 6, "every turn asked again");
    // The attachment rule keeps the first one single.
    assert_eq!(scan.notes.attachments("eval").len(), 2);
    assert_contains(scan.run_log(1), "the task starts fresh");
}

#[tokio::test]
async fn resume_false_starts_fresh() {
    let scan = Scan::new().await;
    let scene = &scan.scene;
    scan.run(Some(3), "").await;

    let llm2 = scan.run(None, "resume = false\n").await;
    let s = scene.summary_in(&scene.run_dirs("scan")[1]);
    assert_eq!(s.status, Status::Succeeded);
    assert_eq!((s.resumed_from, s.resume_refused), (None, None));
    assert_eq!(s.turns, 6);
    assert_eq!(llm2.requests().await.len(), 6);
}

#[tokio::test]
async fn a_finished_task_of_the_same_name_is_never_resumed_from() {
    let scan = Scan::new().await;
    let scene = &scan.scene;
    scan.run(None, "").await;
    assert_eq!(scene.done().len(), 1);

    // The same task dropped in again is a new task: asked from turn 1.
    scene.task("scan", TASK);
    let llm2 = scan.run(None, "").await;
    let s = scene.summary_in(&scene.run_dirs("scan")[1]);
    assert_eq!((s.resumed_from, s.resumed_turns), (None, 0));
    assert_eq!(llm2.requests().await.len(), 6);
}

#[tokio::test]
async fn a_dry_run_neither_resumes_nor_is_resumed_from() {
    let scan = Scan::new().await;
    let (notes, scene) = (&scan.notes, &scan.scene);
    let _llm = scan.endpoint(served(Duration::ZERO, Some(3)), "").await;
    let dry = run_options(1, true);
    scene.run_with(dry.clone()).await;
    assert!(notes.attachments("eval").is_empty());

    // A real run after a dry one asks every turn: the dry run's "would
    // create" results are not what a write returns.
    scan.run(Some(3), "").await;
    let s = scene.summary_in(&scene.run_dirs("scan")[1]);
    assert_eq!(s.resumed_from, None);
    assert_eq!(notes.attachments("eval").len(), 1);

    // A dry run after it does not go on from the real run's records.
    let llm3 = scan.endpoint(served(Duration::ZERO, None), "").await;
    scene.run_with(dry).await;
    let s = scene.summary_in(&scene.run_dirs("scan")[2]);
    assert_eq!((s.resumed_from, s.dry_run), (None, true));
    assert_eq!(llm3.requests().await.len(), 6);
}

fn stderr_log(project: &Project) -> String {
    std::fs::read_to_string(project.root().join("stderr.log")).unwrap_or_default()
}

fn send(child: &Child, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal}");
}

async fn wait_exit(child: &mut Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        assert!(start.elapsed() < limit, "still running after {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_mid_call_then_the_next_run_goes_on_from_the_records() {
    let scan = Scan::new().await;
    let (notes, scene) = (&scan.notes, &scan.scene);
    let mut replies = served(Duration::ZERO, None);
    replies[3] = ok(six_turns()[3].clone()).set_delay(Duration::from_secs(60));
    let llm = scan.endpoint(replies, "").await;
    let mut child = spawn_run(scene, stderr_to_log(scene));
    let start = Instant::now();
    while llm.requests().await.len() < 4 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "turn 4 never asked"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    send(&child, "TERM");
    // Turn 4's reply takes a minute: a run that waited for it fails here.
    assert_eq!(
        wait_exit(&mut child, crate::signals::STOP_TIMEOUT).await,
        Some(75)
    );
    let first = scene.summary_in(&scene.run_dirs("scan")[0]);
    assert_eq!(first.status, Status::Interrupted);

    let llm2 = scan.endpoint(served(Duration::ZERO, None), "").await;
    let mut child = spawn_run(scene, stderr_to_log(scene));
    assert_eq!(wait_exit(&mut child, HANG_LIMIT).await, Some(0));
    let s = scene.summary_in(&scene.run_dirs("scan")[1]);
    assert_eq!((s.status, s.turns), (Status::Succeeded, 6));
    assert_eq!(s.resumed_from.as_deref(), Some(first.run_id.as_str()));
    assert_eq!(s.resumed_turns, 3);
    assert_eq!(
        llm2.requests().await.len(),
        3,
        "the cut call and the two after it"
    );
    assert_eq!(notes.attachments("eval").len(), 2);
    assert!(
        s.wall_ms >= first.wall_ms,
        "wall time sums over the runs: {} < {}",
        s.wall_ms,
        first.wall_ms
    );

    // The report shows where the recorded part ends.
    let made = bin(scene)
        .args(["report", "--out", "report"])
        .output()
        .unwrap();
    assert_eq!(made.status.code(), Some(0));
    let pages: String = walk_html(&scene.root().join("report"));
    let marker = format!(
        "The records of run {} end here: from turn 4 on, the model was asked live.",
        first.run_id
    );
    assert_eq!(pages.matches(&marker).count(), 1, "{pages}");
    assert!(pages.contains("3 turn(s) answered from its records"));
}

/// Every HTML file under `dir`, concatenated.
fn walk_html(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.push_str(&walk_html(&p));
        } else if p.extension().is_some_and(|x| x == "html") {
            out.push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
    out
}

/// Runs the six-turn task under `agent-harness run`, SIGKILLing it at
/// seeded random instants and starting it again until it is done; returns
/// the model requests made and the kills that hit a running process.
async fn kill_loop(seed: Option<u64>, delay: Duration) -> (usize, usize, usize) {
    let scan = Scan::new().await;
    let (notes, scene) = (&scan.notes, &scan.scene);
    let llm = scan.endpoint(served(delay, None), "").await;
    let mut rng = fastrand::Rng::with_seed(seed.unwrap_or(0));
    let mut kills = 0;
    for _ in 0..200 {
        if !scene.done().is_empty() {
            break;
        }
        let mut child = spawn_run(scene, stderr_to_log(scene));
        let at = match seed {
            Some(_) => Duration::from_millis(rng.u64(0..700)),
            None => Duration::from_secs(60),
        };
        let start = Instant::now();
        while start.elapsed() < at && child.try_wait().unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if child.try_wait().unwrap().is_none() {
            send(&child, "KILL");
            kills += 1;
        }
        wait_exit(&mut child, Duration::from_secs(10)).await;
    }
    assert_eq!(
        scene.done().len(),
        1,
        "the task ended: {:?}\n{}",
        scene.inbox(),
        stderr_log(scene)
    );
    assert!(scene.failed().is_empty() && scene.inbox().is_empty());
    let dirs = scene.run_dirs("scan");
    let last = scene.summary_in(dirs.last().unwrap());
    assert_eq!(
        (last.status, last.turns),
        (Status::Succeeded, 6),
        "seed {seed:?}"
    );
    (
        llm.requests().await.len(),
        kills,
        notes.attachments("eval").len(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_killed_at_random_instants_writes_each_attachment_once_and_asks_at_most_once_more_per_kill()
 {
    // An unkilled run, for the figures to match.
    let (requests, kills, attachments) = kill_loop(None, Duration::ZERO).await;
    assert_eq!((requests, kills, attachments), (6, 0, 2));
    for seed in [7, 42, 1234] {
        let (requests, kills, attachments) =
            kill_loop(Some(seed), Duration::from_millis(250)).await;
        eprintln!("seed {seed}: {kills} kills, {requests} requests");
        assert!(kills >= 2, "seed {seed}: the loop killed {kills} time(s)");
        assert_eq!(attachments, 2, "seed {seed}: {kills} kills");
        assert!(
            requests <= 6 + kills,
            "seed {seed}: {requests} requests for 6 turns and {kills} kills"
        );
    }
}

/// One `run` of `s` at `at`; the summary of the recurring task it ran.
async fn run_recurring_at(s: &Scene, at: chrono::DateTime<chrono::Utc>) -> Summary {
    let cfg = s.cfg();
    let mut h = s.deps();
    h.clock = std::sync::Arc::new(move || at);
    agent_harness::app::run_inbox(&cfg, &h, &run_options(1, false))
        .await
        .unwrap();
    let id = agent_harness::records::run_id_for(at);
    let text =
        std::fs::read_to_string(cfg.paths.logs.join("news").join(id).join("summary.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn a_recurring_slot_goes_on_from_its_own_records_and_a_new_slot_starts_fresh() {
    use chrono::TimeZone;
    let utc = |h: u32, m: u32| chrono::Utc.with_ymd_and_hms(2026, 4, 9, h, m, 0).unwrap();
    let notes = notes().await;
    let s = with_notes(&notes, at_once(Some(3)))
        .recurring("news", &format!("+++\nschedule = \"@hourly\"\n+++\n{TASK}"))
        .build()
        .await;
    // First seen before the 10:00 slot.
    std::fs::File::options()
        .write(true)
        .open(s.root().join("tasks/recurring/news.md"))
        .unwrap()
        .set_modified(utc(9, 0).into())
        .unwrap();

    let first = run_recurring_at(&s, utc(10, 5)).await;
    assert_eq!((first.retryable, first.attempt), (true, 1));

    // The 10:00 slot again: it goes on from its records, as attempt 2.
    let llm2 = s
        .then_by_progress(served(Duration::ZERO, Some(5)), &toml(&notes, ""))
        .await;
    let second = run_recurring_at(&s, utc(10, 20)).await;
    assert_eq!(second.slot, first.slot);
    assert_eq!(second.resumed_from.as_deref(), Some(first.run_id.as_str()));
    assert_eq!((second.resumed_turns, second.attempt), (3, 2));
    assert_eq!(
        llm2.requests().await.len(),
        2 + 4,
        "turns 4 and 5, then turn 6 failing"
    );
    assert!(second.retryable);

    // The 11:00 slot is a new run of the task: asked from turn 1.
    let llm3 = s
        .then_by_progress(served(Duration::ZERO, None), &toml(&notes, ""))
        .await;
    let third = run_recurring_at(&s, utc(11, 5)).await;
    assert_ne!(third.slot, second.slot);
    assert_eq!(
        (third.resumed_from, third.status),
        (None, Status::Succeeded)
    );
    assert_eq!(llm3.requests().await.len(), 6);
    assert_eq!(
        notes.attachments("eval").len(),
        2,
        "the attachment rule across slots"
    );
}

#[tokio::test]
async fn limits_count_over_the_whole_task_across_resumes() {
    let scan = Scan::new().await;
    let (notes, scene) = (&scan.notes, &scan.scene);
    scan.run(Some(3), "").await;
    let first = scene.summary("scan");

    // Four turns in all: the three recorded ones count.
    let text = toml(notes, "").replace("max_turns = 10", "max_turns = 4");
    let llm2 = scene
        .then_by_progress(served(Duration::ZERO, None), &text)
        .await;
    scene.run().await;
    let s = scene.summary_in(&scene.run_dirs("scan")[1]);
    assert_eq!(s.resumed_turns, 3);
    assert_eq!((s.stop_reason, s.turns), (StopReason::MaxTurns, 4));
    assert_eq!(llm2.requests().await.len(), 1);
    assert!(
        s.wall_ms >= first.wall_ms,
        "{} < {}",
        s.wall_ms,
        first.wall_ms
    );
}

#[tokio::test]
async fn killed_after_its_summary_and_before_the_move_the_task_is_filed_without_asking_again() {
    let scan = Scan::new().await;
    let (notes, scene) = (&scan.notes, &scan.scene);
    scan.run(None, "").await;
    // Killed between summary.json and the move: still in the inbox, its attempt unsettled.
    let tasks = scene.root().join("tasks");
    let filed = tasks.join("done").join(&scene.done()[0]);
    std::fs::rename(filed, tasks.join("inbox/scan.md")).unwrap();
    let meta = std::fs::metadata(scene.run_dir("scan")).unwrap();
    let runs = json!([{"id": RUN_ID, "dev": meta.dev(), "ino": meta.ino()}]);
    let attempts = json!({"scan": {"attempts": 1, "runs": runs}});
    let ledger = tasks.join(".agent-harness-attempts.json");
    std::fs::write(ledger, attempts.to_string()).unwrap();

    let llm2 = scan.run(None, "").await;
    let s = scan.summary(1);
    assert_eq!(s.status, Status::Succeeded);
    assert_eq!((s.resumed_turns, s.turns), (6, 6));
    assert_eq!(s.final_answer.as_deref(), Some("Two attachments written."));
    assert!(llm2.requests().await.is_empty(), "nothing asked again");
    assert_eq!(notes.attachments("eval").len(), 2);
    assert_eq!((scene.inbox().len(), scene.done().len()), (0, 1));
}

/// The scan fails at turn 4; `spoil` spoils its run folder: the next
/// run trusts none of it and starts the task fresh.
async fn assert_starts_fresh_after(spoil: impl FnOnce(&std::path::Path)) {
    let scan = Scan::new().await;
    scan.run(Some(3), "").await;
    spoil(&scan.scene.run_dir("scan"));
    let llm2 = scan.run(None, "").await;
    let s = scan.summary(1);
    assert_eq!((s.status, s.resumed_from), (Status::Succeeded, None));
    assert_eq!(llm2.requests().await.len(), 6);
}

#[tokio::test]
async fn a_record_replaced_by_a_link_starts_the_task_fresh() {
    assert_starts_fresh_after(|dir| {
        std::fs::remove_file(dir.join("start.json")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("start.json")).unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_record_that_does_not_parse_starts_the_task_fresh() {
    assert_starts_fresh_after(|dir| {
        std::fs::write(dir.join("conversation.jsonl"), "{\"turn\": 1e999999}\n").unwrap()
    })
    .await;
}

#[tokio::test]
async fn a_record_replaced_by_a_fifo_starts_the_task_fresh() {
    assert_starts_fresh_after(|dir| {
        std::fs::remove_file(dir.join("tools.jsonl")).unwrap();
        let made = Command::new("mkfifo")
            .arg(dir.join("tools.jsonl"))
            .status()
            .unwrap();
        assert!(made.success());
    })
    .await;
}

#[tokio::test]
async fn a_write_sent_but_not_recorded_is_sent_again_and_made_single_by_the_attachment_rule() {
    let scan = Scan::new().await;
    let (notes, scene) = (&scan.notes, &scan.scene);
    scan.run(Some(3), "").await;
    let dir = scene.run_dir("scan");
    let intents = jsonl(&dir.join("intents.jsonl"));
    assert_eq!(
        intents.len(),
        1,
        "the one write was recorded before it went"
    );
    assert_eq!(
        (intents[0]["call_id"].as_str(), intents[0]["turn"].as_u64()),
        (Some("c3"), Some(3))
    );
    // As if the process died after sending the write, before its result
    // was recorded: tools.jsonl without its last line, no summary.
    let tools = std::fs::read_to_string(dir.join("tools.jsonl")).unwrap();
    let kept: String = tools.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("tools.jsonl"), kept).unwrap();
    std::fs::remove_file(dir.join("summary.json")).unwrap();
    assert_eq!(notes.attachments("eval").len(), 1);

    let llm2 = scan.run(None, "").await;
    let new = &scene.run_dirs("scan")[1];
    let s = scene.summary_in(new);
    assert_eq!((s.status, s.resumed_turns), (Status::Succeeded, 3));
    assert_eq!(llm2.requests().await.len(), 3);
    assert_eq!(
        notes.attachments("eval").len(),
        2,
        "summary.md once, ideas.md once"
    );
    let log = std::fs::read_to_string(new.join("run.log")).unwrap();
    assert_contains(
        &log,
        "write call noteworx_create_attachment [c3] of turn 3 was recorded as about to be sent, but not its result",
    );
    assert_contains(
        &log,
        "call c3 of turn 3 has no recorded result and runs now",
    );
    let c3 = jsonl(&new.join("tools.jsonl"))
        .into_iter()
        .find(|l| l["call_id"] == "c3")
        .unwrap();
    assert!(c3["resumed"].is_null(), "run now, not from the records");
    assert!(
        c3["result"].as_str().unwrap().contains("already exists"),
        "{c3}"
    );
}

/// A new task dropped in under a finished task's name fails before its
/// first reply (endpoint down: retryable); its next attempt must not be
/// answered from the *old, finished* task's records.
#[tokio::test]
async fn a_task_dropped_in_again_never_goes_on_from_the_finished_one_before_it() {
    let scan = Scan::new().await;
    let scene = &scan.scene;
    scan.run(None, "").await;
    assert_eq!(scene.done().len(), 1);

    // The same task again (a daily drop): the endpoint is down on its first call.
    scene.task("scan", TASK);
    scan.run(Some(0), "").await;
    let s2 = scene.summary_in(&scene.run_dirs("scan")[1]);
    assert_eq!(
        (s2.status, s2.retryable, s2.turns),
        (Status::Failed, true, 0)
    );

    let llm3 = scan.run(None, "").await;
    let s3 = scene.summary_in(&scene.run_dirs("scan")[2]);
    assert_eq!(
        (s3.resumed_from.clone(), llm3.requests().await.len()),
        (None, 6),
        "answered from the finished task's records: {s3:?}"
    );
}

/// An interrupted or retryably failed `exec --name scan` is not the inbox
/// task `scan`: the inbox task must not go on from exec's records.
#[tokio::test]
async fn an_inbox_task_never_goes_on_from_an_exec_run_of_its_name() {
    let notes = notes().await;
    let s = with_notes(&notes, at_once(Some(3))).build().await;
    let opts = ExecOptions {
        name: "scan".into(),
        text: TASK.into(),
        ..Default::default()
    };
    exec(&s.cfg(), &s.deps(), &opts).await.unwrap();
    let e = s.summary_in(&s.run_dirs("scan")[0]);
    assert_eq!((e.status, e.retryable), (Status::Failed, true));

    s.task("scan", TASK);
    let _llm2 = s.then_by_progress(at_once(None), &toml(&notes, "")).await;
    s.run().await;
    let inbox = s.summary_in(&s.run_dirs("scan")[1]);
    assert_eq!(inbox.resumed_from, None, "went on from exec's run");
}

/// One attachment written, then the answer.
fn one_attachment() -> Vec<ResponseTemplate> {
    let args = json!({"slug": "eval", "filename": "summary.md", "content": "S."});
    vec![
        ok(call("noteworx_create_attachment", args)),
        ok(final_answer("Done.")),
    ]
}

/// A write refused with 401 is a setup fault: the run stops and the task
/// stays for the operator to fix the token. After the fix, the write must
/// be sent, not answered from the records (the 401).
#[tokio::test]
async fn a_write_stopped_by_a_setup_fault_is_sent_once_the_setup_is_fixed() {
    let notes = notes().await;
    let config = toml(&notes, "");
    let s = with_notes(&notes, one_attachment())
        .task("w", "Attach a summary.")
        .build()
        .await;
    notes.fail_next(&[401]);
    s.run().await;
    let s1 = s.summary("w");
    assert_eq!(s1.stop_reason, StopReason::SetupFault);
    assert!(notes.attachments("eval").is_empty());

    // The operator fixes the token; the task runs again.
    let _llm2 = s.then_by_progress(one_attachment(), &config).await;
    s.run().await;
    let s2 = s.summary_in(&s.run_dirs("w")[1]);
    assert_eq!(s2.status, Status::Succeeded);
    let written = notes.attachments("eval").len();
    assert_eq!(written, 1, "the write was never sent again: {s2:?}");
}

#[tokio::test]
async fn a_resumed_run_killed_while_it_copied_its_turns_does_not_hide_the_fuller_records() {
    let scan = Scan::new().await;
    scan.run(Some(3), "").await;
    // A run that went on from it, killed after writing one of its three
    // answered turns: its folder holds one whole turn, no summary.
    let a = scan.scene.run_dir("scan");
    let b = a.with_file_name(format!("{RUN_ID}-2"));
    std::fs::create_dir(&b).unwrap();
    for name in ["conversation.jsonl", "tools.jsonl"] {
        let text = std::fs::read_to_string(a.join(name)).unwrap();
        std::fs::write(b.join(name), format!("{}\n", text.lines().next().unwrap())).unwrap();
    }
    let mut start = json_file(&a.join("start.json"));
    start["run_id"] = json!(format!("{RUN_ID}-2"));
    start["resumed_from"] = json!(RUN_ID);
    std::fs::write(b.join("start.json"), start.to_string()).unwrap();

    let llm2 = scan.run(None, "").await;
    let s = scan.summary(2);
    assert_eq!(s.resumed_turns, 3, "the three turns of the first run");
    assert_eq!(llm2.requests().await.len(), 3);
    assert_eq!(scan.notes.attachments("eval").len(), 2);
}
