//! Unit tests of `endpoint`.

use super::errors::{AttemptError, Next, ServerError};
use super::*;
use crate::base::http::RawBody;
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
        "../../tests/fixtures/llama-server/context_exceeded.json"
    ))
    .unwrap();
    let e = ServerError::read(
        Some(&RawBody::from_value(&fixture["response"])),
        "",
        StatusCode::BAD_REQUEST,
    );
    assert_eq!(e.kind.as_deref(), Some("exceed_context_size_error"));
    assert_eq!((e.n_prompt_tokens, e.n_ctx), (Some(3253), Some(2048)));
    let e = ServerError::read(None, "<html>bad gateway</html>", StatusCode::BAD_GATEWAY);
    assert_eq!(e.message, "<html>bad gateway</html>");
}
