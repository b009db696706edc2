//! MCP servers as hostile input (docs/untrusted-input.md; docs/tools.md,
//! "Tools from MCP servers"): a raw JSON-RPC server
//! (`tests/mcp/hostile_server.py`) that pages forever, floods requests,
//! notifications and stderr, dies mid-call, answers malformed results, leaks
//! the secret it is passed, or never answers — and configuration mistakes that
//! must not pass as success.

use std::process::Command;
use std::time::{Duration, Instant};

use agent_harness::agent::StopReason;
use agent_harness::drain::RunOutcome;
use agent_harness::records::Status;
use serde_json::json;

use crate::common::mcp::*;
use crate::common::*;

/// `[mcp.servers.NAME]` running the hostile server in `modes`.
fn server(name: &str, modes: &[&str], extra: &str) -> String {
    mcp_server(name, "hostile_server.py", modes, extra)
}

/// A typo in `write_tools` is no setup fault (a server's answer does not stop
/// the inbox: docs/tools.md, "Tools from MCP servers"), and it never makes the
/// real write tool a read: with a name the server does not list, every tool not
/// marked read-only counts as a write, so under --dry-run it is an intent,
/// never sent. The run says what to fix and exits 1.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_write_tools_typo_is_said_and_exits_1_and_never_makes_a_write_a_read() {
    let s = scenario()
        .by_progress(vec![
            ok(tool_calls(&[("c1", "h__write_file", json!({}))])),
            ok(final_answer("done")),
        ])
        .config(&server("h", &[], "write_tools = [\"write_fil\"]"))
        .env(mcp_env)
        .task("w", "+++\ntools = [\"h__write_file\"]\n+++\nWrite.")
        .task("x", "+++\ntools = []\n+++\nNo tools.")
        .build()
        .await;
    let outcome = s.run_with(run_options(1, true)).await;
    let RunOutcome::Finished(ref tally) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(tally.setup_fault, None);
    assert_eq!(agent_harness::app::exit::Exit::exit_code(&outcome), 1);
    assert!(
        tally.problems.iter().any(|p| p.contains(
            "MCP server h does not list write_fil (it lists: echo, write_file): fix [mcp.servers.h] tools / write_tools"
        )),
        "{:?}",
        tally.problems
    );
    let lines = s.tool_lines("w");
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0]
            .result
            .starts_with("Dry run: h__write_file counts as called (nothing was changed)"),
        "the write is an intent under --dry-run, never sent: {}",
        lines[0].result
    );
    assert!(
        s.run_log("w")
            .contains("MCP server h does not list write_fil"),
        "{}",
        s.run_log("w")
    );
    assert_eq!(s.summary("x").status, Status::Succeeded, "the rest ran");
}

/// One tool whose schema nests past what the JSON parser takes (300
/// levels) is that tool not offered — the listing still arrives, the
/// server is up and its other tools are offered.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_schema_nested_past_the_parser_is_one_tool_not_offered() {
    let s = scenario()
        .by_progress(vec![
            ok(tool_calls(&[("c1", "h__echo", json!({"text": "hi"}))])),
            ok(final_answer("done")),
        ])
        .config(&server("h", &["deep"], "startup_timeout_secs = 3600"))
        .env(mcp_env)
        .task("t", "Echo.")
        .build()
        .await;
    // A listing the harness could not read would be waited out for an
    // hour: such a run fails here.
    let outcome = before_hang_limit("the listing was waited out", s.run()).await;
    assert_eq!(Exit::exit_code(&outcome), 0, "{outcome:?}");
    assert_contains(
        s.run_log("t"),
        "tool deep not offered: its input schema nests deeper than 32 levels",
    );
    assert_eq!(s.tool_lines("t")[0].result, "called echo");
}

/// A server's child that leaves its process group (`setsid()`) is ended
/// with the server — even though the server exits by itself once its
/// connection closes (its stdin ends), after which the child is no longer
/// found below it: the harness notes it before it closes the connection.
/// (Noted only after, it was found or not as the scheduler had it: the
/// test failed under load.)
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_servers_child_that_left_its_group_is_stopped_with_it() {
    let s = scenario()
        .replies(vec![final_answer("done")])
        .env(mcp_env)
        .task("t", "Go.")
        .build()
        .await;
    let pid = s.root().join("detached.pid");
    let setsid = format!("setsid={}", pid.display());
    s.rewrite_config(&server("h", &[&setsid], ""));
    s.run().await;
    // The server wrote it before it answered `initialize`.
    let text = std::fs::read_to_string(&pid).unwrap();
    assert!(!text.trim().is_empty(), "no pid in {}", pid.display());
    // SIGTERM, then SIGKILL 2 s later: a generous bound for a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !process_gone(&text) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let gone = process_gone(&text);
    if !gone {
        let _ = Command::new("kill").args(["-9", text.trim()]).status();
    }
    assert!(gone, "process {text} outlived the run");
}

/// A listing that pages on and on is read for 8 pages and 256 tools at
/// most (the rest is said, not read): its memory is bounded.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn endless_pagination_is_cut_short() {
    let s = scenario()
        .replies(vec![final_answer("done")])
        .env(mcp_env)
        .task("p", "+++\ntools = [\"h__echo\"]\n+++\nGo.")
        .build()
        .await;
    let count = s.root().join("pages");
    let modes = ["endlesspages", &format!("count={}", count.display())];
    s.rewrite_config(&server("h", &modes, "startup_timeout_secs = 5"));
    s.run().await;
    let pages = std::fs::read_to_string(&count).unwrap().len();
    // Each page is 1500 tools, 3 MB: the first already holds more than
    // MAX_TOOLS tools.
    assert!(pages <= 8, "{pages} pages of tools/list were read and kept");
    let log = s.run_log("p");
    assert_contains(&log, "the listing goes on past the 256 tools read");
}

/// Runs the binary; gives its peak memory (KiB, its own VmHWM, polled)
/// and its stderr.
fn measured(project: &Project) -> (u64, String) {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("agent-harness"))
        .arg("run")
        .current_dir(project.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
        text
    });
    let mut peak = 0u64;
    while child.try_wait().unwrap().is_none() {
        let kib = std::fs::read_to_string(&status).ok().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        });
        peak = peak.max(kib.unwrap_or(0));
        std::thread::sleep(Duration::from_millis(5));
    }
    (peak, reader.join().unwrap())
}

/// Requests a server sends on its own (a million pings) are dropped as
/// they are read: the harness's memory stays bounded and the real call is
/// answered.
#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn a_request_flood_does_not_grow_memory() {
    let s = scenario()
        .by_progress(vec![
            ok(tool_calls(&[("c1", "h__echo", json!({"text": "x"}))])),
            ok(final_answer("done")),
        ])
        .config(&server(
            "h",
            &["pingflood", "flood=1000000"],
            // A million pings take the server seconds to send; the bound
            // under test is memory, not how fast two busy cores drain them.
            "call_timeout_secs = 90",
        ))
        .task("f", "+++\ntools = [\"h__echo\"]\n+++\nGo.")
        .build_blocking();
    let (rss, _) = measured(&s);
    assert!(rss < 200 * 1024, "peak memory {} MiB", rss / 1024);
    let lines = jsonl(&the_run_dir(&s, "f").join("tools.jsonl"));
    assert_eq!(lines[0]["result"], "called echo", "{lines:?}");
}

/// What a server sends never reaches the harness's own stderr (the
/// journal) by the SDK's warnings: 20 notifications of 1 MB each before
/// `initialize` is answered leave it short.
#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn a_server_cannot_flood_the_harness_stderr() {
    let s = scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .config(&server("h", &["preinitspam", "flood=20"], ""))
        .task("s", "+++\ntools = [\"h__echo\"]\n+++\nGo.")
        .build_blocking();
    let (_, stderr) = measured(&s);
    assert!(
        stderr.len() < 256 * 1024,
        "{} bytes on the harness's stderr",
        stderr.len()
    );
}

/// docs/tools.md, "Tools from MCP servers": a server that dies while a task may
/// use it ends that task retryable, even when the model answered after the
/// failed call.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_dying_mid_task_does_not_pass_as_success() {
    let scene = scenario()
        .by_progress(vec![
            ok(tool_calls(&[("c1", "h__echo", json!({"text": "x"}))])),
            ok(final_answer("done")),
        ])
        .config(&server("h", &["exitcall"], ""))
        .env(mcp_env)
        .task("d", "+++\ntools = [\"h__echo\"]\n+++\nGo.")
        .build()
        .await;
    let outcome = scene.run().await;
    let s = scene.summary("d");
    assert_ne!(s.status, Status::Succeeded, "{outcome:?}");
    assert_eq!(s.stop_reason, StopReason::ToolServerUnavailable);
    assert_eq!(scene.inbox(), ["d.md"]);
}

/// One malformed result (an unknown content type) is an error for that
/// call only: the server stays up for the next.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_malformed_result_is_an_error_for_that_call_only() {
    let s = scenario()
        .by_progress(vec![
            ok(tool_calls(&[("c1", "h__echo", json!({"text": "weird"}))])),
            ok(tool_calls(&[("c2", "h__echo", json!({"text": "fine"}))])),
            ok(final_answer("done")),
        ])
        .config(&server("h", &["weird"], ""))
        .env(mcp_env)
        .task("m", "+++\ntools = [\"h__echo\"]\n+++\nGo.")
        .build()
        .await;
    s.run().await;
    let lines = s.tool_lines("m");
    assert!(lines[0].is_error);
    assert_eq!(lines[1].result, "called echo", "{}", lines[1].result);
}

/// `test-runpod` stopped by SIGTERM while a server hangs in its start
/// leaves no server behind (it is in its own process group, out of reach
/// of a terminal's Ctrl-C).
#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn test_runpod_stopped_by_sigterm_leaves_no_server() {
    let s = offline().build_blocking();
    let pid = s.root().join("srv.pid");
    s.rewrite_config(&server(
        "h",
        &["noinit", "ignoreeof", &format!("pid={}", pid.display())],
        "",
    ));
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("agent-harness"))
        .current_dir(s.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .arg("test-runpod")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        pid.exists()
    });
    assert!(started);
    std::thread::sleep(Duration::from_millis(300));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let left = !pid_file_gone(&pid);
    if left {
        let p = std::fs::read_to_string(&pid).unwrap();
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(p.trim().parse().unwrap()).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    assert!(!left, "the server outlived test-runpod's SIGTERM");
}

/// A key in a streamable-HTTP `url` (a query value or a password) is a
/// secret: redacted from summary.json and run.log.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_key_in_the_url_is_redacted() {
    let extra = "[mcp.servers.web]\nurl = \"http://127.0.0.1:9/mcp?api_key=sk-live-URLKEY1234\"\nstartup_timeout_secs = 5";
    let s = scenario()
        .replies(vec![final_answer("done")])
        .config(extra)
        .env(mcp_env)
        .task("u", "+++\ntools = [\"web__x\"]\n+++\nGo.")
        .ran()
        .await;
    let error = s.summary("u").error.unwrap();
    assert!(!error.contains("URLKEY1234"), "{error}");
    assert!(!s.run_log("u").contains("URLKEY1234"));
}

/// A passed secret that a server puts where a line or a description is cut
/// is redacted before the cut: no part of it reaches run.log or the model.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn no_part_of_a_passed_secret_is_recorded() {
    let s = scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .config(&server("h", &["leak"], "env_pass = [\"MCP_TOKEN\"]"))
        .env(mcp_env)
        .task("l", "+++\ntools = [\"h__echo\"]\n+++\nGo.")
        .ran()
        .await;
    let head = &PASSED[..8];
    let requests = serde_json::to_string(&s.requests().await).unwrap();
    assert!(
        !requests.contains(head),
        "part of the secret was sent to the model"
    );
    assert!(
        !s.run_log("l").contains(&PASSED[..4]),
        "part of the secret is in run.log"
    );
}

/// An allowlist that names a tool the server does not list (a typo) fails
/// `test-runpod`, naming it.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn test_runpod_fails_an_allowlist_the_server_does_not_meet() {
    let s = scenario()
        .replies(vec![
            final_answer("Hello."),
            tool_calls(&[("call_1", "get_current_time", json!({"city": "Paris"}))]),
            final_answer("It is noon in Paris."),
        ])
        .config(&server("h", &[], "tools = [\"ecko\"]"))
        .env(mcp_env)
        .build()
        .await;
    let cfg = s.cfg();
    let ep = agent_harness::endpoint::Endpoint::new(&cfg.endpoint, &cfg.tls.trust).unwrap();
    let mut out = Vec::new();
    let passed = agent_harness::app::smoke::test_endpoint(&cfg, &ep, &mut out).await;
    let out = String::from_utf8(out).unwrap();
    assert!(!passed, "test-runpod passed:\n{out}");
    assert_contains(&out, "FAIL mcp h: MCP server h does not list ecko");
}
