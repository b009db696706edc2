//! What TLS trusts (docs/operating.md, "TLS"): the bundled roots, on every
//! client (`base::http::client`) — a certificate none of them vouches for
//! is refused, here a self-signed one for 127.0.0.1 served by Python's
//! `ssl` (`tests/fixtures/tls/`) — and `[tls] ca_file` beside them: an
//! endpoint whose certificate only a private CA signed (`common::tls`, made
//! at test time) is reached with the CA's file named, refused with what to
//! do without it; so are noteworx, the `[notify]` ping and the `[traces]`
//! collector, and an MCP server over streamable HTTP; webfetch trusts the
//! file only with `use_ca_file`; and a file
//! that is no certificate stops `check`, naming the key and the path.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

use agent_harness::base::http::Trust;
use agent_harness::records::Status;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::fake_noteworx::{self, FakeNoteworx, note};
use crate::common::mcp::{mcp_env, mcp_python, mcp_script};
use crate::common::tls::{PrivateCa, TlsFront};
use crate::common::*;

/// An HTTPS server on 127.0.0.1 with the self-signed certificate; its port.
fn self_signed_server() -> (Child, u16) {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");
    let script = format!(
        "import http.server, ssl, sys\n\
         s = http.server.HTTPServer(('127.0.0.1', 0), http.server.SimpleHTTPRequestHandler)\n\
         c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
         c.load_cert_chain('{fixtures}/self-signed.pem', '{fixtures}/self-signed.key')\n\
         s.socket = c.wrap_socket(s.socket, server_side=True)\n\
         print(s.server_address[1], flush=True)\n\
         s.serve_forever()\n"
    );
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line.trim().parse().unwrap())
}

#[tokio::test]
async fn a_certificate_no_bundled_root_vouches_for_is_refused() {
    let (mut server, port) = self_signed_server();
    let client = agent_harness::base::http::client(&Trust::bundled())
        .unwrap()
        .build()
        .unwrap();
    let err = client
        .get(format!("https://127.0.0.1:{port}/"))
        .send()
        .await
        .expect_err("an untrusted certificate");
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(e) = source {
        chain.push_str(&format!(" <- {e}"));
        source = e.source();
    }
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(chain.contains("invalid peer certificate"), "{chain}");
    assert!(chain.contains("UnknownIssuer"), "{chain}");
}

/// The fake model behind HTTPS with a certificate only `ca` signed: the
/// fake, and the front whose `url()` is the endpoint.
async fn model_behind(ca: &PrivateCa, answer: &str) -> (FakeLlm, TlsFront) {
    let llm = FakeLlm::replies(vec![final_answer(answer)]).await;
    let front = TlsFront::start(ca, *llm.server.address()).await;
    (llm, front)
}

#[tokio::test]
async fn a_task_runs_against_an_endpoint_a_private_ca_signed_once_ca_file_names_the_ca() {
    let ca = PrivateCa::new();
    let (llm, front) = model_behind(&ca, "Answered over TLS.").await;
    let s = scenario()
        .endpoint_at(&format!("{}/v1", front.url()))
        .task("t", "Answer.")
        // Relative to the config's folder.
        .config("[tls]\nca_file = \"certs/ca.pem\"\n")
        .build()
        .await;
    std::fs::create_dir(s.root().join("certs")).unwrap();
    std::fs::copy(ca.ca_file(), s.root().join("certs/ca.pem")).unwrap();

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 0);
    let summary = s.summary("t");
    assert_eq!(summary.status, Status::Succeeded);
    assert_eq!(summary.final_answer.as_deref(), Some("Answered over TLS."));
    assert_eq!(s.done().len(), 1, "filed");
    assert_eq!(llm.requests().await.len(), 1, "through the TLS front");
}

#[tokio::test]
async fn without_ca_file_that_endpoint_is_refused_saying_what_to_set() {
    let ca = PrivateCa::new();
    let (llm, front) = model_behind(&ca, "never").await;
    let s = scenario()
        .endpoint_at(&format!("{}/v1", front.url()))
        .task("t", "Answer.")
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    // A setup fault: no later run fixes it. Nothing is touched, the run
    // says what to set, and the unit shows failed.
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_contains(&err, &format!("cannot connect to 127.0.0.1:{}", front.port));
    assert_contains(&err, "invalid peer certificate: UnknownIssuer");
    let what_to_set = "a private CA? set [tls] ca_file to its PEM certificate";
    assert_contains(&err, what_to_set);
    assert_contains(&err, "setup fault");
    assert_eq!(s.inbox(), ["t.md"]);
    assert!(llm.requests().await.is_empty());

    let out = s.binary_async(&["test-endpoint"]).await;
    assert_ne!(out.status.code(), Some(0));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert_contains(&said, "set [tls] ca_file");
}

/// A self-signed certificate made as `openssl req -x509` makes one by
/// default (`CA:TRUE`) cannot be the server's own, even named in
/// `ca_file`: rustls refuses it (`CaUsedAsEndEntity`). That is a setup
/// fault too, saying what to fix, never "unreachable" run after run.
#[tokio::test]
async fn a_server_showing_a_ca_certificate_as_its_own_is_a_setup_fault_saying_what_to_fix() {
    let ca = PrivateCa::self_signed_as_a_ca();
    let (llm, front) = model_behind(&ca, "never").await;
    let s = scenario()
        .endpoint_at(&format!("{}/v1", front.url()))
        .task("t", "Answer.")
        .config(&ca.tls_section())
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("CaUsedAsEndEntity")
            && err.contains("a self-signed one needs basicConstraints CA:FALSE")
            && err.contains("setup fault"),
        "{err}"
    );
    assert_eq!(s.inbox(), ["t.md"]);
    assert!(llm.requests().await.is_empty());
}

/// The paths `server` was asked for, in order.
async fn paths(server: &MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| r.url.path().to_string())
        .collect()
}

/// A server answering every request 200, for the ping and the collector.
async fn taking_everything() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn noteworx_the_ping_and_the_collector_behind_a_private_ca_are_reached_with_ca_file() {
    let ca = PrivateCa::new();
    let llm = FakeLlm::replies(vec![
        tool_calls(&[("c1", "noteworx_list_notes", json!({}))]),
        final_answer("done"),
    ])
    .await;
    let notes = FakeNoteworx::start(vec![note("plan", "The plan", &[], "Ship it.")]).await;
    let (hc, otlp) = (taking_everything().await, taking_everything().await);
    let model = TlsFront::start(&ca, *llm.server.address()).await;
    let notes_front = TlsFront::start(&ca, *notes.server.address()).await;
    let hc_front = TlsFront::start(&ca, *hc.address()).await;
    let otlp_front = TlsFront::start(&ca, *otlp.address()).await;
    let s = scenario()
        .endpoint_at(&format!("{}/v1", model.url()))
        .task("t", "List my notes.")
        .config(&format!(
            "{}[tools.noteworx]\nbase_url = \"{}\"\n[notify]\nping_url = \"{}/ping\"\n\
             [traces]\nendpoint = \"{}/v1/traces\"\n",
            ca.tls_section(),
            notes_front.url(),
            hc_front.url(),
            otlp_front.url()
        ))
        .build()
        .await;
    let mut run = bin(&s);
    run.arg("run").env("NOTEWORX_TOKEN", fake_noteworx::TOKEN);

    let out = tokio::task::spawn_blocking(move || run.output().unwrap())
        .await
        .unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = jsonl(&the_run_dir(&s, "t").join("tools.jsonl"));
    assert!(
        lines[0]["is_error"] == false && lines[0]["result"].as_str().unwrap().contains("The plan"),
        "{lines:?}"
    );
    assert_eq!(paths(&hc).await, ["/ping/start", "/ping"]);
    assert!(
        paths(&otlp).await.iter().any(|p| p == "/v1/traces"),
        "{}",
        stderr(&out)
    );
    assert_eq!(llm.requests().await.len(), 2);
}

#[tokio::test]
async fn webfetch_trusts_the_ca_file_only_with_use_ca_file() {
    let ca = PrivateCa::new();
    let site = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/page"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw("A page behind a private CA.", "text/plain"),
        )
        .mount(&site)
        .await;
    let front = TlsFront::start(&ca, *site.address()).await;
    let url = format!("{}/page", front.url());

    for use_ca_file in [false, true] {
        let s = scenario()
            .replies(vec![
                tool_calls(&[("c1", "webfetch", json!({ "url": url }))]),
                final_answer("done"),
            ])
            .task("t", "Fetch it.")
            .config(&format!(
                "{}[tools.webfetch]\nallow_private = true\nuse_ca_file = {use_ca_file}\n",
                ca.tls_section()
            ))
            .build()
            .await;

        s.run().await;

        let lines = s.tool_lines("t");
        assert_eq!(lines.len(), 1, "{lines:?}");
        let fetched = &lines[0];
        if use_ca_file {
            assert!(
                !fetched.is_error && fetched.result.contains("A page behind a private CA."),
                "{fetched:?}"
            );
        } else {
            assert!(
                fetched.is_error
                    && fetched.result
                        == format!(
                            "Could not connect to {url} (certificate not trusted). Check the address or try another page."
                        ),
                "the operator's CA is not the model's: {fetched:?}"
            );
        }
    }
    assert_eq!(
        site.received_requests().await.unwrap_or_default().len(),
        1,
        "only the fetch that trusted the CA got through"
    );
}

#[tokio::test]
async fn check_refuses_a_ca_file_that_is_no_certificate_naming_the_key_and_the_path() {
    let s = offline()
        .config("[tls]\nca_file = \"certs/ca.pem\"\n")
        .build()
        .await;
    let file = s.root().join("certs/ca.pem");
    let check = || {
        bin(&s)
            .arg("--config")
            .arg(s.config_path())
            .arg("check")
            .output()
            .unwrap()
    };

    let out = check();

    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert_contains(
        stderr(&out),
        &format!(
            "[tls] ca_file {}: cannot read it (No such file or directory",
            file.display()
        ),
    );

    std::fs::create_dir(s.root().join("certs")).unwrap();
    std::fs::write(&file, "not a certificate\n").unwrap();
    let out = check();
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert_contains(
        stderr(&out),
        &format!(
            "[tls] ca_file {}: it is not PEM: no `-----BEGIN CERTIFICATE-----` block",
            file.display()
        ),
    );

    std::fs::copy(PrivateCa::new().ca_file(), &file).unwrap();
    let out = check();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_contains(
        stdout(&out),
        &format!(
            "tls: the bundled roots and 1 certificate(s) from {} are trusted (webfetch: the bundled roots alone)",
            file.display()
        ),
    );
}

#[tokio::test]
#[ignore = "needs scripts/test: the MCP SDK and servers from scripts/stack install"]
async fn an_mcp_server_behind_a_private_ca_starts_once_ca_file_names_the_ca() {
    let ca = PrivateCa::new();
    let port = closed_port();
    let mut child = std::process::Command::new(mcp_python())
        .arg(mcp_script("test_server.py"))
        .args(["--http", &port.to_string()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let front = TlsFront::start(&ca, ([127, 0, 0, 1], port).into()).await;
    let server = format!(
        "[mcp.servers.h]\nurl = \"{}/mcp\"\ntools = [\"lookup\"]\nstartup_timeout_secs = 10\n",
        front.url()
    );
    let replies = || {
        vec![
            tool_calls(&[("c1", "h__lookup", json!({"key": "web"}))]),
            final_answer("done"),
        ]
    };
    let trusted = scenario()
        .replies(replies())
        .config(&format!("{server}{}", ca.tls_section()))
        .env(mcp_env)
        .task("web", "Look it up.")
        .build()
        .await;
    let untrusted = scenario()
        .replies(replies())
        .config(&server)
        .env(mcp_env)
        .task("web", "Look it up.")
        .build()
        .await;

    trusted.run().await;
    untrusted.run().await;

    let _ = child.kill();
    let _ = child.wait();
    assert!(up, "the HTTP test server did not listen");
    let lines = trusted.tool_lines("web");
    assert_eq!(lines[0].result, "the value of web is 42", "{lines:?}");
    assert_eq!(trusted.summary("web").status, Status::Succeeded);
    // The task names no tools, so it runs without the server's, and says why.
    let refused = untrusted.summary("web");
    assert_eq!(refused.tool_servers_down, ["h"]);
    let log = untrusted.run_log("web");
    assert_contains(
        &log,
        &format!(
            "MCP server h did not start: cannot connect to 127.0.0.1:{} (invalid peer certificate: UnknownIssuer; a private CA? set [tls] ca_file to its PEM certificate)",
            front.port
        ),
    );
}
