//! An MCP server's listing as hostile input (docs/tools.md, "Tools from MCP
//! servers"): a server that pings, lists past what is read, in any order, in
//! one huge page, or lacks a name the config allows — what is offered never
//! depends on it.

use agent_harness::agent::StopReason;
use agent_harness::drain::RunOutcome;
use serde_json::json;

use crate::common::mcp::*;
use crate::common::*;

/// MCP: "The receiver MUST respond promptly" to a ping. A server (official
/// Python SDK) that pings the client inside a tool call is answered, and
/// its call returns.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_ping_is_answered() {
    let s = scenario()
        .by_progress(vec![
            ok(tool_calls(&[("c1", "p__pinged", json!({}))])),
            ok(final_answer("done")),
        ])
        .config(&mcp_server(
            "p",
            "ping_server.py",
            &[],
            "call_timeout_secs = 5",
        ))
        .env(mcp_env)
        .task("p", "+++\ntools = [\"p__pinged\"]\n+++\nGo.")
        .build()
        .await;
    s.run().await;
    let lines = s.tool_lines("p");
    assert_eq!(lines[0].result, "pong", "{:?}", lines[0]);
}

/// A tool on the allowlist that the server lists on page 10 (one tool a
/// page, past the 8 read) is no typo: the run does not stop with a setup
/// fault, and run.log says the listing was cut before it.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn an_allowlisted_tool_past_the_pages_read_is_no_setup_fault() {
    let scene = scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .config(&mcp_server(
            "r",
            "raw_server.py",
            &["onepage=10"],
            "tools = [\"t9\"]",
        ))
        .env(mcp_env)
        .task("x", "+++\ntools = [\"r__t9\"]\n+++\nGo.")
        .build()
        .await;
    let outcome = scene.run().await;
    let s = scene.summary("x");
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
        let s = scenario()
            .by_progress(vec![ok(final_answer("done"))])
            .config(&mcp_server("r", "raw_server.py", order, ""))
            .env(mcp_env)
            .task("x", "Go.")
            .ran()
            .await;
        let req = s.requests().await;
        let mut n = offered_names(&req[0]);
        n.retain(|n| n.starts_with("r__"));
        offered.push(n);
    }
    assert_eq!(offered[0].len(), 128);
    assert_eq!(offered[0], offered[1]);
}

/// A listing that lacks a configured name is no setup fault (docs/tools.md,
/// "Tools from MCP servers"): the task that names the missing tool is invalid,
/// and the run's stop leaves no server process behind.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_listing_lacking_a_configured_name_fails_that_task_and_leaves_no_server_process() {
    let s = scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .env(mcp_env)
        .task("x", "+++\ntools = [\"h__ecko\"]\n+++\nGo.")
        .build()
        .await;
    let pid = s.root().join("srv.pid");
    let pid_arg = format!("pid={}", pid.display());
    let args = ["ignoreeof", pid_arg.as_str()];
    let hostile = mcp_server("h", "hostile_server.py", &args, "tools = [\"ecko\"]");
    s.rewrite_config(&hostile);
    let out = s.run().await;
    assert!(
        matches!(out, RunOutcome::Finished(ref t) if t.setup_fault.is_none() && t.failed == 1),
        "{out:?}"
    );
    assert_eq!(s.summary("x").stop_reason, StopReason::InvalidTask);
    assert!(pid_file_gone(&pid), "the server outlived the run");
    assert_eq!(s.failed().len(), 1);
}

/// A single tools/list page of 30,000 small tools (under 4 MiB) is cut to
/// 256 read and 128 offered, and run.log gets a bounded number of lines
/// about it.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_huge_single_page_listing() {
    let s = scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .config(&mcp_server(
            "r",
            "raw_server.py",
            &["many=30000"],
            "startup_timeout_secs = 30",
        ))
        .env(mcp_env)
        .task("x", "Go.")
        .build()
        .await;
    s.run().await;
    let log = s.run_log("x");
    let n = log.lines().filter(|l| l.contains("not offered")).count();
    assert!(n <= 21, "{n} lines about tools not offered");
    assert!(log.len() < 64 * 1024, "run.log {} bytes", log.len());
    assert_contains(&log, "the listing goes on past the 256 tools read");
    let offered = s.requests().await[0]["tools"].as_array().unwrap().len();
    assert_eq!(offered, 128 + 1, "128 of the server's, and webfetch");
}
