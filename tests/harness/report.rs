//! `report` and the metrics textfile (docs/operating.md, "Report" and
//! "Metrics"), checked as a person would meet them: the pages rendered by a
//! real headless Chromium, the metrics read by the Prometheus client library's
//! own parser.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use wiremock::MockServer;

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::*;

/// Markup a run can carry: if any of it were not escaped, the page would
/// run a script, load an image from the canary, or lose its structure.
fn hostile(canary: &str) -> String {
    format!(
        "<script>fetch('{canary}/script')</script><img src=\"{canary}/img\" onerror=\"alert(1)\"></details></pre><b>bold</b>"
    )
}

/// Headless Chromium (Debian's `chromium`), as scripts/test and CI install it.
fn chromium() -> PathBuf {
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(name))
                .find(|p| p.is_file())
        })
    });
    found.expect("Chromium is needed for this test: apt-get install chromium (scripts/test installs it when run as root)")
}

/// Chromium's DOM of `page` after load, and the URLs the page itself asked
/// for (browser-initiated requests of Chromium's own services excluded).
pub(crate) fn render(page: &Path, work: &Path) -> (String, Vec<String>) {
    let netlog = work.join(format!(
        "netlog-{}.json",
        page.file_stem().unwrap().to_string_lossy()
    ));
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--virtual-time-budget=3000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            work.join("profile").display()
        ))
        .arg(format!("--log-net-log={}", netlog.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log: Value = serde_json::from_str(&std::fs::read_to_string(&netlog).unwrap()).unwrap();
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].clone();
    let page_requests = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == start_job && e["params"]["url"].is_string())
        .filter(|e| e["params"]["initiator"] != "not an origin")
        .map(|e| e["params"]["url"].as_str().unwrap_or("").to_string())
        .collect();
    (String::from_utf8(out.stdout).unwrap(), page_requests)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/test: headless Chromium (Debian chromium)"]
async fn the_report_renders_in_chromium_folded_escaped_and_self_contained() {
    let canary = MockServer::start().await;
    let evil = hostile(&canary.uri());
    let notes = FakeNoteworx::start(vec![note("n", "Note", &[], &format!("Text. {evil}"))]).await;
    let thinking = reply(
        json!({"role": "assistant", "content": "", "reasoning_content": format!("Plan: {evil}"),
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "noteworx_read_note", "arguments": "{\"slug\":\"n\"}"}}]}),
        "tool_calls",
    );
    let s = scenario()
        .replies(vec![thinking, final_answer(&format!("Done. {evil}"))])
        .task("a-hostile", "Read note n.")
        .task("b-fails", "+++\ntools = [\"nope\"]\n+++\nInvalid.")
        .notes(&notes)
        .build()
        .await;
    let run = assert_cmd::Command::cargo_bin("agent-harness")
        .unwrap()
        .arg("run")
        .current_dir(s.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .env("NOTEWORX_TOKEN", crate::common::fake_noteworx::TOKEN)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1), "one task failed");
    let out_dir = s.root().join("report");

    let made = assert_cmd::Command::cargo_bin("agent-harness")
        .unwrap()
        .args(["report", "--out", "report"])
        .current_dir(s.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .output()
        .unwrap();

    assert_eq!(made.status.code(), Some(0));
    let said = String::from_utf8_lossy(&made.stdout);
    assert!(said.starts_with("report of 2 run(s): file:///"), "{said}");
    let work = tempfile::tempdir().unwrap();
    let (index, index_requests) = render(&out_dir.join("index.html"), work.path());
    assert_eq!(index.matches("<tr class=").count(), 2, "a row per run");
    assert!(index.contains("class=\"t0 s-succeeded\"") && index.contains("class=\"t1 s-failed\""));
    assert!(
        index.contains("<label for=\"status-failed\">failed</label>"),
        "the filters are there"
    );
    assert!(index_requests.is_empty(), "{index_requests:?}");
    assert!(index.contains("<th>Answer</th>"), "{index}");
    assert!(
        index.contains("<td class=\"answer\">Done. &lt;script&gt;"),
        "the answer's first line, escaped: {index}"
    );

    let pages: Vec<PathBuf> = std::fs::read_dir(out_dir.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let hostile_page = pages
        .iter()
        .find(|p| p.to_string_lossy().contains("a-hostile"))
        .unwrap();
    let (dom, requests) = render(hostile_page, work.path());
    assert!(requests.is_empty(), "the page asked for {requests:?}");
    assert!(
        canary.received_requests().await.unwrap().is_empty(),
        "the canary was hit"
    );
    assert!(
        !dom.contains("<script") && !dom.contains("<img") && !dom.contains("<b>"),
        "markup ran: {dom}"
    );
    assert!(
        dom.contains("Done. &lt;script&gt;fetch("),
        "the answer shows its markup as text"
    );
    assert!(dom.contains("&lt;/details&gt;&lt;/pre&gt;&lt;b&gt;bold&lt;/b&gt;"));
    assert_eq!(
        dom.matches("<details").count(),
        dom.matches("</details>").count(),
        "no injected </details> closed a fold"
    );
    assert_contains(
        &dom,
        "<details class=\"thinking\"><summary>Thinking</summary>",
    );
    assert_contains(&dom, "<details class=\"call\"><summary>noteworx_read_note");
    assert!(
        dom.contains("Plan: &lt;script&gt;"),
        "thinking is there, folded and escaped"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/test: the prometheus_client parser from scripts/stack install"]
async fn each_run_writes_metrics_that_the_prometheus_parser_reads() {
    let s = scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .task("a", "One.")
        .task("b", "+++\ntools = [\"nope\"]\n+++\nInvalid.")
        .build()
        .await;
    let run = assert_cmd::Command::cargo_bin("agent-harness")
        .unwrap()
        .arg("run")
        .current_dir(s.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    let textfile = s.root().join("logs/agent-harness.prom");

    let python = stack_python();
    let parsed = Command::new(&python)
        .arg("-c")
        .arg(
            "import json,sys\n\
             from prometheus_client.parser import text_string_to_metric_families\n\
             out={}\n\
             for fam in text_string_to_metric_families(open(sys.argv[1]).read()):\n\
             \x20   out[fam.name]={'type':fam.type,'help':fam.documentation,\n\
             \x20     'samples':[[s.name,s.labels,s.value] for s in fam.samples]}\n\
             print(json.dumps(out))",
        )
        .arg(&textfile)
        .output()
        .unwrap();
    assert!(
        parsed.status.success(),
        "{}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let m: Value = serde_json::from_slice(&parsed.stdout).unwrap();
    let sample = |family: &str| m[family]["samples"].clone();
    assert_eq!(
        sample("agent_harness_last_run_tasks"),
        json!([
            ["agent_harness_last_run_tasks", {"status": "failed", "stop_reason": "invalid_task"}, 1.0],
            ["agent_harness_last_run_tasks", {"status": "succeeded", "stop_reason": "final_answer"}, 1.0]
        ])
    );
    assert_eq!(
        sample("agent_harness_last_run_tokens"),
        json!([
            ["agent_harness_last_run_tokens", {"kind": "prompt"}, 150.0],
            ["agent_harness_last_run_tokens", {"kind": "completion"}, 10.0]
        ])
    );
    assert_eq!(sample("agent_harness_last_run_exit_code")[0][2], 1.0);
    let started = sample("agent_harness_last_run_start_time_seconds")[0][2]
        .as_f64()
        .unwrap();
    let now = chrono::Utc::now().timestamp() as f64;
    assert!((now - started).abs() < 120.0, "{started} vs {now}");
    for family in [
        "agent_harness_last_run_task_seconds",
        "agent_harness_last_run_duration_seconds",
    ] {
        assert_eq!(m[family]["type"], "gauge", "{family}");
        // Seconds of a run against a local fake: a few at most, never a
        // count of milliseconds or a timestamp written in their place.
        let secs = sample(family)[0][2].as_f64().unwrap();
        assert!((0.0..60.0).contains(&secs), "{family} = {secs}");
    }
    assert!(
        m.as_object()
            .unwrap()
            .values()
            .all(|f| !f["help"].as_str().unwrap().is_empty())
    );
    let leftovers: Vec<String> = std::fs::read_dir(s.root().join("logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "written by rename: {leftovers:?}");

    // `textfile = ""` turns it off.
    std::fs::remove_file(&textfile).unwrap();
    s.rewrite_config("[metrics]\ntextfile = \"\"\n");
    s.task("c", "Again.");
    let run = assert_cmd::Command::cargo_bin("agent-harness")
        .unwrap()
        .arg("run")
        .current_dir(s.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0));
    assert!(!textfile.exists());
}

/// The stack's Python, which has the prometheus_client package.
fn stack_python() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/stack"))
        .arg("paths")
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("PYTHON=").map(str::to_string))
        .expect("run scripts/stack install (or scripts/test) first")
}

/// The textfile as its real consumers meet it (docs/operating.md, "Metrics").
/// The run's umask is 0077, as under the shipped unit; `promtool check metrics`
/// must find nothing, and node_exporter's textfile collector, running as its
/// own user (`prometheus`, when this test runs as root), must read every
/// series.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/test: promtool and prometheus-node-exporter (Debian)"]
async fn promtool_and_node_exporter_as_another_user_read_the_textfile() {
    use std::os::unix::fs::PermissionsExt;
    // A ping service and a trace collector that are down: the counters
    // of failed notifications and of lost traces too.
    let s = scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .task("a", "One.")
        .config(&format!(
            "[metrics]\ntextfile = \"textfile/agent-harness.prom\"\n\
             [notify]\nping_url = \"http://127.0.0.1:{}/ping/check\"\n\
             [budget]\ntokens_per_day = 100000\ngpu_seconds_per_day = 3600\n\
             [traces]\nendpoint = \"http://127.0.0.1:{}/v1/traces\"\nflush_secs = 1",
            closed_port(),
            closed_port()
        ))
        .build()
        .await;
    let collector = s.root().join("textfile");
    std::fs::create_dir(&collector).unwrap();
    for dir in [s.root(), &collector] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let bin = assert_cmd::cargo::cargo_bin("agent-harness");
    let run = Command::new("sh")
        .arg("-c")
        .arg("umask 0077; exec \"$0\" run")
        .arg(&bin)
        .current_dir(s.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let textfile = collector.join("agent-harness.prom");
    let mode = std::fs::metadata(&textfile).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o777,
        0o644,
        "readable by another user whatever the umask"
    );

    let promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&textfile).unwrap())
        .output()
        .expect("promtool is needed for this test: apt-get install prometheus (scripts/test installs it as root)");
    assert!(
        promtool.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&promtool.stdout),
        String::from_utf8_lossy(&promtool.stderr)
    );

    let port = closed_port();
    let mut exporter = Command::new("setpriv");
    let as_root = unsafe { libc::geteuid() } == 0;
    if as_root {
        exporter.args([
            "--reuid=prometheus",
            "--regid=prometheus",
            "--clear-groups",
            "--",
        ]);
    } else {
        exporter.arg("--");
    }
    let mut exporter = exporter
        .arg("prometheus-node-exporter")
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .args(["--collector.disable-defaults", "--collector.textfile"])
        .arg(format!(
            "--collector.textfile.directory={}",
            collector.display()
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("node_exporter is needed for this test: apt-get install prometheus-node-exporter");
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut scraped = None;
    for _ in 0..100 {
        if let Ok(r) =
            agent_harness::base::http::client(&agent_harness::base::http::Trust::bundled())
                .unwrap()
                .build()
                .unwrap()
                .get(&url)
                .send()
                .await
        {
            scraped = Some(r.text().await.unwrap());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = exporter.kill();
    let _ = exporter.wait();
    let scraped = scraped.expect("node_exporter did not answer within 10 s");
    assert_contains(&scraped, "node_textfile_scrape_error 0");
    for series in [
        "agent_harness_last_run_exit_code 0",
        "agent_harness_last_run_tasks{status=\"succeeded\",stop_reason=\"final_answer\"} 1",
        "agent_harness_last_success_timestamp_seconds ",
        "agent_harness_inbox_ignored_files 0",
        "agent_harness_notify_failures_total 2",
        "agent_harness_trace_export_failures_total 1",
        "agent_harness_budget_spent{kind=\"tokens\"} 160",
        "agent_harness_budget_spent{kind=\"gpu_seconds\"} ",
        "agent_harness_budget_limit{kind=\"tokens\"} 100000",
        "agent_harness_budget_limit{kind=\"gpu_seconds\"} 3600",
    ] {
        assert!(
            scraped.lines().any(|l| l.starts_with(series)),
            "{series} missing from what node_exporter serves:\n{scraped}"
        );
    }
}

#[tokio::test]
async fn tool_errors_are_in_the_task_finished_line_and_the_runs_table() {
    let s = scenario()
        .replies(vec![
            tool_calls(&[("c1", "no_such_tool", json!({}))]),
            final_answer("done"),
        ])
        .task("t", "x")
        .build()
        .await;
    let out = {
        let mut cmd = bin(&s);
        tokio::task::spawn_blocking(move || cmd.arg("run").output().unwrap())
            .await
            .unwrap()
    };
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let finished = stderr(&out)
        .lines()
        .find(|l| l.contains("task finished"))
        .map(str::to_string)
        .unwrap();
    assert!(finished.contains("tool_errors=1"), "{finished}");
    let table = stdout(&bin(&s).arg("runs").output().unwrap());
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    let col = header.iter().position(|h| *h == "TOOL ERR").unwrap();
    // "RUN ID" and "STOP REASON" are one column each but two words.
    assert_eq!(header[..col].len(), 6, "{table}");
    assert_eq!(row[col], "1", "{table}");
}

#[tokio::test]
async fn the_report_marks_cut_replies_and_counts_tool_errors() {
    let s = scenario()
        .replies(vec![
            tool_calls(&[("c1", "no_such_tool", json!({}))]),
            cut("The timer runs every"),
            final_answer("Hourly."),
        ])
        .task("t", "When?")
        .build()
        .await;
    assert_eq!(s.run().await.exit_code(), 0);

    let out = s.root().join("report");
    let written = agent_harness::outputs::report::write(
        &s.root().join("logs"),
        &agent_harness::outputs::report::ReportOptions {
            out: out.clone(),
            task: None,
            limit: 10,
        },
        chrono::Utc::now(),
        &mut |_| {},
    )
    .unwrap();
    let (index, pages) = (written.index, written.runs);
    assert_eq!(pages, 1);
    let index = std::fs::read_to_string(index).unwrap();
    assert!(index.contains("<th>Tool errors</th>"), "{index}");
    assert!(index.contains("<td class=\"failed\">1</td>"), "{index}");
    let page = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .next()
        .unwrap();
    assert_eq!(
        page.matches("CUT at max_tokens").count(),
        1,
        "only the cut turn: {page}"
    );
    assert!(page.contains("1 tool error(s)"), "{page}");
}
