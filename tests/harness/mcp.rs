//! Tools from MCP servers (docs/tools.md, "Tools from MCP servers"), against a
//! real MCP server nobody here wrote the protocol of:
//! `tests/mcp/test_server.py` on the official Python SDK (PyPI `mcp`, installed
//! by `scripts/stack install`), started by the harness as a run would start it.

use std::path::PathBuf;
use std::time::Duration;

use agent_harness::agent::StopReason;
use agent_harness::drain::RunOutcome;
use agent_harness::records::Status;
use serde_json::{Value, json};

use crate::common::mcp::*;
use crate::common::*;

/// `[mcp.servers.NAME]` running the test server with `args`, plus `extra` keys.
fn server(name: &str, args: &[&str], extra: &str) -> String {
    mcp_server(name, "test_server.py", args, extra)
}

fn pid_file(project: &Project, name: &str) -> PathBuf {
    project.root().join(format!("{name}.pid"))
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_servers_tool_is_offered_with_its_schema_called_and_its_stderr_logged() {
    let s = scenario()
        .replies(vec![
            tool_calls(&[("c1", "t__lookup", json!({"key": "alpha"}))]),
            final_answer("alpha is 42"),
        ])
        .task("look", "+++\ntools = [\"t__lookup\"]\n+++\nLook up alpha.")
        .env(mcp_env)
        .build()
        .await;
    let pid = pid_file(&s, "t");
    s.rewrite_config(&server(
        "t",
        &["--pid-file", &pid.display().to_string()],
        "",
    ));
    let outcome = s.run().await;
    assert!(
        matches!(outcome, RunOutcome::Finished(ref t) if t.succeeded == 1),
        "{outcome:?}\n{}",
        s.run_log("look")
    );

    let requests = s.requests().await;
    let offered = sent(&requests[0]).tools;
    assert_eq!(offered.len(), 1, "{offered:?}");
    let f = &offered[0].function;
    assert_eq!(f.name, "t__lookup");
    assert_eq!(f.description, "Look up the value stored under a key.");
    assert_eq!(f.parameters["type"], "object");
    assert_eq!(f.parameters["properties"]["key"]["type"], "string");
    assert_eq!(f.parameters["required"], json!(["key"]));

    let lines = s.tool_lines("look");
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].name, "t__lookup");
    assert!(!lines[0].is_error);
    assert_eq!(lines[0].result, "the value of alpha is 42");
    let log = s.run_log("look");
    assert!(log.contains("MCP server t started in"), "{log}");
    assert_contains(
        &log,
        "tools: t__big, t__delete_item, t__die, t__env, t__fail, t__huge, t__lookup, t__nested, t__slow",
    );
    assert!(log.contains("MCP server t stderr: lookup alpha"), "{log}");
    assert!(pid_file_gone(&pid), "the server outlived the run");
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn the_allowlist_narrows_what_is_offered_and_named_tools_are_checked() {
    let extra = format!(
        "{}{}",
        server("t", &[], "tools = [\"lookup\", \"fail\"]"),
        server("u", &[], "")
    );
    let scene = scenario()
        .replies(vec![final_answer("done")])
        .config(&extra)
        .env(mcp_env)
        .task("a-all", "Use what you have.")
        .task("b-off-list", "+++\ntools = [\"t__big\"]\n+++\nGo.")
        .task("c-unlisted", "+++\ntools = [\"u__nosuch\"]\n+++\nGo.")
        .task("d-no-server", "+++\ntools = [\"v__lookup\"]\n+++\nGo.")
        .build()
        .await;
    let cfg = scene.cfg();

    // `check` starts nothing: it judges names by the configuration alone.
    let report = agent_harness::drain::check_inbox(
        &cfg,
        &agent_harness::tools::Toolbox::offered_by(&cfg),
        fixed_clock()(),
    )
    .unwrap();
    let problems = report.problems.join("\n");
    assert!(
        problems.contains("b-off-list.md")
            && problems.contains("not on the tools allowlist of [mcp.servers.t]"),
        "{problems}"
    );
    assert!(
        problems.contains("d-no-server.md")
            && problems.contains("MCP server \"v\", which is not configured"),
        "{problems}"
    );
    assert!(
        !problems.contains("a-all") && !problems.contains("c-unlisted"),
        "{problems}"
    );

    scene.run().await;
    let offered = offered_names(&scene.requests().await[0]);
    let mcp: Vec<&String> = offered.iter().filter(|n| n.contains("__")).collect();
    assert_eq!(mcp[..2], ["t__fail", "t__lookup"], "{offered:?}");
    assert_eq!(
        mcp.len(),
        2 + 9,
        "t's allowlist, then every tool of u: {offered:?}"
    );
    assert_eq!(scene.summary("a-all").status, Status::Succeeded);
    for (task, why) in [
        ("b-off-list", "not on the tools allowlist"),
        (
            "c-unlisted",
            "MCP server u does not list the tool \"u__nosuch\"",
        ),
        ("d-no-server", "not configured"),
    ] {
        let s = scene.summary(task);
        assert_eq!(s.stop_reason, StopReason::InvalidTask, "{task}");
        assert!(
            s.error.as_deref().unwrap().contains(why),
            "{task}: {:?}",
            s.error
        );
    }
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn results_are_cut_defanged_and_redacted_and_the_environment_is_only_what_is_passed() {
    let extra = format!(
        "[limits]\nmax_tool_result_chars = 3000\n{}",
        server("t", &[], "env_pass = [\"MCP_TEST_TOKEN\"]")
    );
    let s = scenario()
        .replies(vec![
            tool_calls(&[
                ("c1", "t__big", json!({})),
                ("c2", "t__env", json!({"name": "MCP_TEST_TOKEN"})),
                ("c3", "t__env", json!({"name": "CARGO_MANIFEST_DIR"})),
            ]),
            final_answer("done"),
        ])
        .config(&extra)
        .env(mcp_env)
        .task("hostile", "+++\ntools = [\"t__big\", \"t__env\"]\n+++\nGo.")
        .build()
        .await;
    s.run().await;

    let lines = s.tool_lines("hostile");
    let big = &lines[0];
    assert!(big.original_chars > 200_000, "{}", big.original_chars);
    assert!(big.returned_chars <= 3000, "{}", big.returned_chars);
    assert!(big.result.contains("[cut: "), "{}", big.result);
    assert!(!big.result.contains("<|turn>"));
    assert!(big.result.contains("<\u{2060}|turn>"));
    let sent = s.requests().await[1].to_string();
    assert!(
        !sent.contains("<|turn>system"),
        "a control token reached the model"
    );

    assert!(
        lines[1].result.starts_with("MCP_TEST_TOKEN=***"),
        "{}",
        lines[1].result
    );
    assert!(
        !s.all_records().contains(PASSED),
        "the passed secret is in the records"
    );
    assert!(
        !sent.contains(PASSED),
        "the passed secret reached the model"
    );
    // Nothing of the harness's environment but PATH, HOME and env_pass.
    let (value, names) = lines[2].result.split_once("; set: ").unwrap();
    assert_eq!(value, "CARGO_MANIFEST_DIR=(unset)");
    // Python itself adds LC_CTYPE under a C locale (PEP 538).
    for name in names.split(',') {
        assert!(
            ["HOME", "LC_CTYPE", "MCP_TEST_TOKEN", "PATH"].contains(&name),
            "{names}"
        );
    }
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_failing_tool_is_an_error_result_and_a_call_past_its_timeout_is_given_up() {
    let s = scenario()
        .replies(vec![
            tool_calls(&[
                ("c1", "t__fail", json!({"reason": "no such key"})),
                ("c2", "t__slow", json!({"seconds": 3600})),
                ("c3", "t__lookup", json!({"key": 7})),
            ]),
            tool_calls(&[("c4", "t__lookup", json!({"key": "after"}))]),
            final_answer("done"),
        ])
        .config(&server("t", &[], "call_timeout_secs = 1"))
        .env(mcp_env)
        .task(
            "errors",
            "+++\ntools = [\"t__fail\", \"t__slow\", \"t__lookup\"]\n+++\nGo.",
        )
        .build()
        .await;
    // The slow call would answer in an hour: a run that waited for it fails.
    before_hang_limit("the slow call was waited for", s.run()).await;

    let lines = s.tool_lines("errors");
    assert!(lines[0].is_error, "{:?}", lines[0]);
    assert_contains(&lines[0].result, "Error executing tool fail");
    assert!(lines[1].is_error);
    assert!(
        lines[1]
            .result
            .contains("did not answer within 1 s (call_timeout_secs)"),
        "{}",
        lines[1].result
    );
    // Arguments go as the model wrote them; the server judges them.
    assert!(lines[2].is_error, "{:?}", lines[2]);
    // The server is still up after a timed-out call.
    assert_eq!(lines[3].result, "the value of after is 42");
    assert_eq!(s.summary("errors").status, Status::Succeeded);
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn write_tools_are_intents_in_a_dry_run_and_count_against_max_writes() {
    let task = "+++\ntools = [\"t__delete_item\", \"t__lookup\"]\n+++\nDelete.";
    let script = || {
        vec![
            tool_calls(&[
                ("c1", "t__delete_item", json!({"name": "one"})),
                ("c2", "t__delete_item", json!({"name": "two"})),
                ("c3", "t__lookup", json!({"key": "k"})),
            ]),
            final_answer("done"),
        ]
    };
    let s = scenario()
        .replies(script())
        .env(mcp_env)
        .task("dry", task)
        .build()
        .await;
    let markers = s.root().join("markers");
    std::fs::create_dir(&markers).unwrap();
    let marker_dir = markers.display().to_string();
    let extra = format!(
        "[limits]\nmax_writes = 1\n{}",
        server("t", &["--marker-dir", &marker_dir], "")
    );
    s.rewrite_config(&extra);

    s.run_with(run_options(1, true)).await;
    assert_eq!(
        std::fs::read_dir(&markers).unwrap().count(),
        0,
        "a dry run called a write tool"
    );
    let lines = s.tool_lines("dry");
    assert!(
        lines[0]
            .result
            .starts_with("Dry run: t__delete_item counts as called (nothing was changed)"),
        "{}",
        lines[0].result
    );
    let detail: Value = serde_json::from_str(lines[0].detail.as_ref().unwrap().get()).unwrap();
    assert_eq!(detail["intent"]["arguments"]["name"], "one");
    assert_contains(&lines[1].result, "write budget (1) is spent");
    assert!(
        !lines[2].is_error,
        "a read-only tool is no write: {}",
        lines[2].result
    );

    std::fs::remove_dir_all(s.root().join("logs")).unwrap();
    // A model of its own for the second run, the same script again.
    let llm = FakeLlm::replies(script()).await;
    s.write_config(&llm.base_url(), &extra);
    s.run().await;
    let deleted: Vec<String> = std::fs::read_dir(&markers)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(deleted, ["deleted-one"]);
    let intents = std::fs::read_to_string(s.run_dir("dry").join("intents.jsonl")).unwrap();
    assert!(intents.contains("t__delete_item"), "{intents}");
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_that_is_missing_or_slow_keeps_its_tasks_in_the_inbox_and_the_others_run() {
    let s = scenario()
        .replies(vec![final_answer("done")])
        .env(mcp_env)
        .task("a-gone", "+++\ntools = [\"gone__x\"]\n+++\nGo.")
        .task("b-slow", "+++\ntools = [\"slow__lookup\"]\n+++\nGo.")
        .task("c-slow-again", "+++\ntools = [\"slow__lookup\"]\n+++\nGo.")
        .task("d-plain", "+++\ntools = []\n+++\nGo.")
        .build()
        .await;
    let slow_pid = pid_file(&s, "slow");
    // A server that says it is starting, then never serves: `sh` says it
    // within milliseconds however loaded the machine (a Python child
    // importing an SDK may not within the 2 s start-up timeout).
    let script = format!(
        "echo $$ > '{}'; echo 'test server starting (delay 3600.0 s)' >&2; exec sleep 3600",
        slow_pid.display()
    );
    let extra = format!(
        "[mcp.servers.gone]\ncommand = [\"/nonexistent/mcp-server\"]\n\
         [mcp.servers.slow]\ncommand = {}\nstartup_timeout_secs = 2\n",
        serde_json::to_string(&["sh", "-c", &script]).unwrap()
    );
    s.rewrite_config(&extra);
    // The slow server would list its tools in an hour: a run that waited
    // for it fails.
    let outcome = before_hang_limit("the slow server was waited for", s.run()).await;
    let RunOutcome::Finished(tally) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        (tally.succeeded, tally.retry_later, tally.failed),
        (1, 3, 0)
    );
    assert_eq!(s.inbox(), ["a-gone.md", "b-slow.md", "c-slow-again.md"]);

    let gone = s.summary("a-gone");
    assert_eq!(gone.stop_reason, StopReason::ToolServerUnavailable);
    assert!(gone.retryable);
    let error = gone.error.unwrap();
    assert_contains(
        &error,
        "MCP server gone did not start: cannot run /nonexistent/mcp-server",
    );
    let slow = s.summary("b-slow").error.unwrap();
    assert_contains(
        &slow,
        "MCP server slow did not start and list its tools within 2 s",
    );
    assert_contains(
        &slow,
        "its stderr ends: test server starting (delay 3600.0 s)",
    );
    assert!(
        s.summary("c-slow-again")
            .error
            .unwrap()
            .contains("within 2 s")
    );
    assert!(
        s.run_log("b-slow").contains("tool_server_unavailable")
            || s.run_log("b-slow").contains("stays in the inbox")
    );
    assert!(
        pid_file_gone(&slow_pid),
        "the slow server outlived its start-up timeout"
    );
    assert_eq!(
        s.requests().await.len(),
        1,
        "only the plain task asked the model"
    );
}

/// A down server spares the tasks that do not name its tools (docs/tools.md,
/// "Tools from MCP servers"): a task without a `tools` list runs with the
/// built-in tools and the servers that are up, and its records say which server
/// was left out and why; the metrics say which servers were up.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_down_server_spares_tasks_that_name_no_tools_and_the_metrics_say_so() {
    let extra = format!(
        "[mcp.servers.gone]\ncommand = [\"/nonexistent/mcp-server\"]\n{}",
        server("t", &[], "")
    );
    let s = scenario()
        .by_progress(vec![
            ok(tool_calls(&[("c1", "t__lookup", json!({"key": "alpha"}))])),
            ok(final_answer("done")),
        ])
        .config(&extra)
        .env(mcp_env)
        .task("a-any", "Look up alpha.")
        .task("b-named", "+++\ntools = [\"gone__x\"]\n+++\nGo.")
        .build()
        .await;

    let outcome = s.run().await;

    let RunOutcome::Finished(tally) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!((tally.succeeded, tally.retry_later), (1, 1), "{tally:?}");
    let any = s.summary("a-any");
    assert_eq!(any.status, Status::Succeeded);
    assert_eq!(any.tool_servers_down, ["gone"]);
    assert_contains(
        s.run_log("a-any"),
        "MCP server gone is not offered (the task names no tools, so it runs without them): MCP server gone did not start",
    );
    let offered = offered_names(&s.requests().await[0]);
    assert!(offered.contains(&"t__lookup".to_string()), "{offered:?}");
    assert!(!offered.iter().any(|n| n.starts_with("gone__")));
    assert_eq!(
        s.summary("b-named").stop_reason,
        StopReason::ToolServerUnavailable,
        "a task that names the down server's tool still waits for it"
    );
    let metrics = std::fs::read_to_string(s.root().join("logs/agent-harness.prom")).unwrap();
    assert!(
        metrics.contains("agent_harness_tool_server_up{server=\"gone\"} 0\n")
            && metrics.contains("agent_harness_tool_server_up{server=\"t\"} 1\n"),
        "{metrics}"
    );
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_that_dies_mid_task_fails_the_call_and_every_task_that_may_use_it() {
    let s = scenario()
        .by_progress(vec![
            ok(tool_calls(&[("c1", "t__die", json!({}))])),
            ok(final_answer("it died")),
        ])
        .config(&server("t", &[], ""))
        .env(mcp_env)
        .task("a-dies", "+++\ntools = [\"t__die\"]\n+++\nGo.")
        .task("b-after", "+++\ntools = [\"t__lookup\"]\n+++\nGo.")
        .build()
        .await;
    s.run().await;
    let lines = s.tool_lines("a-dies");
    assert!(lines[0].is_error);
    assert_contains(&lines[0].result, "MCP server t stopped answering");
    let after = s.summary("b-after");
    assert_eq!(after.stop_reason, StopReason::ToolServerUnavailable);
    assert!(
        after
            .error
            .unwrap()
            .contains("MCP server t stopped answering")
    );
    // The model answered after the failed call; the task still does not
    // pass as done: it is tried again when the server can be started.
    let dies = s.summary("a-dies");
    assert_eq!(dies.stop_reason, StopReason::ToolServerUnavailable);
    assert!(dies.retryable && dies.final_answer.is_none());
    assert!(dies.error.unwrap().contains("while the task ran"));
    assert_eq!(s.inbox(), ["a-dies.md", "b-after.md"]);
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn the_streamable_http_transport_calls_a_tool() {
    let port = closed_port();
    let mut child = std::process::Command::new(mcp_python())
        .arg(mcp_script("test_server.py"))
        .args(["--http", &port.to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let up = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let s = scenario()
        .replies(vec![
            tool_calls(&[("c1", "h__huge", json!({"kib": 3000}))]),
            tool_calls(&[("c2", "h__lookup", json!({"key": "web"}))]),
            final_answer("done"),
        ])
        .config(&format!(
            "[mcp.servers.h]\nurl = \"http://127.0.0.1:{port}/mcp\"\ntools = [\"lookup\", \"huge\"]"
        ))
        .env(mcp_env)
        .task("web", "Look it up.")
        .build()
        .await;
    s.run().await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(up, "the HTTP test server did not listen");
    let lines = s.tool_lines("web");
    // A 6 MiB answer (3 MiB of text, twice) is read and cut.
    assert!(!lines[0].is_error, "{:?}", lines[0]);
    assert!(
        lines[0].original_chars > 3_000_000,
        "{}",
        lines[0].original_chars
    );
    assert!(lines[0].result.contains("[cut: "));
    assert_eq!(
        lines[1].result,
        "the value of web is 42",
        "{}",
        s.run_log("web")
    );
    assert_eq!(s.summary("web").status, Status::Succeeded);
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn test_runpod_starts_each_server_once_and_lists_its_tools() {
    let extra = format!(
        "{}[mcp.servers.gone]\ncommand = [\"/nonexistent/mcp-server\"]\n",
        server(
            "t",
            &["--delay", "0.1"],
            "tools = [\"lookup\", \"delete_item\"]"
        )
    );
    let s = scenario()
        .replies(vec![
            final_answer("Hello."),
            tool_calls(&[("call_1", "get_current_time", json!({"city": "Paris"}))]),
            final_answer("It is noon in Paris."),
        ])
        .config(&extra)
        .env(mcp_env)
        .build()
        .await;
    let cfg = s.cfg();
    let ep = agent_harness::endpoint::Endpoint::new(&cfg.endpoint, &cfg.tls.trust).unwrap();
    let mut out = Vec::new();
    let passed = agent_harness::app::smoke::test_endpoint(&cfg, &ep, &mut out).await;
    let out = String::from_utf8(out).unwrap();
    assert!(!passed, "{out}");
    assert_eq!(agent_harness::app::smoke_exit(passed), 1);
    let ok = out
        .lines()
        .find(|l| l.starts_with("ok   mcp t: started in"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        ok.ends_with("tools: t__delete_item (write), t__lookup"),
        "{ok}"
    );
    assert_contains(
        &out,
        "MCP server t stderr: test server starting (delay 0.1 s)",
    );
    let fail = out
        .lines()
        .find(|l| l.starts_with("FAIL mcp gone:"))
        .unwrap_or_else(|| panic!("{out}"));
    assert_contains(fail, "cannot run /nonexistent/mcp-server");
}

/// The binary: no server process is left after SIGTERM, nor after a
/// task's wall clock runs out in the middle of a call.
#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn no_server_process_outlives_the_binary() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let s = rt.block_on(
        scenario()
            .by_progress(vec![
                ok(tool_calls(&[("c1", "t__slow", json!({"seconds": 60}))])),
                ok(final_answer("done")),
            ])
            .task("wall", "+++\ntools = [\"t__slow\"]\n+++\nWait.")
            .build(),
    );
    let pid = pid_file(&s, "t");
    let extra = format!(
        "[limits]\nmax_wall_secs = 3\n{}",
        server("t", &["--pid-file", &pid.display().to_string()], "")
    );
    s.rewrite_config(&extra);
    let out = bin(&s).arg("run").output().unwrap();
    let wall = s.summary_in(&the_run_dir(&s, "wall"));
    assert_eq!(
        wall.stop_reason,
        StopReason::MaxWallSecs,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        pid_file_gone(&pid),
        "the server outlived the run after the wall clock ran out"
    );

    std::fs::remove_file(&pid).unwrap();
    let extra = format!(
        "[limits]\nmax_wall_secs = 120\n{}",
        server("t", &["--pid-file", &pid.display().to_string()], "")
    );
    s.rewrite_config(&extra);
    s.task("term", "+++\ntools = [\"t__slow\"]\n+++\nWait.");
    let mut child = spawn_run(&s, std::process::Stdio::null());
    // Wait until the slow call is under way.
    let calling = (0..300).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        rt.block_on(s.requests()).len() >= 2 && pid.exists()
    });
    assert!(calling, "the task never called the slow tool");
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, rustix::process::Signal::TERM);
    // The slow call takes a minute: a run that waited for it fails here.
    assert_eq!(
        wait_at_most(&mut child, crate::signals::STOP_TIMEOUT),
        Some(75)
    );
    assert!(pid_file_gone(&pid), "the server outlived SIGTERM");
}

fn signal(child: &std::process::Child, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
}

/// The exit status of `child`, waiting at most `limit`.
fn wait_at_most(child: &mut std::process::Child, limit: Duration) -> Option<i32> {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    None
}

#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn a_signal_while_a_server_starts_interrupts_its_task_and_kills_the_server() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let scene = rt.block_on(
        scenario()
            .replies(vec![final_answer("done")])
            .task("waits", "+++\ntools = [\"t__lookup\"]\n+++\nGo.")
            .build(),
    );
    let pid = pid_file(&scene, "t");
    let args = ["--delay", "60", "--pid-file", &pid.display().to_string()];
    scene.rewrite_config(&server("t", &args, "startup_timeout_secs = 120"));
    let mut child = spawn_run(&scene, std::process::Stdio::null());
    let started = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        pid.exists()
    });
    assert!(started, "the server was never started");
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, rustix::process::Signal::TERM);
    // The start takes a minute: a run that waited for it fails here.
    let code = wait_at_most(&mut child, crate::signals::STOP_TIMEOUT);
    assert_eq!(code, Some(75), "the run waited for the slow start");
    assert_eq!(scene.inbox(), ["waits.md"]);
    let s = scene.summary_in(&the_run_dir(&scene, "waits"));
    assert_eq!(s.stop_reason, StopReason::Interrupted);
    assert!(
        pid_file_gone(&pid),
        "the half-started server outlived the run"
    );
    assert!(rt.block_on(scene.requests()).is_empty());
}

#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn exec_takes_mcp_tool_names_the_configuration_allows() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let s = rt.block_on(
        scenario()
            .replies(vec![
                tool_calls(&[("c1", "t__lookup", json!({"key": "exec"}))]),
                final_answer("exec is 42"),
            ])
            .config(&server("t", &[], "tools = [\"lookup\"]"))
            .build(),
    );
    let out = bin(&s)
        .args(["exec", "--tools", "t__big", "Go."])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_contains(
        &err,
        "--tools: \"t__big\": \"big\" is not on the tools allowlist of [mcp.servers.t] (lookup)",
    );
    let out = bin(&s)
        .args(["exec", "--tools", "t__lookup", "Look up exec."])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "exec is 42");
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_replay_lists_the_servers_tools_again_and_answers_calls_from_the_records() {
    let s = scenario()
        .replies(vec![
            tool_calls(&[("c1", "t__delete_item", json!({"name": "once"}))]),
            final_answer("deleted"),
        ])
        .env(mcp_env)
        .task(
            "del",
            "+++\ntools = [\"t__delete_item\"]\n+++\nDelete once.",
        )
        .build()
        .await;
    let markers = s.root().join("markers");
    std::fs::create_dir(&markers).unwrap();
    let args = ["--marker-dir", &markers.display().to_string()];
    s.rewrite_config(&server("t", &args, ""));
    s.run().await;
    assert_eq!(std::fs::read_dir(&markers).unwrap().count(), 1);
    std::fs::remove_file(markers.join("deleted-once")).unwrap();

    let (code, out) = replay_of(&s.cfg(), &s.run_dir("del"), None).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("every request matched the recording"), "{out}");
    assert_eq!(
        std::fs::read_dir(&markers).unwrap().count(),
        0,
        "a replay called the write tool again"
    );

    let broken = "[mcp.servers.t]\ncommand = [\"/nonexistent/mcp-server\"]\n";
    s.rewrite_config(broken);
    let (code, out) = replay_of(&s.cfg(), &s.run_dir("del"), None).await;
    assert_eq!(code, 1, "{out}");
    assert_contains(&out, "no request was sent: MCP server t did not start");
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn an_answer_claiming_an_mcp_tool_by_its_servers_name_is_asked_again() {
    // What the stand-in answered the quickstart's what-time task with.
    let claim = "The t tool returned the value of alpha as 7.";
    let s = scenario()
        .replies(vec![
            final_answer(claim),
            tool_calls(&[("c1", "t__lookup", json!({"key": "alpha"}))]),
            final_answer("alpha is 42"),
        ])
        .task("look", "+++\ntools = [\"t__lookup\"]\n+++\nLook up alpha.")
        .env(mcp_env)
        .build()
        .await;
    s.rewrite_config(&server("t", &[], ""));
    s.run().await;

    let summary = s.summary("look");
    assert_eq!(
        (
            summary.status,
            summary.tool_calls,
            summary.final_answer.as_deref()
        ),
        (Status::Succeeded, 1, Some("alpha is 42"))
    );
    assert!(
        s.run_log("look")
            .contains("the answer says it used t__lookup, but no tool has run in this task"),
        "{}",
        s.run_log("look")
    );
}
