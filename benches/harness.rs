//! What the harness adds to a run, measured against the test fakes:
//!
//! 1. overhead — a 4-turn tool task (list → read → create attachment →
//!    final answer) through the release binary against a zero-latency
//!    endpoint: wall time, CPU time and peak memory of the whole process;
//! 2. drain — 200 tasks × 3 turns against an endpoint that answers each call
//!    after 100 ms, at concurrency 1, 4 and 16, against the ideal
//!    calls × latency ÷ concurrency;
//! 3. context economy — a research scan (30 notes of ~3 KB: list, 5 reads,
//!    1 attachment) in an 8192-token window: the largest request and the
//!    total prompt, next to the same conversation with the note text left in
//!    the listing and nothing cut or elided;
//! 4. hostile — peak memory of the whole process when the endpoint answers
//!    200 MB, when a notes listing carries 150 MB of note text, and when
//!    bodies under the cap are made of many small values; and the time to
//!    read 4 MB of each reply pattern built to make a parser slow;
//! 5. counting — against the real llama-server the scripts build (skipped
//!    when it is not installed): how far the estimate is from the server's
//!    exact count on the research scan's requests, what counting costs per
//!    turn, and the scan again with every request counted exactly;
//! 6. records — `report` over a run of many tool lines, at two sizes (it
//!    must be linear), and over a `conversation.jsonl` just under its cap
//!    made of small values (it must cost about its size, not a tree's);
//! 7. resume — a six-turn task with two attachment writes, SIGKILLed three
//!    times mid-call (in turns 2, 4 and 5) and run again until done:
//!    model requests and wall time, resumed from its records
//!    (docs/resume-replay-eval.md, "Resume") against restarted from turn 1
//!    (`[limits] resume = false`);
//! 8. mcp — the tests' MCP server (official Python SDK) started by the
//!    binary: its start-up (spawn, `initialize`, `tools/list`) as `run.log`
//!    says it, one `tools/call` round trip, and the harness's peak memory
//!    when a result is text just under the 4 MiB line cap, text over it,
//!    and many small JSON values (skipped when the stack is not installed);
//! 9. lean — peak memory and wall time of `--help`, of `check` (the
//!    README's four-line config, one task) and of a two-turn tool chain
//!    (read a note, answer), each process alone, the chain interleaved with
//!    simonw/llm running the same chain against its own copy of the fake
//!    (`LLM_BIN`, or `llm` on `PATH`; skipped without it);
//! 10. redaction — the secret redactor (docs/untrusted-input.md) over each kind of text at
//!     two sizes (it must be linear: the time per MiB stays): plain text, a
//!     record line's escapes, escapes nested 8 deep, backslashes only (none
//!     holding a secret), the key escaped twice every 51 bytes, and the key
//!     back to back;
//! 11. morning — `status`, `digest` and `runs` over a year of records:
//!     run folders of a task that runs hourly, read the morning after;
//!     and `digest` over a day of 10,000 failed tasks, each run once, with
//!     20,000 files in `done/` and `failed/` emptied (every "run it again"
//!     lists the folders).
//!
//! `cargo bench --bench harness` prints the figures of the binary cargo
//! built, or of `BENCH_BIN` when it names another build (`-- overhead`, `-- drain`,
//! `-- context`, `-- hostile`, `-- counting`, `-- records`, `-- resume`, `-- mcp`, `-- lean`, `-- redaction` or `-- morning` for one set; `BENCH_WRAP="valgrind --tool=callgrind"` runs
//! each agent-harness process under a profiler). Under `cargo test` the same
//! code runs once at a small size, checking that every scenario still does
//! what it measures.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// The benchmark's figures are what it prints.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// Test helpers are `pub` to share them between modules, not an API.
#![allow(unreachable_pub)]

#[path = "../tests/harness/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_harness::config::Config;
use serde_json::{Value, json};

use common::fake_noteworx::{FakeNoteworx, note};
use common::{Exit, FakeLlm, Project, final_answer, ok, tool_calls};

const BUILT: &str = env!("CARGO_BIN_EXE_agent-harness");

/// The binary measured: `BENCH_BIN` (another build of the same source, such
/// as the static one docs/performance.md describes), or the one cargo built.
fn bin() -> String {
    std::env::var("BENCH_BIN").unwrap_or_else(|_| BUILT.to_string())
}

/// Sizes: the real benchmark, or a quick pass under `cargo test`.
struct Sizes {
    overhead_runs: usize,
    drain_tasks: usize,
    drain_latency: Duration,
    drain_concurrency: &'static [usize],
    /// MiB of the flooding reply and of the flooded listing's note text.
    flood_reply_mib: usize,
    flood_listing_mib: usize,
    /// Bytes of each adversarial reply pattern.
    pattern_bytes: usize,
    /// MiB of the bodies under the cap built of many small values.
    expanding_mib: usize,
    /// Tool lines of the run the report reads, at two sizes.
    record_lines: [usize; 2],
    /// MiB of the conversation of small values the report reads.
    record_mib: usize,
    /// How long the endpoint takes to answer each call of the resumed task.
    resume_latency: Duration,
    /// Calls of the MCP round-trip task.
    mcp_calls: usize,
    /// Empty lists in the MCP result of small values (400,000: a 2.7 MiB
    /// line; a debug build under `cargo test` reads a quarter of that
    /// within the call's 3 s on two busy cores).
    nested_lists: usize,
    /// MiB of each text the redactor reads, at two sizes.
    redaction_mib: [usize; 2],
    /// Run folders `status`, `digest` and `runs` read.
    morning_runs: usize,
    /// Failed runs of distinct tasks in the digest's period, and files in
    /// `done/` beside them.
    digest_failures: usize,
    done_files: usize,
}

const FULL: Sizes = Sizes {
    overhead_runs: 30,
    drain_tasks: 200,
    drain_latency: Duration::from_millis(100),
    drain_concurrency: &[1, 4, 16],
    flood_reply_mib: 200,
    flood_listing_mib: 150,
    pattern_bytes: 4 * 1024 * 1024,
    expanding_mib: 30,
    record_lines: [60_000, 120_000],
    record_mib: 60,
    resume_latency: Duration::from_millis(500),
    mcp_calls: 50,
    nested_lists: 400_000,
    redaction_mib: [4, 32],
    morning_runs: 10_000,
    digest_failures: 10_000,
    done_files: 20_000,
};

const QUICK: Sizes = Sizes {
    overhead_runs: 2,
    drain_tasks: 8,
    drain_latency: Duration::from_millis(10),
    drain_concurrency: &[1, 4],
    flood_reply_mib: 40,
    flood_listing_mib: 20,
    pattern_bytes: 256 * 1024,
    expanding_mib: 2,
    record_lines: [1_000, 2_000],
    record_mib: 2,
    resume_latency: Duration::from_millis(30),
    mcp_calls: 3,
    nested_lists: 100_000,
    redaction_mib: [1, 2],
    morning_runs: 200,
    digest_failures: 60,
    done_files: 120,
};

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let sizes = if full { FULL } else { QUICK };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "agent-harness {} — {} core(s), {}",
        env!("CARGO_PKG_VERSION"),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        if full {
            "full run"
        } else {
            "quick check (cargo test)"
        }
    );
    // `cargo bench --bench harness -- drain` runs only the scenarios named.
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| named.is_empty() || named.iter().any(|n| n == name);
    if wanted("overhead") {
        rt.block_on(overhead(&sizes));
    }
    if wanted("drain") {
        rt.block_on(drain(&sizes));
    }
    if wanted("context") {
        rt.block_on(context_economy());
    }
    if wanted("hostile") {
        rt.block_on(hostile(&sizes));
    }
    if wanted("counting") {
        rt.block_on(counting(&sizes));
    }
    if wanted("records") {
        records(&sizes);
    }
    if wanted("resume") {
        rt.block_on(resume(&sizes));
    }
    if wanted("mcp") {
        rt.block_on(mcp(&sizes));
    }
    if wanted("lean") {
        rt.block_on(lean(&sizes));
    }
    if wanted("redaction") {
        redaction(&sizes);
    }
    if wanted("morning") {
        morning(&sizes);
    }
}

/// Set 11, the morning after over many run folders (`status`, `digest`
/// since the day before, `runs`): each process's wall time and peak memory.
fn morning(sizes: &Sizes) {
    use agent_harness::records::{Status, Summary};
    let n = sizes.morning_runs;
    println!("\n11. morning: {n} run folders (an hourly task's records), read back");
    let project = reading_project();
    let root = project.root();
    // Hourly runs up to now, every 50th failed; newest last.
    let now = chrono::Utc::now();
    for i in 0..n {
        let at = now - chrono::TimeDelta::hours((n - i) as i64);
        let run_id = at.format("%Y%m%dT%H%M%SZ").to_string();
        let mut summary = Summary::blank("hourly", &run_id, at);
        summary.recurring = true;
        if i % 50 == 0 {
            summary.status = Status::Failed;
            summary.error = Some("the task reached max_turns = 8".into());
        } else {
            summary.final_answer = Some("All quiet.".into());
        }
        let dir = root.join("logs/hourly").join(&run_id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("summary.json"),
            serde_json::to_string(&summary).unwrap(),
        )
        .unwrap();
    }
    for args in [
        &["status"][..],
        &["digest", "--since", "1d"],
        &["runs", "--since", "1d"],
        &["runs", "--status", "failed"],
    ] {
        // `status` ends within a millisecond or two: between two polls
        // of its VmHWM, so its peak is read by GNU time (its wall alone).
        let cost = timed_and_peaked(|| harness_in(root, args));
        assert_eq!(cost.code, 0, "{args:?} failed");
        println!(
            "  {:<28} {:8.1} ms wall, {:6.1} MiB peak RSS",
            args.join(" "),
            ms(cost.wall),
            cost.peak_rss_kib as f64 / 1024.0
        );
    }
    many_failures(sizes);
}

/// A project whose config names an endpoint nothing answers: the
/// commands that read records need no other.
fn reading_project() -> Project {
    let project = Project::new();
    std::fs::write(
        project.root().join("agent.toml"),
        "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://127.0.0.1:9/v1\"\n",
    )
    .unwrap();
    project
}

/// `digest` over a day of failures of distinct tasks, beside a full
/// `done/`: it lists 50 of them, and asks where the files are for those
/// alone.
fn many_failures(sizes: &Sizes) {
    use agent_harness::records::{Status, Summary};
    let (n, done) = (sizes.digest_failures, sizes.done_files);
    let project = reading_project();
    let root = project.root();
    let now = chrono::Utc::now();
    for i in 0..n {
        let at = now - chrono::TimeDelta::seconds((i + 60) as i64);
        let run_id = at.format("%Y%m%dT%H%M%SZ").to_string();
        let task = format!("task-{i:05}");
        let mut summary = Summary::blank(&task, &run_id, at);
        summary.status = Status::Failed;
        summary.error = Some(format!("error {i}: the task reached max_turns = 8"));
        let dir = root.join("logs").join(&task).join(&run_id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("summary.json"),
            serde_json::to_string(&summary).unwrap(),
        )
        .unwrap();
    }
    let done_dir = root.join("tasks/done");
    std::fs::create_dir_all(&done_dir).unwrap();
    std::fs::create_dir_all(root.join("tasks/failed")).unwrap();
    for i in 0..done {
        std::fs::write(
            done_dir.join(format!("20260101T000000Z-other-{i:05}.md")),
            "x",
        )
        .unwrap();
    }
    // Once to warm the page cache, then measured.
    let args = &["digest", "--since", "1d"][..];
    assert_eq!(run_binary(root, args).code, 0);
    let cost = run_binary(root, args);
    assert_eq!(cost.code, 0, "{args:?} failed");
    println!(
        "  digest, {n} failures, {done} files in done/ {:8.1} ms wall, {:6.1} MiB peak RSS",
        ms(cost.wall),
        cost.peak_rss_kib as f64 / 1024.0
    );
}

/// A text of about `n` bytes.
type Text = fn(usize) -> String;

/// 10. What the redactor costs per MiB, by kind of text, at two sizes.
fn redaction(sizes: &Sizes) {
    use agent_harness::config::{Redactor, Secret};
    const KEY: &str = "sk-SECRETKEY-abcdef123456";
    let redactor = Redactor::new(vec![
        Secret::new(KEY),
        Secret::new("nwx_test_token_9f8e7d6c"),
    ]);
    let nested: Text = |n| {
        let mut chunk = r#"{"a":"b\n"}"#.to_string();
        for _ in 1..8 {
            chunk = json!({ "a": chunk }).to_string();
        }
        chunk.repeat(n / chunk.len() + 1)
    };
    let texts: [(&str, Text, bool); 6] = [
        ("plain text", |n| "lorem ipsum dolor ".repeat(n / 18), false),
        (
            "a record line's escapes",
            |n| json!({"arguments": r#"{"q":"a\nb \u00e9"}"#.repeat(n / 40)}).to_string(),
            false,
        ),
        ("escapes nested 8 deep", nested, false),
        ("backslashes only", |n| "\\\\".repeat(n / 2), false),
        (
            "the key escaped twice, 51 B apart",
            |n| r"\\u0073k-SECRETKEY-abcdef123456, and some more text ".repeat(n / 51),
            true,
        ),
        ("the key back to back", |n| KEY.repeat(n / KEY.len()), true),
    ];
    println!(
        "\n== redaction: ms per MiB at {:?} MiB",
        sizes.redaction_mib
    );
    for (what, make, holds_key) in texts {
        let mut row = format!("{what:34}");
        for mib in sizes.redaction_mib {
            let text = make(mib << 20);
            let started = Instant::now();
            let out = redactor.redact_str(&text);
            let took = ms(started.elapsed());
            let size = text.len() as f64 / f64::from(1 << 20);
            row.push_str(&format!(" {size:5.1} MiB {:7.1} ms/MiB", took / size));
            assert_eq!(
                matches!(out, std::borrow::Cow::Owned(_)),
                holds_key,
                "{what}: redacted or not as expected"
            );
            assert!(
                !out.contains("SECRETKEY") && !out.contains("u0073k-"),
                "{what}"
            );
        }
        println!("{row}");
    }
}

/// `[mcp.servers.t]` running the tests' server, when the stack has the SDK.
fn mcp_server() -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/stack"))
        .arg("paths")
        .output()
        .ok()?;
    let paths = String::from_utf8(out.stdout).ok()?;
    let python = paths.lines().find_map(|l| l.strip_prefix("MCP_PYTHON="))?;
    let server = root.join("tests/mcp/test_server.py");
    Some(format!(
        "[mcp.servers.t]\ncommand = [{python:?}, {:?}]\ncall_timeout_secs = 3\n",
        server.display().to_string()
    ))
}

async fn mcp(sizes: &Sizes) {
    let Some(server) = mcp_server() else {
        println!("\n8. mcp: skipped (scripts/stack install puts the MCP SDK in its cache)");
        return;
    };
    let n = sizes.mcp_calls;
    let mut replies: Vec<_> = (0..n)
        .map(|i| {
            let args = json!({"key": format!("k{i}")});
            ok(tool_calls(&[(&format!("c{i}"), "t__lookup", args)]))
        })
        .collect();
    replies.push(ok(final_answer("done")));
    let llm = FakeLlm::by_progress(replies).await;
    let project = Project::new();
    project.task("calls", "+++\ntools = [\"t__lookup\"]\n+++\nLook up.");
    let limits = format!("[limits]\nmax_turns = {}\n", n + 1);
    project.write_config(&llm.base_url(), &format!("{limits}{server}"));
    let cost = tokio::task::block_in_place(|| run_binary(project.root(), &["run"]));
    assert_eq!(cost.code, 0, "the MCP task succeeds");
    let dir = single_run(project.root(), "calls");
    let log = std::fs::read_to_string(dir.join("run.log")).unwrap();
    let started: f64 = log
        .split("MCP server t started in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|ms| ms.parse().ok())
        .unwrap();
    let calls: Vec<Duration> = common::jsonl(&dir.join("tools.jsonl"))
        .iter()
        .map(|l| Duration::from_millis(l["duration_ms"].as_u64().unwrap()))
        .collect();
    assert_eq!(calls.len(), n);
    println!("\n8. mcp: the tests' server on the official Python SDK, stdio");
    println!("   start-up  {started:7.1} ms    (spawn + initialize + tools/list)");
    let per_turn = (ms(cost.wall) - started) / (n + 1) as f64;
    let call = median(calls);
    println!(
        "   call      {} median over {n} calls (tools/call round trip; tools.jsonl counts whole ms)",
        if call.is_zero() {
            "< 1 ms".to_string()
        } else {
            format!("{:.0} ms", ms(call))
        }
    );
    println!(
        "   per turn  {per_turn:7.1} ms (run wall less start-up over {} turns: model call, tool call, records)",
        n + 1
    );
    println!(
        "   run       {:7.1} ms wall, {:.1} MiB peak RSS of the harness",
        ms(cost.wall),
        cost.peak_rss_kib as f64 / 1024.0
    );
    for (tool, args, what) in [
        (
            "t__huge",
            json!({"kib": 1800}),
            "1.8 MiB of text (a 3.6 MiB line: text + structured copy)",
        ),
        (
            "t__huge",
            json!({"kib": 3000}),
            "3 MiB of text (a 6 MiB line: over the cap, dropped)",
        ),
        (
            "t__nested",
            json!({"n": sizes.nested_lists}),
            &*format!(
                "{} empty lists (a {:.1} MiB line of small values)",
                sizes.nested_lists,
                sizes.nested_lists as f64 * 7.0 / f64::from(1 << 20)
            ),
        ),
    ] {
        let llm = FakeLlm::by_progress(vec![
            ok(tool_calls(&[("c1", tool, args)])),
            ok(final_answer("done")),
        ])
        .await;
        let project = Project::new();
        project.task("big", &format!("+++\ntools = [\"{tool}\"]\n+++\nGo."));
        project.write_config(&llm.base_url(), &server);
        let cost = tokio::task::block_in_place(|| run_binary(project.root(), &["run"]));
        assert_eq!(cost.code, 0, "{what}");
        let line = &common::jsonl(&single_run(project.root(), "big").join("tools.jsonl"))[0];
        let dropped = line["is_error"] == true;
        assert_eq!(dropped, what.contains("dropped"), "{what}: {line}");
        println!(
            "   {what}: {:.1} MiB peak RSS, {:.0} ms wall{}",
            cost.peak_rss_kib as f64 / 1024.0,
            ms(cost.wall),
            if dropped {
                " (the call ran into call_timeout_secs = 3)"
            } else {
                ""
            }
        );
    }
}

/// The six-turn task of the resume benchmark: four reads, two writes.
fn six_turns(latency: Duration) -> Vec<wiremock::ResponseTemplate> {
    let call = |id: &str, name: &str, args: Value| ok(tool_calls(&[(id, name, args)]));
    vec![
        call(
            "c1",
            "noteworx_list_notes",
            json!({"tag": "research-active"}),
        ),
        call("c2", "noteworx_read_note", json!({"slug": "n1"})),
        call(
            "c3",
            "noteworx_create_attachment",
            json!({"slug": "n1", "filename": "a.md", "content": "First."}),
        ),
        call("c4", "noteworx_search_notes", json!({"query": "llama"})),
        call(
            "c5",
            "noteworx_create_attachment",
            json!({"slug": "n1", "filename": "b.md", "content": "Second."}),
        ),
        ok(final_answer("Two attachments.")),
    ]
    .into_iter()
    .map(|r| r.set_delay(latency))
    .collect()
}

/// Runs the six-turn task to its end, SIGKILLing each run in the model
/// call of the next turn in `kill_in`; returns (requests, wall, attachments).
async fn killed_and_run_again(
    resume: bool,
    latency: Duration,
    kill_in: &[usize],
) -> (usize, Duration, usize) {
    let notes = FakeNoteworx::start(vec![note(
        "n1",
        "Serving small models",
        &["research-active"],
        "Notes.",
    )])
    .await;
    let project = Project::new();
    project.task("scan", "Read, attach twice, answer.");
    let mut requests = 0;
    let mut wall = Duration::ZERO;
    for kill in kill_in.iter().map(Some).chain([None]) {
        let llm = FakeLlm::by_progress(six_turns(latency)).await;
        let extra = format!(
            "{}\n[limits]\nmax_turns = 10\nmax_attempts = 10\nresume = {resume}\n",
            notes.config_section()
        );
        project.write_config(&llm.base_url(), &extra);
        let start = Instant::now();
        let mut child = Command::new(bin())
            .arg("run")
            .current_dir(project.root())
            .env("NOTEWORX_TOKEN", common::fake_noteworx::TOKEN)
            .env("AGENT_HARNESS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if let Some(turn) = kill {
            // Killed once the call of `turn` is in flight.
            loop {
                let in_turn = llm.requests().await.last().map(|b| {
                    1 + b["messages"]
                        .as_array()
                        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count())
                });
                if in_turn >= Some(*turn) {
                    break;
                }
                assert!(
                    child.try_wait().unwrap().is_none(),
                    "the run ended before turn {turn}"
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            child.kill().unwrap();
        }
        let status = child.wait().unwrap();
        wall += start.elapsed();
        requests += llm.requests().await.len();
        if kill.is_none() {
            assert_eq!(status.code(), Some(0));
        }
    }
    assert_eq!(project.done().len(), 1, "the task ended");
    (requests, wall, notes.attachments("n1").len())
}

async fn resume(sizes: &Sizes) {
    let latency = sizes.resume_latency;
    let kills = [2, 4, 5];
    let (base_requests, base_wall, base_attachments) =
        killed_and_run_again(true, latency, &[]).await;
    let (r_requests, r_wall, r_attachments) = killed_and_run_again(true, latency, &kills).await;
    let (f_requests, f_wall, f_attachments) = killed_and_run_again(false, latency, &kills).await;
    assert_eq!((base_requests, base_attachments), (6, 2));
    assert_eq!(
        (r_requests, r_attachments),
        (6 + kills.len(), 2),
        "one request lost per kill"
    );
    assert_eq!(
        (f_requests, f_attachments),
        (2 + 4 + 5 + 6, 2),
        "restarted from turn 1 each time"
    );
    println!(
        "\n7. resume: a six-turn task (2 writes), {} ms a model call, SIGKILLed mid-call in turns 2, 4 and 5",
        latency.as_millis()
    );
    println!("                         requests   wall (all runs)   attachments");
    for (label, n, wall, att) in [
        ("never killed", base_requests, base_wall, base_attachments),
        ("killed 3×, resumed", r_requests, r_wall, r_attachments),
        ("killed 3×, restarted", f_requests, f_wall, f_attachments),
    ] {
        println!("   {label:<22} {n:>6}   {:>12.0} ms   {att:>8}", ms(wall));
    }
}

/// A run folder `logs/good/<run>` with `tools` tool lines (ten a turn) and
/// one small conversation line a turn, or the conversation given.
fn planted_run(root: &Path, tools: usize, conversation: Option<String>) {
    // `report` reads its config like every command; it calls nothing.
    std::fs::write(
        root.join("agent.toml"),
        "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://127.0.0.1:9/v1\"\n",
    )
    .unwrap();
    let dir = root.join("logs/good/20260409T061500Z");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("summary.json"),
        include_str!("../tests/fixtures/records/summary.json"),
    )
    .unwrap();
    std::fs::write(dir.join("task.md"), "Read everything.\n").unwrap();
    let turns = tools.div_ceil(10).max(1);
    let conversation = conversation.unwrap_or_else(|| {
        (1..=turns)
            .map(|t| {
                json!({"turn": t, "attempt": 1, "request": {"messages": [{"role": "user", "content": "go"}]},
                       "http_status": 200, "response": tool_calls(&[("c", "webfetch", json!({"url": "http://x"}))])})
                .to_string() + "\n"
            })
            .collect()
    });
    std::fs::write(dir.join("conversation.jsonl"), conversation).unwrap();
    let tool_lines: String = (0..tools)
        .map(|i| {
            json!({"turn": i / 10 + 1, "call_id": format!("c{i}"), "name": "webfetch",
                   "arguments": "{\"url\":\"http://x\"}", "result": "a page", "is_error": false,
                   "duration_ms": 1, "original_chars": 6, "returned_chars": 6, "executed": true, "repeat": 1})
            .to_string() + "\n"
        })
        .collect();
    std::fs::write(dir.join("tools.jsonl"), tool_lines).unwrap();
}

fn records(sizes: &Sizes) {
    println!("\n6. records read back (`report`)");
    let mut per_line = Vec::new();
    for n in sizes.record_lines {
        let project = Project::new();
        planted_run(project.root(), n, None);
        let cost = run_binary(project.root(), &["report"]);
        assert_eq!(cost.code, 0, "report failed");
        let page = std::fs::read_to_string(
            project
                .root()
                .join("logs/report/runs/good--20260409T061500Z.html"),
        )
        .unwrap();
        assert!(!page.contains("Not shown"), "the records fit their caps");
        assert_eq!(page.matches("details class=\"call\"").count(), n);
        let us = cost.wall.as_secs_f64() * 1e6 / n as f64;
        per_line.push(us);
        println!(
            "  {n:>7} tool lines over {:>6} turns: {:8.1} ms wall, {:5.2} µs a line, {:6.1} MiB peak RSS",
            n.div_ceil(10),
            ms(cost.wall),
            us,
            cost.peak_rss_kib as f64 / 1024.0
        );
    }
    println!(
        "  per line at twice the size: {:.2}× (linear: about 1)",
        per_line[1] / per_line[0]
    );
    // One line whose request is a list of small values, just under the cap.
    let project = Project::new();
    let zeros = "0,".repeat(sizes.record_mib * 1024 * 1024 / 4);
    let line =
        format!("{{\"turn\":1,\"attempt\":1,\"request\":[{zeros}0],\"response\":[{zeros}0]}}\n");
    let mib = line.len() as f64 / (1024.0 * 1024.0);
    planted_run(project.root(), 10, Some(line));
    let cost = run_binary(project.root(), &["report"]);
    assert_eq!(cost.code, 0, "report failed");
    println!(
        "  a {mib:.0} MiB conversation.jsonl of small values: {:.1} MiB peak RSS ({:.1}× its size; as a tree: ~16×)",
        cost.peak_rss_kib as f64 / 1024.0,
        cost.peak_rss_kib as f64 / 1024.0 / mib
    );
}

/// Wall time, CPU time (user + system) and peak resident memory of one
/// `agent-harness` process, read from the kernel when it is reaped.
struct ProcessCost {
    code: i32,
    wall: Duration,
    cpu: Duration,
    peak_rss_kib: u64,
}

fn run_binary(dir: &Path, args: &[&str]) -> ProcessCost {
    // BENCH_WRAP="valgrind --tool=callgrind" profiles each process.
    let wrap = std::env::var("BENCH_WRAP").unwrap_or_default();
    let bin = bin();
    let mut words = wrap
        .split_whitespace()
        .chain([bin.as_str()])
        .chain(args.iter().copied());
    let mut cmd = Command::new(words.next().unwrap_or(BUILT));
    cmd.args(words)
        .current_dir(dir)
        .env("NOTEWORX_TOKEN", common::fake_noteworx::TOKEN)
        .env("AGENT_HARNESS_LOG", "warn");
    measure(cmd)
}

/// The cost of `cmd` as one process, its output thrown away.
fn measure(mut cmd: Command) -> ProcessCost {
    let start = Instant::now();
    #[allow(clippy::zombie_processes)] // reaped by wait4 below, which also reads its usage
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // The kernel's own peak (ru_maxrss) starts from the parent's high-water
    // mark when the child is spawned with vfork, so a benchmark process that
    // once held a large fake answer would inflate it. The child's VmHWM is
    // its own: poll it until the child is gone.
    let polled = std::thread::spawn(move || {
        let mut peak = 0u64;
        let status = format!("/proc/{pid}/status");
        while let Ok(text) = std::fs::read_to_string(&status) {
            let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            else {
                break; // a zombie: its memory is gone
            };
            peak = peak.max(kib);
            std::thread::sleep(Duration::from_millis(1));
        }
        peak
    });
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own un-reaped child; both pointers are to live locals.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    assert_eq!(reaped, pid, "wait4 failed");
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    ProcessCost {
        code: if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            -1
        },
        wall,
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        peak_rss_kib: match polled.join().unwrap_or(0) {
            0 => usage.ru_maxrss as u64,
            kib => kib,
        },
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn overhead(sizes: &Sizes) {
    let llm = FakeLlm::by_progress(vec![
        ok(tool_calls(&[(
            "c1",
            "noteworx_list_notes",
            json!({"tag": "research-active"}),
        )])),
        ok(tool_calls(&[(
            "c2",
            "noteworx_read_note",
            json!({"slug": "n1"}),
        )])),
        ok(tool_calls(&[(
            "c3",
            "noteworx_create_attachment",
            json!({"slug": "n1", "filename": "next.md", "content": "Read the second paper."}),
        )])),
        ok(final_answer("Added next.md to n1.")),
    ])
    .await;
    let mut costs = Vec::new();
    // Folders stay until the end: deleting thousands of files between runs
    // makes the file system slower at creating the next ones, and that is
    // the benchmark's doing, not the harness's.
    let mut keep = Vec::new();
    for _ in 0..sizes.overhead_runs {
        // A fresh notes service and project per run: the same work each time.
        let notes = FakeNoteworx::start(vec![note(
            "n1",
            "Serving small models",
            &["research-active"],
            &"Notes on llama-server. ".repeat(40),
        )])
        .await;
        let project = Project::new();
        project.task("scan", "List, read, attach, answer.");
        project.write_config(&llm.base_url(), &notes.config_section());
        let cost = tokio::task::block_in_place(|| run_binary(project.root(), &["run"]));
        assert_eq!(cost.code, 0, "the 4-turn task succeeds");
        let summary = project.summary_in(&single_run(project.root(), "scan"));
        assert_eq!(summary.turns, 4);
        assert_eq!(notes.attachments("n1").len(), 1);
        costs.push(cost);
        keep.push(project);
    }
    let wall = median(costs.iter().map(|c| c.wall).collect());
    let cpu = median(costs.iter().map(|c| c.cpu).collect());
    let peak = costs.iter().map(|c| c.peak_rss_kib).max().unwrap_or(0);
    println!("\n1. overhead: one 4-turn tool task, whole process, zero-latency endpoint");
    println!("   runs {}", costs.len());
    println!("   wall      {:7.1} ms median   (target < 30 ms)", ms(wall));
    println!("   cpu       {:7.1} ms median", ms(cpu));
    println!("   per turn  {:7.1} ms wall", ms(wall) / 4.0);
    println!(
        "   peak RSS  {:7.1} MiB max     (target < 20 MiB)",
        peak as f64 / 1024.0
    );
}

/// The one run folder of a task run with the real clock.
fn single_run(root: &Path, task: &str) -> std::path::PathBuf {
    let mut runs: Vec<_> = std::fs::read_dir(root.join("logs").join(task))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1);
    runs.pop().unwrap()
}

async fn drain(sizes: &Sizes) {
    let delayed = |body| ok(body).set_delay(sizes.drain_latency);
    let llm = FakeLlm::by_progress(vec![
        delayed(tool_calls(&[("c1", "noteworx_list_notes", json!({}))])),
        delayed(tool_calls(&[(
            "c2",
            "noteworx_read_note",
            json!({"slug": "n1"}),
        )])),
        delayed(final_answer("done")),
    ])
    .await;
    let notes = FakeNoteworx::start(vec![note("n1", "One", &[], "A short note.")]).await;
    println!(
        "\n2. drain: {} tasks x 3 turns, {} ms per model call",
        sizes.drain_tasks,
        sizes.drain_latency.as_millis()
    );
    println!("   concurrency      wall     ideal   wall/ideal   harness cpu   peak RSS");
    let mut keep = Vec::new();
    for &n in sizes.drain_concurrency {
        let project = Project::new();
        for i in 0..sizes.drain_tasks {
            project.task(&format!("task-{i:03}"), "List, read, answer.");
        }
        project.write_config(&llm.base_url(), &notes.config_section());
        let concurrency = n.to_string();
        let cost = tokio::task::block_in_place(|| {
            run_binary(project.root(), &["run", "--concurrency", &concurrency])
        });
        assert_eq!(cost.code, 0, "every task succeeds");
        assert_eq!(project.done().len(), sizes.drain_tasks);
        let calls = (sizes.drain_tasks * 3) as u32;
        let ideal = sizes.drain_latency * calls / n as u32;
        println!(
            "   {n:>11}  {:7.2} s  {:6.2} s   {:9.3}   {:9.2} s   {:5.1} MiB",
            cost.wall.as_secs_f64(),
            ideal.as_secs_f64(),
            cost.wall.as_secs_f64() / ideal.as_secs_f64(),
            cost.cpu.as_secs_f64(),
            cost.peak_rss_kib as f64 / 1024.0
        );
        keep.push(project);
    }
}

/// Characters of what a request puts in the prompt: its messages and tools.
fn prompt_chars(body: &Value) -> usize {
    body["messages"].to_string().len() + body["tools"].to_string().len()
}

/// The research scan of the context benchmark: 30 notes, a listing, five
/// reads, one attachment, an answer — scripted, in an 8192-token window.
struct Scan {
    nwx: FakeNoteworx,
    note_chars: usize,
    script: Vec<Value>,
}

async fn research_scan() -> Scan {
    let paragraph = "The harness keeps prompts small: listings carry no note text, \
                     results are cut, and old results are elided when the window fills. ";
    let notes: Vec<Value> = (0..30)
        .map(|i| {
            note(
                &format!("paper-{i:02}"),
                &format!("Paper {i}: small models and tools"),
                &["research-active"],
                &format!("# Paper {i}\n\n{}", paragraph.repeat(23)),
            )
        })
        .collect();
    let note_chars = notes[0]["content"].as_str().unwrap().len();
    let nwx = FakeNoteworx::start(notes).await;
    let mut script = vec![tool_calls(&[(
        "list",
        "noteworx_list_notes",
        json!({"tag": "research-active", "limit": 30}),
    )])];
    for i in 0..5 {
        script.push(tool_calls(&[(
            &format!("read-{i}"),
            "noteworx_read_note",
            json!({"slug": format!("paper-{i:02}")}),
        )]));
    }
    script.push(tool_calls(&[(
        "attach",
        "noteworx_create_attachment",
        json!({"slug": "paper-00", "filename": "scan.md", "content": "Five papers read; see each."}),
    )]));
    script.push(final_answer("Scanned five papers and attached a summary."));
    // No `usage` in the replies: the harness then sizes the prompt itself,
    // as it must when a server does not say (a fake's numbers would mislead it).
    for body in &mut script {
        body.as_object_mut().unwrap().remove("usage");
    }
    Scan {
        nwx,
        note_chars,
        script,
    }
}

/// Runs the scan against `llm`; returns its project.
async fn run_scan(scan: &Scan, llm: &FakeLlm) -> Project {
    let project = Project::new();
    project.task("research-scan", "Scan the research-active notes.");
    let cfg: Config = project.config(
        &llm.base_url(),
        &format!(
            "[limits]\ncontext_tokens = 8192\nmax_turns = 10\n[model]\nmax_tokens = 1024\n{}",
            scan.nwx.config_section()
        ),
    );
    let outcome = common::run_all(&cfg).await;
    assert_eq!(outcome.exit_code(), 0, "the scan succeeds");
    project
}

async fn context_economy() {
    let scan = research_scan().await;
    let (nwx, note_chars) = (&scan.nwx, scan.note_chars);
    let llm = FakeLlm::by_progress(scan.script.iter().cloned().map(ok).collect()).await;
    let _project = run_scan(&scan, &llm).await;

    // The same conversation, naively: every tool message carries the raw
    // noteworx answer (listing with note text), uncut, nothing elided.
    let http = agent_harness::base::http::client(&agent_harness::base::http::Trust::bundled())
        .unwrap()
        .build()
        .unwrap();
    let raw = |url: String| {
        let http = http.clone();
        async move {
            http.get(url)
                .bearer_auth(common::fake_noteworx::TOKEN)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let mut naive_result = std::collections::HashMap::new();
    naive_result.insert(
        "list".to_string(),
        raw(format!(
            "{}/api/notes?tag=research-active&limit=30",
            nwx.uri()
        ))
        .await,
    );
    for i in 0..5 {
        naive_result.insert(
            format!("read-{i}"),
            raw(format!("{}/api/notes/paper-{i:02}", nwx.uri())).await,
        );
    }
    naive_result.insert(
        "attach".to_string(),
        json!({"id": "1", "filename": "scan.md", "content_type": "text/markdown", "size": 27})
            .to_string(),
    );
    let requests = llm.requests().await;
    let (mut harness_total, mut naive_total, mut harness_max, mut naive_max) = (0, 0, 0, 0);
    for body in &requests {
        let mut naive = body.clone();
        for m in naive["messages"].as_array_mut().unwrap() {
            if m["role"] == "tool" {
                let id = m["tool_call_id"].as_str().unwrap().to_string();
                m["content"] = Value::from(naive_result[&id].clone());
            }
        }
        let (h, n) = (prompt_chars(body), prompt_chars(&naive));
        harness_total += h;
        naive_total += n;
        harness_max = harness_max.max(h);
        naive_max = naive_max.max(n);
    }
    // The harness's own conservative rule: about 3 characters a token.
    let tokens = |chars: usize| chars.div_ceil(3);
    let window = 8192;
    let room = window - 1024;
    println!(
        "\n3. context economy: research scan, 30 notes of {:.1} KB, {} requests, window {window} tokens (max_tokens 1024)",
        note_chars as f64 / 1000.0,
        requests.len()
    );
    println!("                      largest request   total prompt   (tokens at ~3 chars each)");
    println!(
        "   harness           {:>10}      {:>10}",
        tokens(harness_max),
        tokens(harness_total)
    );
    println!(
        "   naive             {:>10}      {:>10}",
        tokens(naive_max),
        tokens(naive_total)
    );
    println!(
        "   harness / naive   {:>9.0}%      {:>9.0}%   (target: total <= 35%, largest <= {room})",
        100.0 * harness_max as f64 / naive_max as f64,
        100.0 * harness_total as f64 / naive_total as f64
    );
    assert_eq!(requests.len(), 8);
    assert!(
        tokens(harness_max) <= room,
        "a request went over the window: {} tokens",
        tokens(harness_max)
    );
}

/// A server answering every POST with `head`, `unit` × `count`, `tail`
/// as one JSON body with `status` (e.g. `200 OK`), generated as it is sent: the benchmark process
/// never holds the body, so it cannot inflate the measured peak (a child
/// started with vfork inherits its parent's high-water mark). A GET (`run`'s
/// look at what answers there) gets an empty model list.
async fn streaming_server(
    status: &'static str,
    head: String,
    unit: Vec<u8>,
    count: usize,
    tail: String,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let unit: std::sync::Arc<[u8]> = unit.into();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (head, unit, tail) = (head.clone(), unit.clone(), tail.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                if seen.starts_with(b"GET ") && !seen.starts_with(b"GET /api/") {
                    // `run`'s look at what answers there: a model list (a
                    // notes listing, `GET /api/notes`, streams as asked).
                    let list = r#"{"object":"list","data":[]}"#;
                    let _ = sock
                        .write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{list}",
                                list.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                    return;
                }
                let len = head.len() + unit.len() * count + tail.len();
                let start = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n{head}"
                );
                if sock.write_all(start.as_bytes()).await.is_err() {
                    return;
                }
                for _ in 0..count {
                    if sock.write_all(&unit).await.is_err() {
                        return; // the harness stopped reading: as it should
                    }
                }
                let _ = sock.write_all(tail.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}

async fn hostile(sizes: &Sizes) {
    println!("\n4. hostile input");
    // A reply of flood_reply_mib MiB: refused at 32 MiB, the record keeps 64 KiB.
    let llm = streaming_server(
        "200 OK",
        "{\"choices\":[{\"message\":{\"content\":\"".into(),
        vec![b'a'; 1024 * 1024],
        sizes.flood_reply_mib,
        "\"}}]}".into(),
    )
    .await;
    let project = Project::new();
    project.task("flood", "Answer.");
    project.write_config(&format!("{llm}/v1"), "");
    let cost = tokio::task::block_in_place(|| run_binary(project.root(), &["run"]));
    assert_eq!(cost.code, 1, "the task fails for good as endpoint_error");
    let s = project.summary_in(&single_run(project.root(), "flood"));
    assert_eq!(s.stop_reason.as_str(), "endpoint_error");
    println!(
        "   {:>4} MiB reply            peak RSS {:6.1} MiB   (target < 200 MiB)",
        sizes.flood_reply_mib,
        cost.peak_rss_kib as f64 / 1024.0
    );

    // Listings carrying note text: one under the 32 MiB cap (read, its text
    // skipped while parsing) and one far over it (a tool error at 32 MiB).
    for mib in [30, sizes.flood_listing_mib] {
        let note_text = "n".repeat(1024 * 1024 - 100);
        let unit = format!(
            "{{\"slug\":\"n\",\"title\":\"Note\",\"tags\":[\"big\"],\"content\":\"{note_text}\"}},"
        );
        let notes = streaming_server(
            "200 OK",
            "{\"notes\":[".into(),
            unit.into_bytes(),
            mib,
            "{\"slug\":\"last\",\"title\":\"Last\"}]}".into(),
        )
        .await;
        let llm = FakeLlm::by_progress(vec![
            ok(tool_calls(&[(
                "c1",
                "noteworx_list_notes",
                json!({"limit": 100}),
            )])),
            ok(final_answer("listed")),
        ])
        .await;
        let project = Project::new();
        project.task("listing", "List my notes.");
        project.write_config(
            &llm.base_url(),
            &format!("[tools.noteworx]\nbase_url = \"{notes}\"\n"),
        );
        let cost = tokio::task::block_in_place(|| run_binary(project.root(), &["run"]));
        assert_eq!(cost.code, 0, "the task goes on after the listing");
        let tools = common::jsonl(&single_run(project.root(), "listing").join("tools.jsonl"));
        let answered = if tools[0]["is_error"] == true {
            "a tool error"
        } else {
            "read"
        };
        assert_eq!(answered == "read", mib <= 30, "{}", tools[0]["result"]);
        println!(
            "   {mib:>4} MiB notes listing    peak RSS {:6.1} MiB   (target < 250 MiB; {answered})",
            cost.peak_rss_kib as f64 / 1024.0
        );
    }

    expanding_bodies(sizes).await;

    // Reading replies built to make the parsers slow.
    let n = sizes.pattern_bytes;
    let fill = |unit: &str| unit.repeat(n / unit.len());
    let patterns: Vec<(&str, String)> = vec![
        (
            "nested [ after a call",
            format!("<|tool_call>call:webfetch{{url:{}", fill("[")),
        ),
        ("<|tool_call> openers", fill("<|tool_call>")),
        ("<tool_call> openers", fill("<tool_call>")),
        (
            "unclosed <|\"|> strings",
            fill("<|tool_call>call:a{b:<|\"|>x"),
        ),
        ("bare values without end", fill("<|tool_call>call:a{b:c")),
        ("<think> openers", fill("<think>a")),
        ("</think> closers", fill("</think>a")),
        ("<|channel> openers", fill("<|channel>thought")),
        (
            "JSON calls never closed",
            fill("<tool_call>{\"name\":\"a\",\"arguments\":{"),
        ),
        ("plain JSON, unclosed {\"", fill("{\"")),
        (
            "plain JSON, one long string",
            format!(
                "{{\"name\": \"webfetch\", \"arguments\": {{\"url\": \"{}",
                fill("x")
            ),
        ),
        ("plain JSON, closers that break", fill("{\"a\": ]")),
        (
            "plain JSON, calls of no tool",
            fill("{\"name\": \"other\", \"arguments\": {}}\n"),
        ),
    ];
    println!(
        "   reading {:.1} MB replies (target < 1 s each):",
        n as f64 / 1e6
    );
    for (name, content) in patterns {
        let msg = agent_harness::wire::chat::ResponseMessage {
            content: Some(content),
            ..Default::default()
        };
        let t = Instant::now();
        let webfetch = agent_harness::wire::reply::OfferedTool {
            name: "webfetch".into(),
            params: vec!["url".into()],
            required: vec!["url".into()],
        };
        let against = agent_harness::wire::reply::ReadAgainst {
            offered: std::slice::from_ref(&webfetch),
            ..agent_harness::wire::reply::ReadAgainst::NOTHING
        };
        let reply = agent_harness::wire::reply::read_reply(&msg, Some("stop"), "b", &against);
        let took = t.elapsed();
        assert!(reply.calls.is_empty(), "{name}: nothing in it is a call");
        println!("     {name:<28} {:8.1} ms", ms(took));
    }
}

/// Bodies under the 32 MiB cap made of many tiny values, which a parsed
/// tree would hold at many times their size: a reply padded with numbers, a
/// reply holding thousands of tool calls, an error body padded the same way,
/// and a notes listing whose tags are numbers.
async fn expanding_bodies(sizes: &Sizes) {
    let ones = |mib: usize| (b"1,".to_vec(), mib * 1024 * 1024 / 2);
    let call = br#"{"id":"c","type":"function","function":{"name":"noteworx_list_notes","arguments":{"limit":1}}},"#;
    type Case = (&'static str, &'static str, String, (Vec<u8>, usize), String);
    let cases: Vec<Case> = vec![
        (
            "reply padded with numbers",
            "200 OK",
            r#"{"choices":[{"message":{"content":"done"},"finish_reason":"stop"}],"pad":["#.into(),
            ones(sizes.expanding_mib),
            "1]}".into(),
        ),
        (
            "reply of many tool calls",
            "200 OK",
            r#"{"choices":[{"finish_reason":"tool_calls","message":{"content":"","tool_calls":["#
                .into(),
            (
                call.to_vec(),
                sizes.expanding_mib * 1024 * 1024 / call.len(),
            ),
            r#"{"id":"z","type":"function","function":{"name":"x","arguments":"{}"}}]}}]}"#.into(),
        ),
        (
            "error padded with numbers",
            "400 Bad Request",
            r#"{"error":{"message":"no","pad":["#.into(),
            ones(sizes.expanding_mib),
            "1]}}".into(),
        ),
    ];
    for (name, status, head, (unit, count), tail) in cases {
        let llm = streaming_server(status, head, unit, count, tail).await;
        let project = Project::new();
        project.task("expand", "Answer.");
        project.write_config(&format!("{llm}/v1"), "[limits]\nmax_turns = 2\n");
        let cost = tokio::task::block_in_place(|| run_binary(project.root(), &["run"]));
        let s = project.summary_in(&single_run(project.root(), "expand"));
        println!(
            "   {:>4} MiB {name:<27} peak RSS {:6.1} MiB   (target < 250 MiB; {})",
            sizes.expanding_mib,
            cost.peak_rss_kib as f64 / 1024.0,
            s.stop_reason.as_str()
        );
    }
    let tags = streaming_server(
        "200 OK",
        r#"{"notes":[{"slug":"n","title":"Note","tags":["#.into(),
        ones(sizes.expanding_mib).0,
        ones(sizes.expanding_mib).1,
        "1]}]}".into(),
    )
    .await;
    let llm = FakeLlm::by_progress(vec![
        ok(tool_calls(&[("c1", "noteworx_list_notes", json!({}))])),
        ok(final_answer("listed")),
    ])
    .await;
    let project = Project::new();
    project.task("tags", "List my notes.");
    project.write_config(
        &llm.base_url(),
        &format!("[tools.noteworx]\nbase_url = \"{tags}\"\n"),
    );
    let cost = tokio::task::block_in_place(|| run_binary(project.root(), &["run"]));
    assert_eq!(cost.code, 0);
    let tools = common::jsonl(&single_run(project.root(), "tags").join("tools.jsonl"));
    assert_eq!(tools[0]["is_error"], false, "{}", tools[0]["result"]);
    println!(
        "   {:>4} MiB listing of numeric tags    peak RSS {:6.1} MiB   (target < 250 MiB)",
        sizes.expanding_mib,
        cost.peak_rss_kib as f64 / 1024.0
    );
}

/// A killed-on-drop child process.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The real llama-server of `scripts/stack`, started with an 8192-token
/// window on a free port, when the stack is installed: its `host:port`.
async fn real_llama_server() -> Option<(Running, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/stack"))
        .arg("paths")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let paths: std::collections::HashMap<String, String> = String::from_utf8(out.stdout)
        .ok()?
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let port = common::closed_port().to_string();
    let child = Command::new(paths.get("LLAMA_SERVER")?)
        .args([
            "-m",
            paths.get("WEIGHTS")?,
            "--jinja",
            "--chat-template-file",
        ])
        .arg(paths.get("CHAT_TEMPLATE")?)
        .args(["-c", "8192", "-np", "1", "-t", "2", "--host", "127.0.0.1"])
        .args(["--port", &port, "--no-webui"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let server = Running(child);
    let addr = format!("127.0.0.1:{port}");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) {
        let health =
            agent_harness::base::http::client(&agent_harness::base::http::Trust::bundled())
                .unwrap()
                .build()
                .unwrap()
                .get(format!("http://{addr}/health"))
                .send()
                .await;
        if health.is_ok_and(|r| r.status().is_success()) {
            return Some((server, addr));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// Forwards a request to the real llama-server at `addr`, blocking: the
/// fake endpoint answers chat from its script but counts with the real
/// template and tokenizer.
struct Proxy {
    addr: String,
}

impl wiremock::Respond for Proxy {
    fn respond(&self, req: &wiremock::Request) -> wiremock::ResponseTemplate {
        use std::io::{Read, Write};
        let mut sock = std::net::TcpStream::connect(&self.addr).unwrap();
        write!(
            sock,
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            req.url.path(),
            self.addr,
            req.body.len()
        )
        .unwrap();
        sock.write_all(&req.body).unwrap();
        let mut answer = Vec::new();
        sock.read_to_end(&mut answer).unwrap();
        let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&answer[..split]);
        assert!(
            !head.to_ascii_lowercase().contains("chunked"),
            "a chunked answer: {head}"
        );
        let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
        wiremock::ResponseTemplate::new(status)
            .set_body_raw(answer[split + 4..].to_vec(), "application/json")
    }
}

async fn counting(sizes: &Sizes) {
    println!(
        "\n5. counting prompts on the real llama-server (Gemma 3 270M weights, Gemma 4 template)"
    );
    let Some((_server, addr)) = real_llama_server().await else {
        println!("   skipped: the real stack is not installed (scripts/stack install)");
        return;
    };
    let scan = research_scan().await;
    let script = || scan.script.iter().cloned().map(ok).collect::<Vec<_>>();

    // The scan estimated, each of its requests then counted by the server.
    let estimating = FakeLlm::by_progress(script()).await;
    let estimated = run_scan(&scan, &estimating).await;
    let project = Project::new();
    let cfg = project.config(&format!("http://{addr}/v1"), "");
    let ep = agent_harness::endpoint::Endpoint::new(&cfg.endpoint, &cfg.tls.trust).unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(60);
    let lines =
        common::jsonl(&single_run(estimated.root(), "research-scan").join("conversation.jsonl"));
    let repeats = if sizes.overhead_runs > 2 { 5 } else { 1 };
    let (mut errors, mut took) = (Vec::new(), Vec::new());
    println!("   request   estimated   counted   estimate over count   count takes (2 calls)");
    for (i, l) in lines.iter().enumerate() {
        let mut exact = 0;
        for _ in 0..repeats {
            let t = Instant::now();
            exact = ep
                .counter()
                .count_prompt(&l["request"], 0, deadline(), &cancel)
                .await
                .unwrap();
            took.push(t.elapsed());
        }
        let estimate = l["context"]["prompt_tokens"].as_u64().unwrap();
        let over = 100.0 * (estimate as f64 - exact as f64) / exact as f64;
        errors.push(over);
        println!(
            "   {:>7}   {estimate:>9}   {exact:>7}   {over:>18.1}%   {:>10.1} ms",
            i + 1,
            ms(*took.last().unwrap())
        );
    }
    errors.sort_by(f64::total_cmp);
    println!(
        "   the estimate is {:.0}% to {:.0}% over the count (median {:.0}%); counting takes {:.1} ms a turn (median)",
        errors[0],
        errors[errors.len() - 1],
        errors[errors.len() / 2],
        ms(median(took))
    );

    // The scan again, every request counted by the server before it goes.
    let counted_llm = FakeLlm::by_progress(script()).await;
    for route in ["/apply-template", "/tokenize"] {
        wiremock::Mock::given(wiremock::matchers::method("POST"))
            .and(wiremock::matchers::path(route))
            .respond_with(Proxy { addr: addr.clone() })
            .mount(&counted_llm.server)
            .await;
    }
    let counted = run_scan(&scan, &counted_llm).await;
    let lines =
        common::jsonl(&single_run(counted.root(), "research-scan").join("conversation.jsonl"));
    let sizes: Vec<u64> = lines
        .iter()
        .map(|l| {
            assert_eq!(l["context"]["counted"], "exact");
            l["context"]["prompt_tokens"].as_u64().unwrap()
        })
        .collect();
    let elided = |lines: &[Value]| -> usize {
        lines
            .iter()
            .map(|l| {
                l["context"]["elided_call_ids"]
                    .as_array()
                    .map_or(0, Vec::len)
            })
            .sum()
    };
    let estimated_lines =
        common::jsonl(&single_run(estimated.root(), "research-scan").join("conversation.jsonl"));
    println!(
        "   counted exactly: largest request {} tokens (budget {}), all {} requests {} tokens; {} result(s) elided (estimating: {})",
        sizes.iter().max().unwrap(),
        8192 - 1024,
        sizes.len(),
        sizes.iter().sum::<u64>(),
        elided(&lines),
        elided(&estimated_lines)
    );
    assert!(sizes.iter().all(|n| *n <= 8192 - 1024));
}

/// simonw/llm, when it is installed: `LLM_BIN`, or `llm` on `PATH`.
fn llm_bin() -> Option<std::path::PathBuf> {
    if let Some(bin) = std::env::var_os("LLM_BIN") {
        return Some(bin.into());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("llm"))
        .find(|p| p.is_file())
}

/// The same two-turn chain for simonw/llm: its model is the fake at
/// `base_url`, its one tool a Python function.
fn llm_chain(bin: &Path, home: &Path, base_url: &str) -> Command {
    std::fs::write(
        home.join("extra-openai-models.yaml"),
        format!("- model_id: fake\n  model_name: fake-gemma\n  api_base: \"{base_url}\"\n  supports_tools: true\n"),
    )
    .unwrap();
    let mut cmd = Command::new(bin);
    cmd.args([
        "-m",
        "fake",
        "--no-stream",
        "--functions",
        "def read_note(slug: str) -> str:\n    \"Read a note.\"\n    return \"Notes on llama-server.\"\n",
        "Read note n1 and say what it says.",
    ])
    .current_dir(home)
    .env("LLM_USER_PATH", home)
    .env("OPENAI_API_KEY", "unused");
    cmd
}

/// [`measure`], with the peak read by GNU time (`/usr/bin/time`) when it is
/// there: a process of a few milliseconds ends between two polls of its
/// `VmHWM`, and GNU time forks it from a process of its own size, so the
/// kernel's `ru_maxrss` is the child's (not this benchmark's, as after a
/// vfork).
fn measure_peak(cmd: Command) -> ProcessCost {
    let gnu_time = Path::new("/usr/bin/time");
    if !gnu_time.is_file() {
        return measure(cmd);
    }
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut timed = Command::new(gnu_time);
    timed
        .args(["-f", "%M", "-o"])
        .arg(out.path())
        .arg(cmd.get_program())
        .args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        timed.current_dir(dir);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => timed.env(k, v),
            None => timed.env_remove(k),
        };
    }
    let mut cost = measure(timed);
    let kib = std::fs::read_to_string(out.path()).unwrap_or_default();
    if let Some(kib) = kib.lines().last().and_then(|l| l.trim().parse().ok()) {
        cost.peak_rss_kib = kib;
    }
    cost
}

/// The harness binary run with `args` in `dir`, as [`run_binary`] runs it.
fn harness_in(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(dir)
        .env("NOTEWORX_TOKEN", common::fake_noteworx::TOKEN)
        .env("AGENT_HARNESS_LOG", "warn");
    cmd
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The process `make` builds, run twice: its wall time alone, its peak
/// under GNU time (whose own start-up would add to the wall time).
fn timed_and_peaked(make: impl Fn() -> Command) -> ProcessCost {
    let timed = tokio::task::block_in_place(|| measure(make()));
    let peaked = tokio::task::block_in_place(|| measure_peak(make()));
    ProcessCost {
        code: timed.code.max(peaked.code),
        peak_rss_kib: peaked.peak_rss_kib,
        ..timed
    }
}

async fn lean(sizes: &Sizes) {
    let runs = sizes.overhead_runs;
    let alone = |dir: &Path, args: &[&str]| {
        let costs: Vec<ProcessCost> = (0..runs)
            .map(|_| timed_and_peaked(|| harness_in(dir, args)))
            .collect();
        assert!(costs.iter().all(|c| c.code == 0), "{args:?} exits 0");
        costs
    };
    let nowhere = Project::new();
    let help = alone(nowhere.root(), &["--help"]);
    let checked = Project::new();
    checked.write_config("http://127.0.0.1:8080/v1", "");
    checked.task("example", "Say hello.");
    let check = alone(checked.root(), &["check"]);

    let chain = |tool: &str| {
        vec![
            ok(tool_calls(&[("c1", tool, json!({"slug": "n1"}))])),
            ok(final_answer("It says: notes on llama-server.")),
        ]
    };
    let ours = FakeLlm::by_progress(chain("noteworx_read_note")).await;
    let theirs = FakeLlm::by_progress(chain("read_note")).await;
    let llm = llm_bin();
    let (mut harness, mut other, mut keep) = (Vec::new(), Vec::new(), Vec::new());
    // One of each first, not counted: both start from a warm page cache.
    for round in 0..=runs {
        let notes = FakeNoteworx::start(vec![note(
            "n1",
            "Serving small models",
            &[],
            "Notes on llama-server.",
        )])
        .await;
        // A project for each of the two runs: each has one run folder.
        let projects = [Project::new(), Project::new()];
        for project in &projects {
            project.task("read", "Read note n1 and say what it says.");
            project.write_config(&ours.base_url(), &notes.config_section());
        }
        let next = std::cell::Cell::new(0);
        let cost = timed_and_peaked(|| {
            let project = &projects[next.replace(1)];
            harness_in(project.root(), &["run"])
        });
        assert_eq!(cost.code, 0, "the two-turn chain succeeds");
        for project in &projects {
            let run = single_run(project.root(), "read");
            assert_eq!(project.summary_in(&run).turns, 2);
        }
        if let Some(bin) = &llm {
            let homes = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
            let next = std::cell::Cell::new(0);
            let cost = timed_and_peaked(|| {
                llm_chain(bin, homes[next.replace(1)].path(), &theirs.base_url())
            });
            assert_eq!(cost.code, 0, "llm runs the same chain");
            if round > 0 {
                other.push(cost);
            }
        }
        if round > 0 {
            harness.push(cost);
        }
        keep.push(projects);
    }
    if llm.is_some() {
        assert_eq!(
            theirs.requests().await.len(),
            4 * (runs + 1),
            "two requests a chain"
        );
    }
    let row = |name: &str, costs: &[ProcessCost]| {
        let mut peaks: Vec<u64> = costs.iter().map(|c| c.peak_rss_kib).collect();
        peaks.sort_unstable();
        let (peak, most) = (peaks[peaks.len() / 2], peaks[peaks.len() - 1]);
        let wall = median(costs.iter().map(|c| c.wall).collect());
        println!(
            "   {name:<22} {:6.1} MiB median peak RSS ({:.1} max), {:7.1} ms median wall",
            mib(peak),
            mib(most),
            ms(wall)
        );
        (peak as f64, ms(wall))
    };
    println!(
        "\n9. lean: one process, {runs} runs each (median; wall time alone, peak by {}); {}",
        if Path::new("/usr/bin/time").is_file() {
            "GNU time"
        } else {
            "polling VmHWM: too slow for a process of a few ms"
        },
        bin()
    );
    row("--help", &help);
    row("check", &check);
    let (our_rss, our_wall) = row("chain: agent-harness", &harness);
    match llm {
        Some(bin) => {
            let (their_rss, their_wall) = row("chain: simonw/llm", &other);
            println!(
                "   agent-harness is {:.0}× faster and {:.1}× leaner on the chain ({})",
                their_wall / our_wall,
                their_rss / our_rss,
                bin.display()
            );
        }
        None => println!("   simonw/llm not found (LLM_BIN, or `llm` on PATH): no comparison"),
    }
}
