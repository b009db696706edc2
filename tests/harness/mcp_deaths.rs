//! MCP servers that die or falter (docs/tools.md, "Tools from MCP servers"): a
//! death unnoticed during a task, one of four concurrent tasks' server dying,
//! one HTTP 500 — a task that may use a dead server never passes as done.

use std::time::Duration;

use agent_harness::agent::StopReason;
use agent_harness::records::Status;
use serde_json::json;

use crate::common::mcp::*;
use crate::common::*;

/// A server that dies on its own while a task runs, which the task does
/// not call again, still ends it retryable: the process's end is noticed.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_that_dies_unnoticed_during_a_task() {
    let scene = scenario()
        .by_progress(vec![
            ok(tool_calls(&[("c1", "r__echo", json!({}))])),
            ok(final_answer("done")).set_delay(Duration::from_secs(3)),
        ])
        .config(&mcp_server("r", "raw_server.py", &["die_after=1"], ""))
        .env(mcp_env)
        .task("x", "+++\ntools = [\"r__echo\"]\n+++\nGo.")
        .ran()
        .await;
    let s = scene.summary("x");
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
    let step = Duration::from_millis(500);
    let mut tasks = scenario()
        .by_progress(vec![
            ok(call("h__echo", json!({"text": "x"}))).set_delay(step),
            ok(final_answer("done")).set_delay(step),
        ])
        .env(mcp_env)
        .task("e", "+++\ntools = []\n+++\nNo tools.");
    for n in ["a", "b", "c", "d"] {
        tasks = tasks.task(n, "+++\ntools = [\"h__echo\"]\n+++\nGo.");
    }
    let scene = tasks.build().await;
    // The server's pid file is in the project, known once it is built.
    let pid = format!("pid={}", scene.root().join("srv.pid").display());
    let server = mcp_server("h", "hostile_server.py", &["exitcall", &pid], "");
    scene.rewrite_config(&server);
    let outcome = scene.run_with(run_options(4, false)).await;
    for n in ["a", "b", "c", "d"] {
        let s = scene.summary(n);
        assert_eq!(
            (s.stop_reason, s.retryable),
            (StopReason::ToolServerUnavailable, true),
            "{n}: {outcome:?}"
        );
    }
    assert_eq!(scene.summary("e").status, Status::Succeeded);
    assert_eq!(scene.inbox(), ["a.md", "b.md", "c.md", "d.md"]);
}

/// The MCP test server `http_server.py` on `port`, once it listens.
fn http_server_on(port: u16) -> std::process::Child {
    let child = std::process::Command::new(mcp_python())
        .arg(mcp_script("http_server.py"))
        .arg(port.to_string())
        .spawn()
        .unwrap();
    let up = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up);
    child
}

/// One HTTP 500 to one tools/call (a flaky handler or proxy) fails that
/// call only: the server is not down for the run.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn one_http_500_does_not_take_the_server_down_for_the_run() {
    let port = closed_port();
    let mut child = http_server_on(port);
    let config = format!("[mcp.servers.h]\nurl = \"http://127.0.0.1:{port}/mcp\"");
    let scene = scenario()
        .calls(
            vec![("h__flaky", json!({})), ("h__echo", json!({}))],
            "done",
        )
        .config(&config)
        .env(mcp_env)
        .task("w", "Go.")
        .ran()
        .await;
    let _ = child.kill();
    let _ = child.wait();
    let lines = scene.tool_lines("w");
    eprintln!("{lines:#?}");
    let s = scene.summary("w");
    assert_eq!(lines[1].result, "called echo", "{:?}", s.error);
}
