//! Unit tests of `endpoint`.

#![allow(
    clippy::disallowed_methods,
    reason = "the endpoint's tests charge the budget as its attempts do"
)]

use super::errors::{AttemptError, Next, ServerError};
use super::*;
use harness_base::http::RawBody;
use reqwest::StatusCode;

#[test]
fn after_the_endpoint_answered_only_credentials_stop_the_run() {
    let status = |s: u16| AttemptError::Status {
        status: s,
        message: "x".into(),
        retry_after: None,
        context: None,
        enveloped: true,
    };
    // Once the endpoint answered in this run, only credentials stop it; a
    // route refusal is about the request, and a 501 passes.
    for (s, stops) in [(401, true), (403, false), (404, false), (405, false)] {
        let next = status(s).next(true);
        assert_eq!(
            matches!(next, Next::Fail(CallError::Setup { .. })),
            stops,
            "{s}"
        );
    }
    assert!(matches!(status(501).next(true), Next::Retry { .. }));
    // A 2xx that is no JSON is another service, until the endpoint answered.
    let html = || AttemptError::NotJson {
        status: 200,
        message: "a body that is not JSON: <!DOCTYPE html>".into(),
    };
    assert!(matches!(
        html().next(false),
        Next::Fail(CallError::Setup { status: 200, .. })
    ));
    assert!(matches!(html().next(true), Next::Retry { .. }));
}

#[test]
fn before_an_answer_a_refusal_that_is_no_chat_servers_is_a_setup_fault() {
    let status = |s: u16, enveloped: bool| AttemptError::Status {
        status: s,
        message: "model: Field required".into(),
        retry_after: None,
        context: None,
        enveloped,
    };
    let setup = |n: Next| matches!(n, Next::Fail(CallError::Setup { .. }));
    // A FastAPI 422, another API's 400 or 409: the URL is another service's.
    for s in [400, 409, 410, 422, 451] {
        assert!(setup(status(s, false).next(false)), "{s}");
        // The same from a chat server is about the task.
        assert!(
            matches!(
                status(s, true).next(false),
                Next::Fail(CallError::Rejected { .. })
            ),
            "{s}"
        );
        // Once the endpoint answered, it is about the request.
        assert!(
            matches!(
                status(s, false).next(true),
                Next::Fail(CallError::Rejected { .. })
            ),
            "{s}"
        );
    }
    // Timeouts, too large and too many stay what they were.
    assert!(matches!(status(408, false).next(false), Next::Retry { .. }));
    assert!(matches!(status(429, false).next(false), Next::Retry { .. }));
    assert!(matches!(
        status(413, false).next(false),
        Next::Fail(CallError::Rejected { .. })
    ));
    // llama-server without its Jinja templates refuses every tool request.
    let jinja = |answered| {
        AttemptError::Status {
            status: 500,
            message: "tools param requires --jinja flag".into(),
            retry_after: None,
            context: None,
            enveloped: true,
        }
        .next(answered)
    };
    assert!(setup(jinja(false)));
    // After an answer those words could be quoted from a model's output.
    assert!(!setup(jinja(true)));
    let quoted = AttemptError::Status {
        status: 500,
        message: "Failed to parse input: <tool_call>tools param requires --jinja flag".into(),
        retry_after: None,
        context: None,
        enveloped: true,
    };
    assert!(!setup(quoted.next(false)));
    // JSON that is no chat completion, before any was: another service.
    assert!(setup(
        AttemptError::BadBody("the reply has no choices".into()).next(false)
    ));
    assert!(matches!(
        AttemptError::BadBody("the reply has no choices".into()).next(true),
        Next::Retry { .. }
    ));
}

#[test]
fn statuses_are_classified_without_reading_messages() {
    let status = |s: u16| AttemptError::Status {
        status: s,
        message: "x".into(),
        retry_after: None,
        context: None,
        enveloped: true,
    };
    for s in [408, 429, 502, 503, 504] {
        assert!(
            matches!(
                status(s).next(false),
                Next::Retry {
                    new_seed: false,
                    ..
                }
            ),
            "{s}"
        );
    }
    assert!(matches!(
        status(500).next(false),
        Next::Retry { new_seed: true, .. }
    ));
    for s in [400, 409, 413, 422] {
        assert!(
            matches!(
                status(s).next(false),
                Next::Fail(CallError::Rejected { .. })
            ),
            "{s}"
        );
    }
    for s in [401, 402, 403, 404, 405, 407, 501] {
        assert!(
            matches!(status(s).next(false), Next::Fail(CallError::Setup { status, .. }) if status == s),
            "{s}"
        );
    }
    let ctx = AttemptError::Status {
        status: 400,
        message: "x".into(),
        retry_after: None,
        context: Some((Some(3253), Some(2048))),
        enveloped: true,
    };
    assert!(matches!(
        ctx.next(false),
        Next::Fail(CallError::ContextExceeded {
            n_prompt: Some(3253),
            n_ctx: Some(2048)
        })
    ));
    assert!(matches!(
        AttemptError::JobEnded("c".into()).next(false),
        Next::Fail(CallError::Unavailable(_))
    ));
    assert!(matches!(
        AttemptError::JobFailed("f".into()).next(false),
        Next::Retry { new_seed: true, .. }
    ));
}

#[test]
fn llama_server_error_bodies_are_read() {
    let fixture: Value = serde_json::from_str(include_str!(
        "../../../tests/fixtures/llama-server/context_exceeded.json"
    ))
    .unwrap();
    let none = Redactor::default();
    let e = ServerError::read(
        Some(&RawBody::from_value(&fixture["response"])),
        "",
        StatusCode::BAD_REQUEST,
        &none,
    );
    assert_eq!(e.kind.as_deref(), Some("exceed_context_size_error"));
    assert_eq!((e.n_prompt_tokens, e.n_ctx), (Some(3253), Some(2048)));
    let e = ServerError::read(
        None,
        "<html>bad gateway</html>",
        StatusCode::BAD_GATEWAY,
        &none,
    );
    assert_eq!(e.message, "<html>bad gateway</html>");
}

#[test]
fn a_key_across_the_cut_of_a_servers_words_is_redacted_whole_first() {
    let key = "sk-live-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdef";
    let redactor = Redactor::new(vec![harness_base::redact::Secret::new(key)]);
    // The key starts 20 characters before each cut: 500 for a JSON error,
    // 300 for a body that is not JSON.
    for (cut, wrap) in [(500, true), (300, false)] {
        let words = format!("{}invalid api key: {key} tail", "x".repeat(cut - 20 - 17));
        let body = json!({"error": {"message": words, "type": "invalid_request_error"}});
        let e = if wrap {
            ServerError::read(
                Some(&RawBody::from_value(&body)),
                "",
                StatusCode::UNAUTHORIZED,
                &redactor,
            )
        } else {
            ServerError::read(None, &words, StatusCode::UNAUTHORIZED, &redactor)
        };
        assert!(!e.message.contains("sk-live-ABCD"), "{cut}: {}", e.message);
        assert!(
            e.message.ends_with("invalid api key: *** tail"),
            "{cut}: {}",
            e.message
        );
    }
}

/// Spend: the endpoint asks the budget before every live attempt and
/// charges each one as it ends.
mod spend {
    use std::path::Path;

    use serde_json::json;
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::super::recorded::{RecordedAttempt, Recording};
    use super::*;
    use harness_config::Config;

    /// A config for `endpoint` (its TOML sections) with `[budget]` as given.
    fn config(endpoint: &str, budget: &str) -> Config {
        let text = format!("{endpoint}[budget]\n{budget}\n");
        let env = |key: &str| (key == "RUNPOD_API_KEY").then(|| "rp-key".to_string());
        Config::parse(&text, Path::new("/t/agent.toml"), Path::new("/t"), &env)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn openai(server: &MockServer) -> String {
        format!(
            "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"{}/v1\"\n",
            server.uri()
        )
    }

    fn runpod(server: &MockServer) -> String {
        format!(
            "[endpoint]\nkind = \"runpod\"\n[runpod]\nbase_url = \"{}/v2\"\nendpoint_id = \"ep1\"\n",
            server.uri()
        )
    }

    /// An endpoint for `cfg` metered by a budget of its own, retrying at once.
    fn metered(cfg: &Config) -> (Endpoint, Arc<Budget>) {
        let clock: Arc<dyn Fn() -> DateTime<Utc> + Send + Sync> =
            Arc::new(|| DateTime::from_timestamp(1_795_000_000, 0).unwrap_or_default());
        let budget = Arc::new(Budget::new(cfg, clock));
        let retry = RetryPolicy {
            base: Duration::ZERO,
            cap: Duration::ZERO,
            max_retries: 3,
        };
        let ep = Endpoint::new(&cfg.endpoint, &cfg.tls.trust)
            .unwrap()
            .with_retry_policy(retry)
            .metered(budget.clone());
        (ep, budget)
    }

    fn body() -> Value {
        json!({"messages": [{"role": "user", "content": "Say hello."}]})
    }

    fn answer(usage: bool) -> Value {
        let mut reply = json!({
            "choices": [{"message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]
        });
        if usage {
            reply["usage"] =
                json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120});
        }
        reply
    }

    /// One call, as the loop makes it; every attempt's failure, in order.
    async fn call(ep: &Endpoint) -> (Result<Completion, CallError>, Vec<Option<String>>) {
        let mut seen = Vec::new();
        let result = ep
            .chat(
                body(),
                Instant::now() + Duration::from_secs(30),
                &CancellationToken::new(),
                &Utc::now,
                &mut |e| {
                    if let CallEvent::Ended(a) = e {
                        seen.push(a.error.clone());
                    }
                },
            )
            .await;
        (result, seen)
    }

    /// (tokens, GPU ms) spent today.
    fn spent(budget: &Budget) -> (u64, u64) {
        let today = budget.spend_today();
        (today.tokens, (today.gpu_seconds * 1000.0).round() as u64)
    }

    #[tokio::test]
    async fn a_budget_already_reached_sends_nothing() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(answer(true)))
            .expect(0)
            .mount(&server)
            .await;
        let (ep, budget) = metered(&config(&openai(&server), "tokens_per_day = 100"));
        budget.spend(100, 0);

        let (result, attempts) = call(&ep).await;

        let Err(CallError::OverBudget(why)) = result else {
            panic!("{result:?}")
        };
        assert!(
            why.contains("[budget] tokens_per_day = 100 reached"),
            "{why}"
        );
        assert!(attempts.is_empty());
        assert!(
            server
                .received_requests()
                .await
                .unwrap_or_default()
                .is_empty()
        );
        assert_eq!(spent(&budget), (100, 0));
    }

    #[tokio::test]
    async fn a_failed_attempts_gpu_time_is_charged_before_its_retry_is_asked() {
        let server = MockServer::start().await;
        let failed = json!({"id": "j1", "status": "FAILED", "executionTime": 2500, "error": "CUDA out of memory"});
        Mock::given(method("POST"))
            .and(path_regex("/runsync$"))
            .respond_with(ResponseTemplate::new(200).set_body_json(failed))
            .up_to_n_times(1)
            .mount(&server)
            .await;
        let done = json!({"id": "j2", "status": "COMPLETED", "output": answer(true), "delayTime": 900, "executionTime": 600});
        Mock::given(method("POST"))
            .and(path_regex("/runsync$"))
            .respond_with(ResponseTemplate::new(200).set_body_json(done))
            .mount(&server)
            .await;

        // 2.5 s of a 2-second day: the retry is never sent.
        let (ep, budget) = metered(&config(&runpod(&server), "gpu_seconds_per_day = 2"));
        let (result, attempts) = call(&ep).await;

        assert!(
            matches!(&result, Err(CallError::OverBudget(why)) if why.contains("gpu_seconds_per_day = 2 reached (2.5 GPU-seconds")),
            "{result:?}"
        );
        assert_eq!(attempts.len(), 1);
        assert_eq!(
            server.received_requests().await.unwrap_or_default().len(),
            1
        );
        assert_eq!(spent(&budget), (0, 2500));

        // Within 4 seconds the retry goes out, and its answer is charged
        // its execution time (not the queue's) and its tokens at once.
        let (ep, budget) = metered(&config(&runpod(&server), "gpu_seconds_per_day = 4"));
        let (result, attempts) = call(&ep).await;

        assert!(result.is_ok(), "{result:?}");
        assert_eq!(attempts.len(), 1, "the failed job's mock is used up");
        assert_eq!(spent(&budget), (120, 600));
    }

    #[tokio::test]
    async fn a_recorded_attempt_is_neither_asked_nor_charged() {
        let server = MockServer::start().await;
        let cfg = config(&openai(&server), "tokens_per_day = 100");
        let recorded = RecordedAttempt {
            turn: 1,
            attempt: 1,
            request: serde_json::value::to_raw_value(&body()).unwrap(),
            http_status: Some(200),
            response: Some(RawBody::from_value(&answer(false))),
            error: None,
            failure: None,
            retry_after: None,
            job: None,
        };
        let (ep, budget) = metered(&cfg);
        let ep = ep.replaying(Recording::new(
            vec![recorded],
            Vec::new(),
            None,
            None,
            false,
        ));
        budget.spend(100, 0);

        let (result, attempts) = call(&ep).await;

        let c = result.unwrap_or_else(|e| panic!("{e}"));
        assert!(c.recorded);
        assert_eq!(attempts, [None]);
        // Without `usage`, the loop's estimate is charged only when live.
        ep.charge_estimate(&c, 50);
        assert_eq!(spent(&budget), (100, 0));
        let live = Completion {
            recorded: false,
            ..c
        };
        ep.charge_estimate(&live, 50);
        assert_eq!(spent(&budget), (150, 0));
        assert!(
            server
                .received_requests()
                .await
                .unwrap_or_default()
                .is_empty()
        );
    }
}
