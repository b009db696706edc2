//! The `runpod` endpoint kind (docs/operating.md, "Endpoints and retries")
//! against a scripted RunPod.

use agent_harness::agent::StopReason;
use agent_harness::records::Status;
use serde_json::json;
use wiremock::ResponseTemplate;

use crate::common::fake_runpod::{self, FakeRunpod, completed, job};
use crate::common::*;

/// Task `t` saying `text`, on the RunPod endpoint `rp`.
fn task_on(rp: &FakeRunpod, text: &str) -> Scenario {
    scenario()
        .task("t", text)
        .config_file(&rp.config_sections())
}

/// A RunPod whose job `job-1` sits in the queue for two polls, is in
/// progress at the third and then answers "from runpod".
async fn queued_for_several_polls() -> FakeRunpod {
    FakeRunpod::start(
        vec![ok(job("job-1", "IN_QUEUE"))],
        vec![
            ok(job("job-1", "IN_QUEUE")),
            ok(job("job-1", "IN_PROGRESS")),
            ok(completed("job-1", final_answer("from runpod"), 2100, 3800)),
        ],
        false,
    )
    .await
}

/// The `authorization` header of each `/runsync` request.
async fn runsync_authorizations(rp: &FakeRunpod) -> Vec<String> {
    let requests = rp.server.received_requests().await.unwrap();
    requests
        .iter()
        .filter(|r| r.url.path().ends_with("/runsync"))
        .map(|r| r.headers["authorization"].to_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_task_succeeds_through_a_job_that_sat_in_the_queue_for_several_polls() {
    let rp = queued_for_several_polls().await;
    let s = task_on(&rp, "Hello.").build().await;

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 0);
    let t = s.summary("t");
    assert_eq!(
        (t.status, t.final_answer.as_deref()),
        (Status::Succeeded, Some("from runpod"))
    );
    assert_eq!(
        (t.runpod_delay_ms, t.runpod_exec_ms),
        (Some(2100), Some(3800))
    );
    let paths: Vec<String> = rp.calls().await.into_iter().map(|(_, p)| p).collect();
    let poll = "/v2/ep123/status/job-1";
    assert_eq!(paths[1..], ["/v2/ep123/runsync", poll, poll, poll]);
    assert_eq!(paths[0], "/v2/ep123/health", "the reachability check");
    let job = json!({"job_id": "job-1", "status": "COMPLETED", "delayTime": 2100, "executionTime": 3800, "polls": 3});
    assert_eq!(s.conversation("t")[0].runpod, Some(job));
}

#[tokio::test]
async fn the_job_carries_the_chat_request_and_the_key_only_in_its_header() {
    let rp = queued_for_several_polls().await;
    let s = task_on(&rp, "Hello.").ran().await;

    let body = &rp.runsync_bodies().await[0];
    let asked = sent(&body["input"]);
    assert_eq!(asked.messages[1].content, "Hello.");
    assert_eq!(asked.stream, Some(false));
    let bearer = format!("Bearer {}", fake_runpod::KEY);
    assert_eq!(runsync_authorizations(&rp).await, [bearer]);
    assert_lacks(s.all_records(), fake_runpod::KEY);
}

#[tokio::test]
async fn status_polls_fall_back_to_post_on_405() {
    let rp = FakeRunpod::start(
        vec![ok(job("j", "IN_PROGRESS"))],
        vec![ok(completed("j", final_answer("ok"), 1, 2))],
        true,
    )
    .await;
    let s = task_on(&rp, "Hi.").ran().await;

    assert_eq!(s.summary("t").status, Status::Succeeded);
    let calls = rp.calls().await;
    assert!(calls.contains(&("GET".into(), "/v2/ep123/status/j".into())));
    assert!(calls.contains(&("POST".into(), "/v2/ep123/status/j".into())));
}

#[tokio::test]
async fn a_failed_job_is_retried_and_its_json_error_is_decoded() {
    let failed = json!({"id": "j1", "status": "FAILED", "error": "{\"error_type\": \"HTTPError\", \"error_message\": \"503 Server Error: loading\", \"error_traceback\": \"Traceback...\"}"});
    let second = ok(completed("j2", final_answer("second time"), 5, 6));
    let rp = FakeRunpod::start(vec![ok(failed), second], vec![], false).await;
    let s = task_on(&rp, "Hi.").ran().await;

    let t = s.summary("t");
    assert_eq!(t.final_answer.as_deref(), Some("second time"));
    let lines = s.conversation("t");
    assert_eq!(
        lines[0].error.as_deref(),
        Some("the RunPod job failed: 503 Server Error: loading (HTTPError)")
    );
    assert_eq!(lines[1].attempt, 2);
}

#[tokio::test]
async fn cancelled_and_timed_out_jobs_end_the_task_as_retryable_without_in_task_retries() {
    for status in ["CANCELLED", "TIMED_OUT"] {
        let rp = FakeRunpod::start(vec![ok(job("j", status))], vec![], false).await;
        let s = task_on(&rp, "Hi.").build().await;

        let outcome = s.run().await;

        assert_eq!(outcome.exit_code(), 75, "{status}");
        let t = s.summary("t");
        assert_eq!(
            (t.stop_reason, t.retryable),
            (StopReason::EndpointError, true),
            "{status}"
        );
        assert_eq!(
            rp.runsync_bodies().await.len(),
            1,
            "{status} is not retried within the task"
        );
        assert_eq!(s.inbox(), ["t.md"]);
    }
}

#[tokio::test]
async fn a_429_is_retried_after_the_servers_retry_after() {
    let rp = FakeRunpod::start(
        vec![
            ResponseTemplate::new(429).insert_header("retry-after", "1"),
            ok(completed("j", final_answer("ok"), 1, 1)),
        ],
        vec![],
        false,
    )
    .await;
    let s = task_on(&rp, "Hi.").build().await;

    let started = std::time::Instant::now();
    s.run().await;

    assert!(
        started.elapsed() >= std::time::Duration::from_millis(950),
        "Retry-After: 1 was honoured"
    );
    assert_eq!(s.summary("t").status, Status::Succeeded);
    assert_eq!(s.conversation("t")[0].http_status, Some(429));
}

#[tokio::test]
async fn a_job_still_pending_at_the_deadline_is_cancelled_and_the_task_stops_on_wall_clock() {
    let rp = FakeRunpod::start(
        vec![ok(job("slow", "IN_QUEUE"))],
        vec![ok(job("slow", "IN_QUEUE"))],
        false,
    )
    .await;
    let s = task_on(&rp, "+++\nmax_wall_secs = 1\n+++\nHi.").ran().await;

    let t = s.summary("t");
    assert_eq!(
        (t.stop_reason, t.retryable),
        (StopReason::MaxWallSecs, false)
    );
    assert!(
        rp.calls()
            .await
            .contains(&("POST".into(), "/v2/ep123/cancel/slow".into()))
    );
    assert_eq!(s.failed().len(), 1);
}

#[tokio::test]
async fn endpoint_url_replaces_base_url_and_id() {
    let local = json!({"id": "test-1", "status": "COMPLETED", "output": final_answer("local")});
    let rp = FakeRunpod::start(vec![ok(local)], vec![], false).await;
    let config = format!(
        "[runpod]\nendpoint_url = \"{}/\"\napi_key_env = \"\"\n",
        rp.server.uri()
    );
    let s = scenario().task("t", "Hi.").config_file(&config).ran().await;

    let t = s.summary("t");
    assert_eq!(t.final_answer.as_deref(), Some("local"));
    assert_eq!(
        (t.runpod_delay_ms, t.runpod_exec_ms),
        (Some(0), Some(0)),
        "the local server sends no timings"
    );
    let calls = rp.calls().await;
    assert!(calls.contains(&("POST".into(), "/runsync".into())));
}
