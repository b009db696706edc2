//! Tools from MCP servers (docs/tools.md, "Tools from MCP servers"), against a
//! real MCP server nobody here wrote the protocol of:
//! `tests/mcp/test_server.py` on the official Python SDK (PyPI `mcp`, installed
//! by `scripts/stack install`), started by the harness as a run would start it.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
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

/// `[mcp.servers.t]` running the test server with `args`, writing its
/// process id to `pid`, plus `extra` keys.
fn pid_server(pid: &Path, args: &[&str], extra: &str) -> String {
    let mut args = args.to_vec();
    let pid = pid.display().to_string();
    args.extend(["--pid-file", &pid]);
    server("t", &args, extra)
}

fn pid_file(project: &Project, name: &str) -> PathBuf {
    project.root().join(format!("{name}.pid"))
}

/// A task whose frontmatter names `tools`, then `body`.
fn with_tools(tools: &[&str], body: &str) -> String {
    format!("+++\ntools = {tools:?}\n+++\n{body}")
}

/// A new folder `markers` in the project, where the test server's
/// `--marker-dir` marks each item it deletes.
fn marker_dir(project: &Project) -> PathBuf {
    let markers = project.root().join("markers");
    std::fs::create_dir(&markers).unwrap();
    markers
}

/// The marks in the folder `markers` (`deleted-NAME`), sorted.
fn marks(markers: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(markers)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Whether `ready` holds after one of `times` waits of `every`.
fn polled(times: u32, every: Duration, mut ready: impl FnMut() -> bool) -> bool {
    (0..times).any(|_| {
        std::thread::sleep(every);
        ready()
    })
}

/// Task `look` asking for `t__lookup` of alpha on the test server `t`,
/// which writes its process id to `t.pid`: the scene and that file.
async fn looking_up_alpha() -> (Scene, PathBuf) {
    let s = scenario()
        .calls(vec![("t__lookup", json!({"key": "alpha"}))], "alpha is 42")
        .task("look", &with_tools(&["t__lookup"], "Look up alpha."))
        .env(mcp_env)
        .build()
        .await;
    let pid = pid_file(&s, "t");
    s.rewrite_config(&pid_server(&pid, &[], ""));
    (s, pid)
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_servers_tool_is_offered_with_its_schema() {
    let (s, _pid) = looking_up_alpha().await;

    s.run().await;

    let offered = sent(&s.requests().await[0]).tools;
    assert_eq!(offered.len(), 1, "{offered:?}");
    let f = &offered[0].function;
    assert_eq!(f.name, "t__lookup");
    assert_eq!(f.description, "Look up the value stored under a key.");
    assert_eq!(f.parameters["type"], "object");
    assert_eq!(f.parameters["properties"]["key"]["type"], "string");
    assert_eq!(f.parameters["required"], json!(["key"]));
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_servers_tool_is_called_and_its_result_recorded() {
    let (s, _pid) = looking_up_alpha().await;

    let outcome = s.run().await;

    assert!(
        matches!(outcome, RunOutcome::Finished(ref t) if t.succeeded == 1),
        "{outcome:?}\n{}",
        s.run_log("look")
    );
    let lines = s.tool_lines("look");
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].name, "t__lookup");
    assert!(!lines[0].is_error);
    assert_eq!(lines[0].result, "the value of alpha is 42");
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_servers_start_tools_and_stderr_are_logged_and_it_ends_with_the_run() {
    let (s, pid) = looking_up_alpha().await;

    s.run().await;

    let log = s.run_log("look");
    assert_contains(&log, "MCP server t started in");
    assert_contains(
        &log,
        "tools: t__big, t__delete_item, t__die, t__env, t__fail, t__huge, t__lookup, t__nested, t__slow",
    );
    assert_contains(&log, "MCP server t stderr: lookup alpha");
    assert!(pid_file_gone(&pid), "the server outlived the run");
}

/// Server `t` offering only `lookup` and `fail`, server `u` all its
/// tools, and four tasks: `a-all` naming none, `b-off-list` a tool of t
/// off its list, `c-unlisted` one u does not list, `d-no-server` one of a
/// server not configured.
async fn allowlisted() -> Scene {
    let t = server("t", &[], "tools = [\"lookup\", \"fail\"]");
    let u = server("u", &[], "");
    scenario()
        .answers(&["done"])
        .config(&format!("{t}{u}"))
        .env(mcp_env)
        .task("a-all", "Use what you have.")
        .task("b-off-list", &with_tools(&["t__big"], "Go."))
        .task("c-unlisted", &with_tools(&["u__nosuch"], "Go."))
        .task("d-no-server", &with_tools(&["v__lookup"], "Go."))
        .build()
        .await
}

/// `check` starts nothing: it judges names by the configuration alone.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn check_judges_named_mcp_tools_by_the_configuration_alone() {
    let scene = allowlisted().await;
    let cfg = scene.cfg();

    let offered = agent_harness::tools::Toolbox::offered_by(&cfg);
    let report = agent_harness::drain::check_inbox(&cfg, &offered, fixed_clock()()).unwrap();

    let problems = report.problems.join("\n");
    assert_contains(&problems, "b-off-list.md");
    assert_contains(&problems, "not on the tools allowlist of [mcp.servers.t]");
    assert_contains(&problems, "d-no-server.md");
    assert_contains(&problems, "MCP server \"v\", which is not configured");
    assert_lacks(&problems, "a-all");
    assert_lacks(&problems, "c-unlisted");
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn the_allowlist_narrows_what_is_offered() {
    let scene = allowlisted().await;

    scene.run().await;

    let offered = offered_names(&scene.requests().await[0]);
    let mcp: Vec<&String> = offered.iter().filter(|n| n.contains("__")).collect();
    assert_eq!(mcp[..2], ["t__fail", "t__lookup"], "{offered:?}");
    // Server t's allowlist, then every tool of u.
    assert_eq!(mcp.len(), 2 + 9, "{offered:?}");
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_task_naming_a_tool_off_the_list_or_of_no_server_is_invalid() {
    let scene = allowlisted().await;

    scene.run().await;

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
        let error = s.error.unwrap();
        assert!(error.contains(why), "{task}: {error}");
    }
}

/// Task `hostile` calling at once `t__big` (over 200 000 characters,
/// control tokens among them) and `t__env` for a passed secret and for a
/// variable not passed; results cut at 3000 characters: the scene after
/// its run.
async fn ran_hostile_calls() -> Scene {
    let extra = format!(
        "[limits]\nmax_tool_result_chars = 3000\n{}",
        server("t", &[], "env_pass = [\"MCP_TEST_TOKEN\"]")
    );
    scenario()
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
        .task("hostile", &with_tools(&["t__big", "t__env"], "Go."))
        .ran()
        .await
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_big_result_is_cut_and_its_control_tokens_defanged() {
    let s = ran_hostile_calls().await;

    let big = &s.tool_lines("hostile")[0];
    assert!(big.original_chars > 200_000, "{}", big.original_chars);
    assert!(big.returned_chars <= 3000, "{}", big.returned_chars);
    assert_contains(&big.result, "[cut: ");
    assert_lacks(&big.result, "<|turn>");
    assert_contains(&big.result, "<\u{2060}|turn>");
    let sent = s.requests().await[1].to_string();
    // A control token never reaches the model.
    assert_lacks(&sent, "<|turn>system");
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_passed_secret_is_redacted_from_results_records_and_requests() {
    let s = ran_hostile_calls().await;

    assert_starts(&s.tool_lines("hostile")[1].result, "MCP_TEST_TOKEN=***");
    assert!(
        !s.all_records().contains(PASSED),
        "the passed secret is in the records"
    );
    let sent = s.requests().await[1].to_string();
    assert!(
        !sent.contains(PASSED),
        "the passed secret reached the model"
    );
}

/// Nothing of the harness's environment but PATH, HOME and `env_pass`.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_has_only_the_environment_it_is_passed() {
    let s = ran_hostile_calls().await;

    let lines = s.tool_lines("hostile");
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

/// Task `errors` calling at once `t__fail`, `t__slow` for an hour and
/// `t__lookup` with a number for a key, then `t__lookup` again, on a
/// server that gives a call 1 s: the scene after its run.
async fn ran_failing_calls() -> Scene {
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
            &with_tools(&["t__fail", "t__slow", "t__lookup"], "Go."),
        )
        .build()
        .await;
    // The slow call would answer in an hour: a run that waited for it fails.
    before_hang_limit("the slow call was waited for", s.run()).await;
    s
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_failing_tool_is_an_error_result() {
    let s = ran_failing_calls().await;

    let lines = s.tool_lines("errors");
    assert!(lines[0].is_error, "{:?}", lines[0]);
    assert_contains(&lines[0].result, "Error executing tool fail");
    // Arguments go as the model wrote them; the server judges them.
    assert!(lines[2].is_error, "{:?}", lines[2]);
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_call_past_its_timeout_is_given_up_and_the_server_still_answers() {
    let s = ran_failing_calls().await;

    let lines = s.tool_lines("errors");
    assert!(lines[1].is_error);
    let timed_out = &lines[1].result;
    assert_contains(timed_out, "did not answer within 1 s (call_timeout_secs)");
    // The server is still up after a timed-out call.
    assert_eq!(lines[3].result, "the value of after is 42");
    assert_eq!(s.summary("errors").status, Status::Succeeded);
}

/// Task `delete` deleting items `one` and `two`, then looking up `k`, on
/// a server that marks each deletion in a folder; one write allowed: the
/// scene and the folder.
async fn deleting_two_with_one_write_allowed() -> (Scene, PathBuf) {
    let s = scenario()
        .replies(vec![
            tool_calls(&[
                ("c1", "t__delete_item", json!({"name": "one"})),
                ("c2", "t__delete_item", json!({"name": "two"})),
                ("c3", "t__lookup", json!({"key": "k"})),
            ]),
            final_answer("done"),
        ])
        .env(mcp_env)
        .task(
            "delete",
            &with_tools(&["t__delete_item", "t__lookup"], "Delete."),
        )
        .build()
        .await;
    let markers = marker_dir(&s);
    let marking = server("t", &["--marker-dir", &markers.display().to_string()], "");
    s.rewrite_config(&format!("[limits]\nmax_writes = 1\n{marking}"));
    (s, markers)
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn write_tools_are_intents_in_a_dry_run_and_count_against_max_writes() {
    let (s, markers) = deleting_two_with_one_write_allowed().await;

    s.run_with(run_options(1, true)).await;

    assert!(marks(&markers).is_empty(), "a dry run called a write tool");
    let lines = s.tool_lines("delete");
    assert_starts(
        &lines[0].result,
        "Dry run: t__delete_item counts as called (nothing was changed)",
    );
    let detail: Value = serde_json::from_str(lines[0].detail.as_ref().unwrap().get()).unwrap();
    assert_eq!(detail["intent"]["arguments"]["name"], "one");
    assert_contains(&lines[1].result, "write budget (1) is spent");
    let read = &lines[2];
    assert!(
        !read.is_error,
        "a read-only tool is no write: {}",
        read.result
    );
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_live_run_makes_the_writes_max_writes_allows_and_records_the_intents() {
    let (s, markers) = deleting_two_with_one_write_allowed().await;

    s.run().await;

    assert_eq!(marks(&markers), ["deleted-one"]);
    let intents = std::fs::read_to_string(s.run_dir("delete").join("intents.jsonl")).unwrap();
    assert_contains(&intents, "t__delete_item");
}

/// A server that says it is starting, then never serves, writing its
/// process id to `pid`: `sh` says it within milliseconds however loaded
/// the machine (a Python child importing an SDK may not within the 2 s
/// start-up timeout).
fn never_serving(pid: &Path) -> String {
    let script = format!(
        "echo $$ > '{}'; echo 'test server starting (delay 3600.0 s)' >&2; exec sleep 3600",
        pid.display()
    );
    serde_json::to_string(&["sh", "-c", &script]).unwrap()
}

/// Servers `gone` (no such program) and `slow` (never serving, given
/// 2 s), tasks naming a tool of each (`a-gone`; `b-slow`, `c-slow-again`)
/// and one naming none (`d-plain`): the scene after its run, slow's pid
/// file and the run's outcome.
async fn ran_with_a_missing_and_a_slow_server() -> (Scene, PathBuf, RunOutcome) {
    let s = scenario()
        .answers(&["done"])
        .env(mcp_env)
        .task("a-gone", &with_tools(&["gone__x"], "Go."))
        .task("b-slow", &with_tools(&["slow__lookup"], "Go."))
        .task("c-slow-again", &with_tools(&["slow__lookup"], "Go."))
        .task("d-plain", &with_tools(&[], "Go."))
        .build()
        .await;
    let slow_pid = pid_file(&s, "slow");
    let extra = format!(
        "[mcp.servers.gone]\ncommand = [\"/nonexistent/mcp-server\"]\n\
         [mcp.servers.slow]\ncommand = {}\nstartup_timeout_secs = 2\n",
        never_serving(&slow_pid)
    );
    s.rewrite_config(&extra);
    // The slow server would list its tools in an hour: a run that waited
    // for it fails.
    let outcome = before_hang_limit("the slow server was waited for", s.run()).await;
    (s, slow_pid, outcome)
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_that_is_missing_or_slow_keeps_its_tasks_in_the_inbox_and_the_others_run() {
    let (s, _slow_pid, outcome) = ran_with_a_missing_and_a_slow_server().await;

    let RunOutcome::Finished(tally) = outcome else {
        panic!("{outcome:?}")
    };
    let counts = (tally.succeeded, tally.retry_later, tally.failed);
    assert_eq!(counts, (1, 3, 0));
    assert_eq!(s.inbox(), ["a-gone.md", "b-slow.md", "c-slow-again.md"]);
    // Only the plain task asked the model.
    assert_eq!(s.requests().await.len(), 1);
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_that_cannot_run_makes_its_task_wait_for_it() {
    let (s, _slow_pid, _) = ran_with_a_missing_and_a_slow_server().await;

    let gone = s.summary("a-gone");
    assert_eq!(gone.stop_reason, StopReason::ToolServerUnavailable);
    assert!(gone.retryable);
    assert_contains(
        gone.error.unwrap(),
        "MCP server gone did not start: cannot run /nonexistent/mcp-server",
    );
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_slow_to_start_is_given_up_at_its_timeout_and_killed() {
    let (s, slow_pid, _) = ran_with_a_missing_and_a_slow_server().await;

    let slow = s.summary("b-slow").error.unwrap();
    assert_contains(
        &slow,
        "MCP server slow did not start and list its tools within 2 s",
    );
    assert_contains(
        &slow,
        "its stderr ends: test server starting (delay 3600.0 s)",
    );
    assert_contains(s.summary("c-slow-again").error.unwrap(), "within 2 s");
    let log = s.run_log("b-slow");
    assert!(
        log.contains("tool_server_unavailable") || log.contains("stays in the inbox"),
        "{log}"
    );
    // It did not outlive its start-up timeout.
    assert!(pid_file_gone(&slow_pid), "the slow server lived on");
}

/// Servers `gone` (no such program) and `t`; task `a-any` names no tools
/// and looks up alpha, `b-named` names a tool of gone: the scene after its
/// run and the run's outcome.
async fn ran_with_a_down_server() -> (Scene, RunOutcome) {
    let extra = format!(
        "[mcp.servers.gone]\ncommand = [\"/nonexistent/mcp-server\"]\n{}",
        server("t", &[], "")
    );
    let s = scenario()
        .by_progress(vec![
            ok(call("t__lookup", json!({"key": "alpha"}))),
            ok(final_answer("done")),
        ])
        .config(&extra)
        .env(mcp_env)
        .task("a-any", "Look up alpha.")
        .task("b-named", &with_tools(&["gone__x"], "Go."))
        .build()
        .await;
    let outcome = s.run().await;
    (s, outcome)
}

/// A down server spares the tasks that do not name its tools (docs/tools.md,
/// "Tools from MCP servers"): a task without a `tools` list runs with the
/// built-in tools and the servers that are up, and its records say which server
/// was left out and why.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_down_server_spares_tasks_that_name_no_tools() {
    let (s, _) = ran_with_a_down_server().await;

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
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_task_that_names_a_down_servers_tool_still_waits_for_it() {
    let (s, outcome) = ran_with_a_down_server().await;

    let RunOutcome::Finished(tally) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!((tally.succeeded, tally.retry_later), (1, 1), "{tally:?}");
    let named = s.summary("b-named");
    assert_eq!(named.stop_reason, StopReason::ToolServerUnavailable);
}

/// The metrics say which servers were up.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn the_metrics_say_which_mcp_servers_were_up() {
    let (s, _) = ran_with_a_down_server().await;

    let metrics = s.metrics();
    assert_contains(
        &metrics,
        "agent_harness_tool_server_up{server=\"gone\"} 0\n",
    );
    assert_contains(&metrics, "agent_harness_tool_server_up{server=\"t\"} 1\n");
}

/// Task `a-dies` calling `t__die`, then answering, and `b-after` naming
/// a tool of the same server: the scene after its run.
async fn ran_with_a_server_that_dies() -> Scene {
    scenario()
        .by_progress(vec![
            ok(call("t__die", json!({}))),
            ok(final_answer("it died")),
        ])
        .config(&server("t", &[], ""))
        .env(mcp_env)
        .task("a-dies", &with_tools(&["t__die"], "Go."))
        .task("b-after", &with_tools(&["t__lookup"], "Go."))
        .ran()
        .await
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_that_dies_mid_task_fails_the_call_and_the_task_is_tried_again() {
    let s = ran_with_a_server_that_dies().await;

    let lines = s.tool_lines("a-dies");
    assert!(lines[0].is_error);
    assert_contains(&lines[0].result, "MCP server t stopped answering");
    // The model answered after the failed call; the task still does not
    // pass as done: it is tried again when the server can be started.
    let dies = s.summary("a-dies");
    assert_eq!(dies.stop_reason, StopReason::ToolServerUnavailable);
    assert!(dies.retryable && dies.final_answer.is_none());
    assert_contains(dies.error.unwrap(), "while the task ran");
    assert_eq!(s.inbox(), ["a-dies.md", "b-after.md"]);
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_server_that_died_fails_every_task_that_may_use_it() {
    let s = ran_with_a_server_that_dies().await;

    let after = s.summary("b-after");
    assert_eq!(after.stop_reason, StopReason::ToolServerUnavailable);
    assert_contains(after.error.unwrap(), "MCP server t stopped answering");
    assert_eq!(s.inbox(), ["a-dies.md", "b-after.md"]);
}

/// The test server serving streamable HTTP on a port of its own, stopped
/// when dropped.
struct HttpServer {
    port: u16,
    child: Child,
}

impl HttpServer {
    fn start() -> HttpServer {
        let port = closed_port();
        let child = std::process::Command::new(mcp_python())
            .arg(mcp_script("test_server.py"))
            .args(["--http", &port.to_string()])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = HttpServer { port, child };
        let up = polled(100, Duration::from_millis(100), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "the HTTP test server did not listen");
        server
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Task `web` calling `h__huge` for 3000 KiB, then `h__lookup`, on the
/// HTTP test server `h`: the scene after its run and the server.
async fn ran_over_http() -> (Scene, HttpServer) {
    let http = HttpServer::start();
    let config = format!(
        "[mcp.servers.h]\nurl = \"http://127.0.0.1:{}/mcp\"\ntools = [\"lookup\", \"huge\"]",
        http.port
    );
    let calls = vec![
        ("h__huge", json!({"kib": 3000})),
        ("h__lookup", json!({"key": "web"})),
    ];
    let s = scenario()
        .calls(calls, "done")
        .config(&config)
        .env(mcp_env)
        .task("web", "Look it up.")
        .ran()
        .await;
    (s, http)
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn the_streamable_http_transport_calls_a_tool() {
    let (s, _http) = ran_over_http().await;

    let log = s.run_log("web");
    assert_eq!(
        s.tool_lines("web")[1].result,
        "the value of web is 42",
        "{log}"
    );
    assert_eq!(s.summary("web").status, Status::Succeeded);
}

/// A 6 MiB answer (3 MiB of text, twice) is read and cut.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_huge_answer_over_streamable_http_is_read_and_cut() {
    let (s, _http) = ran_over_http().await;

    let huge = &s.tool_lines("web")[0];
    assert!(!huge.is_error, "{huge:?}");
    assert!(huge.original_chars > 3_000_000, "{}", huge.original_chars);
    assert_contains(&huge.result, "[cut: ");
}

/// What `test` says of server `t` (two tools of its list, slow to start)
/// and of `gone` (no such program): whether it passed, and its report.
async fn smoke_test_of_t_and_gone() -> (bool, String) {
    let t = server(
        "t",
        &["--delay", "0.1"],
        "tools = [\"lookup\", \"delete_item\"]",
    );
    let s = scenario()
        .replies(vec![
            final_answer("Hello."),
            tool_calls(&[("call_1", "get_current_time", json!({"city": "Paris"}))]),
            final_answer("It is noon in Paris."),
        ])
        .config(&format!(
            "{t}[mcp.servers.gone]\ncommand = [\"/nonexistent/mcp-server\"]\n"
        ))
        .env(mcp_env)
        .build()
        .await;
    let cfg = s.cfg();
    let ep = agent_harness::endpoint::Endpoint::new(&cfg.endpoint, &cfg.tls.trust).unwrap();
    let mut out = Vec::new();
    let passed = agent_harness::app::smoke::test_endpoint(&cfg, &ep, &mut out).await;
    (passed, String::from_utf8(out).unwrap())
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn test_runpod_starts_each_server_once_and_lists_its_tools() {
    let (_, out) = smoke_test_of_t_and_gone().await;

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
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn test_runpod_fails_on_a_server_that_cannot_start() {
    let (passed, out) = smoke_test_of_t_and_gone().await;

    assert!(!passed, "{out}");
    assert_eq!(agent_harness::app::smoke_exit(passed), 1);
    let fail = out
        .lines()
        .find(|l| l.starts_with("FAIL mcp gone:"))
        .unwrap_or_else(|| panic!("{out}"));
    assert_contains(fail, "cannot run /nonexistent/mcp-server");
}

/// Task `task` calling `t__slow` for a minute, given `wall` seconds, on a
/// test server writing its process id: the scene and that pid file.
fn calling_slowly(task: &str, wall: u64) -> (Scene, PathBuf) {
    let s = scenario()
        .by_progress(vec![
            ok(call("t__slow", json!({"seconds": 60}))),
            ok(final_answer("done")),
        ])
        .task(task, &with_tools(&["t__slow"], "Wait."))
        .build_blocking();
    let pid = pid_file(&s, "t");
    let server = pid_server(&pid, &[], "");
    s.rewrite_config(&format!("[limits]\nmax_wall_secs = {wall}\n{server}"));
    (s, pid)
}

/// The binary: no server process is left after a task's wall clock runs
/// out in the middle of a call.
#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn no_server_process_outlives_a_task_whose_wall_clock_ran_out() {
    let (s, pid) = calling_slowly("wall", 3);

    let out = bin(&s).arg("run").output().unwrap();

    let wall = s.summary_in(&the_run_dir(&s, "wall"));
    assert_eq!(
        wall.stop_reason,
        StopReason::MaxWallSecs,
        "{}",
        stderr(&out)
    );
    assert!(pid_file_gone(&pid), "the server outlived the wall clock");
}

/// The binary: no server process is left after SIGTERM.
#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn no_server_process_outlives_the_binary() {
    let (s, pid) = calling_slowly("term", 120);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut child = spawn_run(&s, Stdio::null());

    // Wait until the slow call is under way.
    let calling = polled(300, Duration::from_millis(100), || {
        !rt.block_on(s.requests()).is_empty() && pid.exists()
    });
    assert!(calling, "the task never called the slow tool");
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, rustix::process::Signal::TERM);
    // The slow call takes a minute: a run that waited for it fails here.
    let code = wait_at_most(&mut child, crate::signals::STOP_TIMEOUT);
    assert_eq!(code, Some(75));
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

/// Task `waits` on a server that takes a minute to start, the binary's
/// run signalled (SIGTERM) while the server starts: the scene, the
/// server's pid file and the run's exit code.
fn signalled_while_a_server_starts() -> (Scene, PathBuf, Option<i32>) {
    let scene = scenario()
        .answers(&["done"])
        .task("waits", &with_tools(&["t__lookup"], "Go."))
        .build_blocking();
    let pid = pid_file(&scene, "t");
    let slow_start = pid_server(&pid, &["--delay", "60"], "startup_timeout_secs = 120");
    scene.rewrite_config(&slow_start);
    let mut child = spawn_run(&scene, Stdio::null());
    let started = polled(200, Duration::from_millis(50), || pid.exists());
    assert!(started, "the server was never started");
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, rustix::process::Signal::TERM);
    // The start takes a minute: a run that waited for it fails here.
    let code = wait_at_most(&mut child, crate::signals::STOP_TIMEOUT);
    (scene, pid, code)
}

#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn a_signal_while_a_server_starts_interrupts_its_task() {
    let (scene, _pid, code) = signalled_while_a_server_starts();

    assert_eq!(code, Some(75), "the run waited for the slow start");
    assert_eq!(scene.inbox(), ["waits.md"]);
    let s = scene.summary_in(&the_run_dir(&scene, "waits"));
    assert_eq!(s.stop_reason, StopReason::Interrupted);
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert!(rt.block_on(scene.requests()).is_empty());
}

#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn a_signal_while_a_server_starts_kills_the_server() {
    let (_scene, pid, code) = signalled_while_a_server_starts();

    assert_eq!(code, Some(75), "the run waited for the slow start");
    assert!(pid_file_gone(&pid), "the half-started server lived on");
}

/// Server `t` allowing only `lookup`, and a model that looks up `exec`.
fn allowing_only_lookup() -> Scene {
    scenario()
        .calls(vec![("t__lookup", json!({"key": "exec"}))], "exec is 42")
        .config(&server("t", &[], "tools = [\"lookup\"]"))
        .build_blocking()
}

/// `agent-harness exec` with `args` in the project.
fn exec(project: &Project, args: &[&str]) -> std::process::Output {
    bin(project).arg("exec").args(args).output().unwrap()
}

#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn exec_refuses_mcp_tool_names_the_configuration_does_not_allow() {
    let s = allowing_only_lookup();

    let out = exec(&s, &["--tools", "t__big", "Go."]);

    assert_eq!(out.status.code(), Some(2));
    assert_contains(
        stderr(&out),
        "--tools: \"t__big\": \"big\" is not on the tools allowlist of [mcp.servers.t] (lookup)",
    );
}

#[test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
fn exec_takes_mcp_tool_names_the_configuration_allows() {
    let s = allowing_only_lookup();

    let out = exec(&s, &["--tools", "t__lookup", "Look up exec."]);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "exec is 42");
}

/// Task `del` deleting item `once` on a server that marks each deletion
/// in a folder: the scene after its run and the folder.
async fn ran_deleting_once() -> (Scene, PathBuf) {
    let s = scenario()
        .calls(vec![("t__delete_item", json!({"name": "once"}))], "deleted")
        .env(mcp_env)
        .task("del", &with_tools(&["t__delete_item"], "Delete once."))
        .build()
        .await;
    let markers = marker_dir(&s);
    let args = ["--marker-dir", &markers.display().to_string()];
    s.rewrite_config(&server("t", &args, ""));
    s.run().await;
    (s, markers)
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_replay_answers_calls_from_the_records() {
    let (s, markers) = ran_deleting_once().await;
    assert_eq!(marks(&markers), ["deleted-once"]);
    std::fs::remove_file(markers.join("deleted-once")).unwrap();

    let (code, out) = replay_of(&s.cfg(), &s.run_dir("del"), None).await;

    assert_eq!(code, 0, "{out}");
    assert_contains(&out, "every request matched the recording");
    assert!(
        marks(&markers).is_empty(),
        "a replay called the write tool again"
    );
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_replay_lists_the_servers_tools_again_and_sends_nothing_without_them() {
    let (s, _markers) = ran_deleting_once().await;
    s.rewrite_config("[mcp.servers.t]\ncommand = [\"/nonexistent/mcp-server\"]\n");

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
            call("t__lookup", json!({"key": "alpha"})),
            final_answer("alpha is 42"),
        ])
        .task("look", &with_tools(&["t__lookup"], "Look up alpha."))
        .config(&server("t", &[], ""))
        .env(mcp_env)
        .ran()
        .await;

    let summary = s.summary("look");
    assert_eq!((summary.status, summary.tool_calls), (Status::Succeeded, 1));
    assert_eq!(summary.final_answer.as_deref(), Some("alpha is 42"));
    assert_contains(
        s.run_log("look"),
        "the answer says it used t__lookup, but no tool has run in this task",
    );
}
