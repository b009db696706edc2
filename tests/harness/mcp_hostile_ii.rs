//! MCP servers as hostile input, continued: a server that pings, lists
//! past what is read, puts secrets and escapes in names and errors, dies
//! unnoticed, answers one HTTP 500; a url with keys in it; concurrency.

use std::path::Path;
use std::time::Duration;

use agent_harness::agent::StopReason;
use agent_harness::config::Config;
use agent_harness::drain::{RunOptions, RunOutcome};
use agent_harness::records::Status;
use serde_json::{Value, json};

use crate::common::mcp::*;
use crate::common::*;

fn server(name: &str, file: &str, modes: &[&str], extra: &str) -> String {
    mcp_server(name, file, modes, extra)
}

fn config(project: &Project, llm: &FakeLlm, extra: &str) -> Config {
    mcp_config(project, llm, extra)
}

async fn run_n(cfg: &Config, concurrency: usize) -> RunOutcome {
    let opts = RunOptions {
        concurrency,
        ..RunOptions::default()
    };
    run_stopping(cfg, opts).await
}

fn names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// MCP: "The receiver MUST respond promptly" to a ping. A server (official
/// Python SDK) that pings the client inside a tool call is answered, and
/// its call returns.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_ping_is_answered() {
    let project = Project::new();
    let llm = FakeLlm::by_progress(vec![
        ok(tool_calls(&[("c1", "p__pinged", json!({}))])),
        ok(final_answer("done")),
    ])
    .await;
    let cfg = config(
        &project,
        &llm,
        &server("p", "ping_server.py", &[], "call_timeout_secs = 5"),
    );
    project.task("p", "+++\ntools = [\"p__pinged\"]\n+++\nGo.");
    run_n(&cfg, 1).await;
    let lines = project.tool_lines("p");
    assert_eq!(lines[0].result, "pong", "{:?}", lines[0]);
}

/// A tool on the allowlist that the server lists on page 10 (one tool a
/// page, past the 8 read) is no typo: the run does not stop with a setup
/// fault, and run.log says the listing was cut before it.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn an_allowlisted_tool_past_the_pages_read_is_no_setup_fault() {
    let project = Project::new();
    let llm = FakeLlm::by_progress(vec![ok(final_answer("done"))]).await;
    let cfg = config(
        &project,
        &llm,
        &server("r", "raw_server.py", &["onepage=10"], "tools = [\"t9\"]"),
    );
    project.task("x", "+++\ntools = [\"r__t9\"]\n+++\nGo.");
    let outcome = run_n(&cfg, 1).await;
    let s = project.summary("x");
    assert_ne!(
        s.stop_reason,
        StopReason::SetupFault,
        "{outcome:?}: {:?}",
        s.error
    );
}

/// The same listing in another order offers the same, also past the 128
/// tools a server may offer.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn the_offer_past_128_tools_does_not_depend_on_listing_order() {
    let mut offered = Vec::new();
    for order in [&["many=200"][..], &["many=200", "rev"][..]] {
        let project = Project::new();
        let llm = FakeLlm::by_progress(vec![ok(final_answer("done"))]).await;
        let cfg = config(&project, &llm, &server("r", "raw_server.py", order, ""));
        project.task("x", "Go.");
        run_n(&cfg, 1).await;
        let req = llm.requests().await;
        let mut n = names(&req[0]);
        n.retain(|n| n.starts_with("r__"));
        offered.push(n);
    }
    assert_eq!(offered[0].len(), 128);
    assert_eq!(offered[0], offered[1]);
}

/// A passed secret in a name the server lists is redacted before the name
/// is cut (80 characters) for a message: no part of it reaches
/// summary.json, run.log or test-runpod's output.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn no_part_of_a_secret_in_a_listed_name_is_recorded() {
    let project = Project::new();
    let llm = FakeLlm::by_progress(vec![ok(final_answer("done"))]).await;
    let cfg = config(
        &project,
        &llm,
        &server(
            "r",
            "raw_server.py",
            &["longname"],
            "env_pass = [\"MCP_TOKEN\"]\ntools = [\"ecko\"]",
        ),
    );
    project.task("x", "+++\ntools = [\"r__ecko\"]\n+++\nGo.");
    run_n(&cfg, 1).await;
    let s = project.summary("x");
    let error = s.error.unwrap_or_default();
    let head = &PASSED[..10];
    assert_eq!(s.stop_reason, StopReason::InvalidTask, "{error}");
    let records = project.all_records();
    assert!(
        !error.contains(head) && !records.contains(head),
        "part of the secret recorded: {error}"
    );
}

/// An `initialize` error message from the server is redacted before it is
/// cut for a message, and its terminal escapes are not recorded.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn an_initialize_error_is_redacted_before_its_cut() {
    let head = &PASSED[..10];
    let mut seen = Vec::new();
    for pad in [230, 240, 250, 260, 270, 280] {
        let project = Project::new();
        let llm = FakeLlm::by_progress(vec![ok(final_answer("done"))]).await;
        let pad = format!("pad={pad}");
        let cfg = config(
            &project,
            &llm,
            &server(
                "r",
                "raw_server.py",
                &["initerr", &pad],
                "env_pass = [\"MCP_TOKEN\"]",
            ),
        );
        project.task("x", "+++\ntools = [\"r__echo\"]\n+++\nGo.");
        run_n(&cfg, 1).await;
        let s = project.summary("x");
        let error = s.error.unwrap_or_default();
        assert!(!error.contains('\u{1b}'), "{error:?}");
        if error.contains(head) || project.all_records().contains(head) {
            seen.push(error);
        }
    }
    assert!(seen.is_empty(), "part of the secret recorded: {seen:#?}");
}

/// `url` keys: a percent-encoded query value and a token put as the
/// userinfo's user are redacted too.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn url_keys_encoded_or_in_the_user_are_redacted() {
    for (url, key) in [
        (
            "http://127.0.0.1:9/mcp?api_key=sk%2Blive%2BURLKEY1234",
            "URLKEY1234",
        ),
        (
            "http://ghp_USERTOKEN98765@127.0.0.1:9/mcp",
            "USERTOKEN98765",
        ),
        (
            "http://user:pa%24%24URLPASS4321@127.0.0.1:9/mcp",
            "URLPASS4321",
        ),
    ] {
        let project = Project::new();
        let llm = FakeLlm::replies(vec![final_answer("done")]).await;
        let extra = format!("[mcp.servers.web]\nurl = \"{url}\"\nstartup_timeout_secs = 5\n");
        let cfg = config(&project, &llm, &extra);
        project.task("u", "+++\ntools = [\"web__x\"]\n+++\nGo.");
        run_n(&cfg, 1).await;
        let error = project.summary("u").error.unwrap();
        eprintln!("{url}: {error}");
        assert!(!error.contains(key), "{url}: {error}");
        assert!(!project.all_records().contains(key), "{url}");
    }
}

/// A harmless query value (`?transport=stream`) is no secret: "stream"
/// stays readable in the records.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_plain_query_value_is_not_a_secret() {
    let project = Project::new();
    let llm = FakeLlm::replies(vec![final_answer("the stream is fine")]).await;
    let extra = "[mcp.servers.web]\nurl = \"http://127.0.0.1:9/mcp?transport=stream\"\nstartup_timeout_secs = 5\n";
    let cfg = config(&project, &llm, extra);
    project.task("u", "+++\ntools = []\n+++\nCheck the stream.");
    run_n(&cfg, 1).await;
    let records = project.all_records();
    assert!(records.contains("Check the stream."), "{records}");
}

/// A server that dies on its own while a task runs, which the task does
/// not call again, still ends it retryable: the process's end is noticed.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_that_dies_unnoticed_during_a_task() {
    let project = Project::new();
    let llm = FakeLlm::by_progress(vec![
        ok(tool_calls(&[("c1", "r__echo", json!({}))])),
        ok(final_answer("done")).set_delay(Duration::from_secs(3)),
    ])
    .await;
    let cfg = config(
        &project,
        &llm,
        &server("r", "raw_server.py", &["die_after=1"], ""),
    );
    project.task("x", "+++\ntools = [\"r__echo\"]\n+++\nGo.");
    run_n(&cfg, 1).await;
    let s = project.summary("x");
    assert_eq!(
        s.stop_reason,
        StopReason::ToolServerUnavailable,
        "{:?} {:?}",
        s.status,
        s.error
    );
}

/// Four tasks in flight, one kills the server: every one ends retryable
/// tool_server_unavailable and stays in the inbox; the server is gone.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn concurrency_four_one_server_dies() {
    let project = Project::new();
    let pid = project.root().join("srv.pid");
    let llm = FakeLlm::by_progress(vec![
        ok(tool_calls(&[("c1", "h__echo", json!({"text": "x"}))]))
            .set_delay(Duration::from_millis(500)),
        ok(final_answer("done")).set_delay(Duration::from_millis(500)),
    ])
    .await;
    let hostile = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/hostile_server.py")
        .display()
        .to_string();
    let command = vec![
        mcp_python(),
        hostile,
        "exitcall".into(),
        format!("pid={}", pid.display()),
    ];
    let extra = format!(
        "[mcp.servers.h]\ncommand = {}\n",
        serde_json::to_string(&command).unwrap()
    );
    let cfg = config(&project, &llm, &extra);
    for n in ["a", "b", "c", "d"] {
        project.task(n, "+++\ntools = [\"h__echo\"]\n+++\nGo.");
    }
    project.task("e", "+++\ntools = []\n+++\nNo tools.");
    let outcome = run_n(&cfg, 4).await;
    for n in ["a", "b", "c", "d"] {
        let s = project.summary(n);
        assert_eq!(
            s.stop_reason,
            StopReason::ToolServerUnavailable,
            "{n}: {outcome:?}"
        );
        assert!(s.retryable, "{n}");
    }
    assert_eq!(project.summary("e").status, Status::Succeeded);
    assert_eq!(project.inbox(), ["a.md", "b.md", "c.md", "d.md"]);
}

/// A listing that lacks a configured name is no setup fault (SPEC §19):
/// the task that names the missing tool is invalid, and the run's stop
/// leaves no server process behind.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_listing_lacking_a_configured_name_fails_that_task_and_leaves_no_server_process() {
    let project = Project::new();
    let pid = project.root().join("srv.pid");
    let llm = FakeLlm::by_progress(vec![ok(final_answer("done"))]).await;
    let hostile = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/hostile_server.py")
        .display()
        .to_string();
    let command = vec![
        mcp_python(),
        hostile,
        "ignoreeof".into(),
        format!("pid={}", pid.display()),
    ];
    let extra = format!(
        "[mcp.servers.h]\ncommand = {}\ntools = [\"ecko\"]\n",
        serde_json::to_string(&command).unwrap()
    );
    let cfg = config(&project, &llm, &extra);
    project.task("x", "+++\ntools = [\"h__ecko\"]\n+++\nGo.");
    let h = harness(&cfg);
    let out = agent_harness::app::run_inbox(
        &cfg,
        &h,
        &RunOptions {
            concurrency: 1,
            ..RunOptions::default()
        },
    )
    .await
    .unwrap();
    assert!(
        matches!(out, RunOutcome::Finished(ref t) if t.setup_fault.is_none() && t.failed == 1),
        "{out:?}"
    );
    assert_eq!(project.summary("x").stop_reason, StopReason::InvalidTask);
    h.shutdown().await;
    assert!(pid_file_gone(&pid), "the server outlived the run");
    assert_eq!(project.failed().len(), 1);
}

/// The start error of an HTTP server keeps its cause (the request that
/// failed) and no part of a key in the `url`.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn an_http_start_error_keeps_its_cause_and_no_part_of_a_key() {
    let project = Project::new();
    let llm = FakeLlm::replies(vec![final_answer("done")]).await;
    let extra = "[mcp.servers.web]\nurl = \"http://[::1]:9/?api_key=sk-live-URLKEY1234\"\nstartup_timeout_secs = 5\n";
    let cfg = config(&project, &llm, extra);
    project.task("u", "+++\ntools = [\"web__x\"]\n+++\nGo.");
    run_n(&cfg, 1).await;
    let error = project.summary("u").error.unwrap();
    assert!(!error.contains("sk-l"), "{error}");
    assert!(error.contains("api_key=***"), "{error}");
    // The cause: the SDK names the request that failed, its URL redacted.
    assert!(error.contains("error sending request for url"), "{error}");
}

/// One HTTP 500 to one tools/call (a flaky handler or proxy) fails that
/// call only: the server is not down for the run.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn one_http_500_does_not_take_the_server_down_for_the_run() {
    let project = Project::new();
    let port = closed_port();
    let mut child = std::process::Command::new(mcp_python())
        .arg(mcp_script("http_server.py"))
        .arg(port.to_string())
        .spawn()
        .unwrap();
    let up = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up);
    let llm = FakeLlm::replies(vec![
        tool_calls(&[("c1", "h__flaky", json!({}))]),
        tool_calls(&[("c2", "h__echo", json!({}))]),
        final_answer("done"),
    ])
    .await;
    let extra = format!("[mcp.servers.h]\nurl = \"http://127.0.0.1:{port}/mcp\"\n");
    let cfg = config(&project, &llm, &extra);
    project.task("w", "Go.");
    run_n(&cfg, 1).await;
    let _ = child.kill();
    let _ = child.wait();
    let lines = project.tool_lines("w");
    eprintln!("{lines:#?}");
    let s = project.summary("w");
    assert_eq!(lines[1].result, "called echo", "{:?}", s.error);
}

/// A single tools/list page of 30,000 small tools (under 4 MiB) is cut to
/// 256 read and 128 offered, and run.log gets a bounded number of lines
/// about it.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_huge_single_page_listing() {
    let project = Project::new();
    let llm = FakeLlm::by_progress(vec![ok(final_answer("done"))]).await;
    let cfg = config(
        &project,
        &llm,
        &server(
            "r",
            "raw_server.py",
            &["many=30000"],
            "startup_timeout_secs = 30",
        ),
    );
    project.task("x", "Go.");
    run_n(&cfg, 1).await;
    let log = project.run_log("x");
    let n = log.lines().filter(|l| l.contains("not offered")).count();
    assert!(n <= 21, "{n} lines about tools not offered");
    assert!(log.len() < 64 * 1024, "run.log {} bytes", log.len());
    assert!(
        log.contains("the listing goes on past the 256 tools read"),
        "{log}"
    );
    let offered = llm.requests().await[0]["tools"].as_array().unwrap().len();
    assert_eq!(offered, 128 + 1, "128 of the server's, and webfetch");
}
