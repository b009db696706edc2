//! Secrets near MCP servers (docs/tools.md, "Tools from MCP servers"): keys in
//! a url, in a listed name, in an error a server sends back — no part of one is
//! recorded.

use agent_harness::agent::StopReason;

use crate::common::mcp::*;
use crate::common::*;

/// Task `x` using `r__<tool>` of `raw_server.py <args>`, which is passed
/// the secret `MCP_TOKEN` (and `more` of its section).
fn raw_server_task(args: &[&str], tool: &str, more: &str) -> Scenario {
    let extra = format!("env_pass = [\"MCP_TOKEN\"]{more}");
    scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .config(&mcp_server("r", "raw_server.py", args, &extra))
        .env(mcp_env)
        .task("x", &format!("+++\ntools = [\"r__{tool}\"]\n+++\nGo."))
}

/// Task `u` using `web__x` of the servers `config` says, answered "done".
fn web_x_task(config: &str) -> Scenario {
    scenario()
        .answers(&["done"])
        .config(config)
        .env(mcp_env)
        .task("u", "+++\ntools = [\"web__x\"]\n+++\nGo.")
}

/// A passed secret in a name the server lists is redacted before the name
/// is cut (80 characters) for a message: no part of it reaches
/// summary.json, run.log or test-runpod's output.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn no_part_of_a_secret_in_a_listed_name_is_recorded() {
    let scene = raw_server_task(&["longname"], "ecko", "\ntools = [\"ecko\"]")
        .ran()
        .await;
    let s = scene.summary("x");
    let error = s.error.unwrap_or_default();
    let head = &PASSED[..10];
    assert_eq!(s.stop_reason, StopReason::InvalidTask, "{error}");
    let records = scene.all_records();
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
        let pad = format!("pad={pad}");
        let scene = raw_server_task(&["initerr", &pad], "echo", "").ran().await;
        let s = scene.summary("x");
        let error = s.error.unwrap_or_default();
        assert!(!error.contains('\u{1b}'), "{error:?}");
        if error.contains(head) || scene.all_records().contains(head) {
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
    let urls = [
        "http://127.0.0.1:9/mcp?api_key=sk%2Blive%2BURLKEY1234",
        "http://ghp_USERTOKEN98765@127.0.0.1:9/mcp",
        "http://user:pa%24%24URLPASS4321@127.0.0.1:9/mcp",
    ];
    let keys = ["URLKEY1234", "USERTOKEN98765", "URLPASS4321"];
    for (url, key) in urls.into_iter().zip(keys) {
        let config = format!("[mcp.servers.web]\nurl = \"{url}\"\nstartup_timeout_secs = 5");
        let s = web_x_task(&config).ran().await;
        let error = s.summary("u").error.unwrap();
        eprintln!("{url}: {error}");
        assert!(!error.contains(key), "{url}: {error}");
        assert!(!s.all_records().contains(key), "{url}");
    }
}

/// A harmless query value (`?transport=stream`) is no secret: "stream"
/// stays readable in the records.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn a_plain_query_value_is_not_a_secret() {
    let extra = "[mcp.servers.web]\nurl = \"http://127.0.0.1:9/mcp?transport=stream\"\nstartup_timeout_secs = 5";
    let s = scenario()
        .replies(vec![final_answer("the stream is fine")])
        .config(extra)
        .env(mcp_env)
        .task("u", "+++\ntools = []\n+++\nCheck the stream.")
        .ran()
        .await;
    let records = s.all_records();
    assert!(records.contains("Check the stream."), "{records}");
}

/// The start error of an HTTP server keeps its cause (the request that
/// failed, said as every client says it: host and port, never the rest of
/// the `url`) and no part of a key in the `url`.
#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn an_http_start_error_keeps_its_cause_and_no_part_of_a_key() {
    let extra = "[mcp.servers.web]\nurl = \"http://[::1]:9/?api_key=sk-live-URLKEY1234\"\nstartup_timeout_secs = 5";
    let s = web_x_task(extra).ran().await;
    let error = s.summary("u").error.unwrap();
    assert!(!error.contains("sk-l"), "{error}");
    assert_contains(
        &error,
        "MCP server web did not start: cannot connect to [::1]:9 (connection refused)",
    );
}
