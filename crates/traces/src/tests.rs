//! The traces room's own tests: spans built from events, their wire form.

use chrono::{DateTime, Duration, TimeZone, Utc};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1 as proto;
use proptest::prelude::*;
use prost::Message;

use super::data::{Span, SpanKind, Value};
use super::*;
use super::{export, otlp};
use harness_agent::{Answer, ModelAttempt, Outcome, ReplyFacts, StopReason, TaskEvent};
use harness_config::Secret;
use harness_endpoint::Attempt;
use harness_records::{Status, Summary};
use harness_wire::chat::{FunctionCall, ToolCall, Usage};

fn at(ms: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 26, 12, 0, 0).unwrap() + Duration::milliseconds(ms)
}

fn model() -> Model {
    Model {
        provider: "llama.cpp",
        name: Some("gemma-4".into()),
        server: Some(("127.0.0.1".into(), 8181)),
    }
}

fn trace(content: bool) -> TaskTrace {
    let redactor = Redactor::new(vec![Secret::new("hunter2-secret")]);
    TaskTrace::new(
        "hello",
        "20261126T120000Z-ab12",
        at(0),
        model(),
        content,
        redactor,
    )
}

fn answer(name: &str, is_error: bool, text: &str, duration_ms: u64) -> Answer {
    Answer {
        turn: 1,
        call_id: "call-1".into(),
        name: name.into(),
        arguments: r#"{"url":"https://example.com/?k=hunter2-secret"}"#.into(),
        text: text.into(),
        undefanged: text.into(),
        is_error,
        duration_ms,
        original_chars: text.len(),
        returned_chars: text.len(),
        executed: true,
        recovered: false,
        repeat: 1,
        detail: None,
        over_limit: false,
        setup_fault: None,
        recorded: false,
        read_on: None,
    }
}

fn attempt<'a>(
    request: &'a serde_json::Value,
    error: Option<&str>,
    status: Option<u16>,
) -> Attempt<'a> {
    Attempt {
        attempt: 1,
        started_at: at(0),
        finished_at: at(0),
        latency_ms: 0,
        request,
        http_status: status,
        response: None,
        error: error.map(str::to_string),
        failure: None,
        retry_after: None,
        runpod: None,
        finish_reason: None,
        recorded: false,
    }
}

fn sent(turn: u32) -> TaskEvent<'static> {
    TaskEvent::RequestSent {
        turn,
        messages: 2,
        prompt_tokens: 10,
        counted: harness_agent::Counted::Exact,
    }
}

fn reply<'a>(
    turn: u32,
    usage: Usage,
    finish: &'a str,
    content: &'a str,
    calls: &'a [ToolCall],
) -> TaskEvent<'a> {
    TaskEvent::ReplyRead(ReplyFacts {
        turn,
        usage,
        total_tokens: 0,
        finish_reason: Some(finish),
        model: Some("gemma-4-it"),
        content,
        thinking: Some("private thoughts"),
        recovered: false,
        calls,
        unread_calls: 0,
        held_back: 0,
    })
}

fn usage(prompt: u64, completion: u64) -> Usage {
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
    }
}

/// The summary a task's trace is closed with.
fn ending(succeeded: bool, error: Option<&str>) -> Summary {
    Summary {
        status: if succeeded {
            Status::Succeeded
        } else {
            Status::Failed
        },
        stop_reason: if succeeded {
            StopReason::FinalAnswer
        } else {
            StopReason::MaxTurns
        },
        turns: 2,
        prompt_tokens: 300,
        completion_tokens: 45,
        total_tokens: 345,
        final_answer: Some("It is 42 (hunter2-secret).".into()),
        error: error.map(str::to_string),
        ..Summary::blank("hello", "20261126T120000Z", at(0))
    }
}

/// Two model requests and one tool call that failed, as the loop emits them.
fn two_turns(t: &mut TaskTrace) {
    let request = serde_json::json!({});
    let calls = vec![ToolCall {
        id: "call-1".into(),
        kind: "function".into(),
        function: FunctionCall {
            name: "webfetch".into(),
            arguments: r#"{"url":"https://example.com"}"#.into(),
        },
    }];
    t.on(at(10), &sent(1));
    t.on(
        at(20),
        &TaskEvent::Attempt(ModelAttempt {
            turn: 1,
            attempt: &attempt(&request, Some("HTTP 503"), Some(503)),
            context: None,
        }),
    );
    t.on(
        at(40),
        &TaskEvent::Attempt(ModelAttempt {
            turn: 1,
            attempt: &attempt(&request, None, Some(200)),
            context: None,
        }),
    );
    t.on(at(50), &reply(1, usage(100, 20), "tool_calls", "", &calls));
    t.on(
        at(80),
        &TaskEvent::ToolAnswered(&answer(
            "webfetch",
            true,
            "error: 404 from hunter2-secret host",
            20,
        )),
    );
    t.on(at(90), &sent(2));
    t.on(
        at(95),
        &TaskEvent::Attempt(ModelAttempt {
            turn: 2,
            attempt: &attempt(&request, None, Some(200)),
            context: None,
        }),
    );
    t.on(at(120), &reply(2, usage(200, 25), "stop", "It is 42.", &[]));
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

#[test]
fn a_task_becomes_one_root_with_a_chat_span_per_request_and_a_tool_span_per_call() {
    let mut t = trace(false);
    two_turns(&mut t);
    let trace = t.end(at(130), &ending(true, None));
    let names: Vec<&str> = trace.spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "invoke_agent hello",
            "chat gemma-4",
            "execute_tool webfetch",
            "chat gemma-4"
        ]
    );
    let (root, children) = trace.spans.split_first().unwrap();
    assert_eq!(root.parent, None);
    assert_eq!((root.kind, root.ok), (SpanKind::Internal, Some(true)));
    assert!(children.iter().all(|s| s.parent == Some(root.span_id)));
    assert!(
        children
            .iter()
            .all(|s| s.start >= root.start && s.end <= root.end && s.start <= s.end)
    );
    assert_eq!(
        attr(root, "gen_ai.agent.name"),
        Some(&Value::Str("hello".into()))
    );
    assert_eq!(
        attr(root, "gen_ai.usage.input_tokens"),
        Some(&Value::Int(300))
    );
    assert_eq!(
        attr(root, "agent_harness.run_id"),
        Some(&Value::Str("20261126T120000Z-ab12".into()))
    );
    let chat = &children[0];
    assert_eq!(chat.kind, SpanKind::Client);
    assert_eq!((chat.start, chat.end), (at(10), at(50)));
    assert_eq!(
        chat.ok, None,
        "a request that was answered leaves the status unset"
    );
    assert_eq!(
        attr(chat, "gen_ai.usage.output_tokens"),
        Some(&Value::Int(20))
    );
    assert_eq!(attr(chat, "agent_harness.attempts"), Some(&Value::Int(2)));
    assert_eq!(
        attr(chat, "gen_ai.response.finish_reasons"),
        Some(&Value::Strs(vec!["tool_calls".into()]))
    );
    assert_eq!(attr(chat, "server.port"), Some(&Value::Int(8181)));
}

#[test]
fn a_tool_span_spans_its_call_and_a_tool_error_is_an_error_status() {
    let mut t = trace(false);
    two_turns(&mut t);
    let trace = t.end(at(130), &ending(true, None));
    let children = &trace.spans[1..];
    let tool = &children[1];
    assert_eq!(
        (tool.start, tool.end),
        (at(60), at(80)),
        "a tool span starts its duration before its answer"
    );
    assert_eq!(tool.ok, Some(false));
    assert_eq!(
        tool.message, "the tool answered an error",
        "a tool's result is content: not in the status without content = true"
    );
    assert_eq!(
        attr(tool, "gen_ai.tool.call.id"),
        Some(&Value::Str("call-1".into()))
    );
    assert_eq!(
        attr(tool, "error.type"),
        Some(&Value::Str("tool_error".into()))
    );
    let tokens: i64 = children
        .iter()
        .filter_map(|s| match attr(s, "gen_ai.usage.input_tokens") {
            Some(Value::Int(n)) => Some(*n),
            _ => None,
        })
        .sum();
    assert_eq!(
        tokens, 300,
        "the chat spans add up to the summary's prompt tokens"
    );
}

#[test]
fn contents_are_exported_only_when_asked_and_then_redacted_and_capped() {
    let mut off = trace(false);
    off.task_text("Find the answer.");
    two_turns(&mut off);
    let off = off.end(at(130), &ending(true, None));
    let content_keys = [
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    ];
    for span in &off.spans {
        for key in content_keys {
            assert!(
                attr(span, key).is_none(),
                "{key} exported without content = true"
            );
        }
    }
    let mut on = trace(true);
    on.task_text(&format!("Find the answer. {}", "x".repeat(CONTENT_CAP * 2)));
    two_turns(&mut on);
    let on = on.end(at(130), &ending(true, None));
    let Some(Value::Str(input)) = attr(&on.spans[0], "gen_ai.input.messages") else {
        panic!("the task's text is on the root span");
    };
    assert!(
        input.len() < CONTENT_CAP + 200,
        "capped: {} bytes",
        input.len()
    );
    let Some(Value::Str(output)) = attr(&on.spans[0], "gen_ai.output.messages") else {
        panic!("the final answer is on the root span");
    };
    assert!(output.contains("It is 42 (***)."), "{output}");
    assert_eq!(
        on.spans[2].message, "error: 404 from *** host",
        "with contents, a tool error's status says it, redacted"
    );
    let Some(Value::Str(args)) = attr(&on.spans[2], "gen_ai.tool.call.arguments") else {
        panic!("a tool span carries its arguments");
    };
    assert!(args.contains("k=***"), "{args}");
    let Some(Value::Str(calls)) = attr(&on.spans[1], "gen_ai.output.messages") else {
        panic!("a chat span carries the reply");
    };
    let parsed: serde_json::Value = serde_json::from_str(calls).unwrap();
    assert_eq!(parsed[0]["parts"][0]["type"], "tool_call");
    assert_eq!(parsed[0]["parts"][0]["name"], "webfetch");
    for span in &on.spans {
        for (_, value) in &span.attributes {
            let text = format!("{value:?}");
            assert!(
                !text.contains("hunter2-secret"),
                "a secret in {}: {text}",
                span.name
            );
            assert!(
                !text.contains("private thoughts"),
                "thinking exported in {}",
                span.name
            );
        }
    }
}

#[test]
fn a_request_without_a_reply_is_an_error_span_with_the_reason() {
    let request = serde_json::json!({});
    let mut t = trace(false);
    t.on(at(10), &sent(1));
    t.on(
        at(20),
        &TaskEvent::Attempt(ModelAttempt {
            turn: 1,
            attempt: &attempt(&request, Some("connection refused"), None),
            context: None,
        }),
    );
    let outcome = Outcome::failed(
        StopReason::EndpointError,
        "the endpoint did not answer".into(),
    );
    t.on(at(30), &TaskEvent::Stopped(&outcome));
    let trace = t.end(
        at(40),
        &ending(false, Some("endpoint: hunter2-secret refused")),
    );
    let (root, chat) = (&trace.spans[0], &trace.spans[1]);
    assert_eq!(
        (root.ok, root.message.as_str()),
        (Some(false), "endpoint: *** refused")
    );
    assert_eq!(
        attr(root, "error.type"),
        Some(&Value::Str("max_turns".into()))
    );
    assert_eq!(
        (chat.ok, chat.message.as_str()),
        (Some(false), "connection refused")
    );
    assert_eq!(
        attr(chat, "error.type"),
        Some(&Value::Str("transport".into()))
    );
    assert_eq!(chat.end, at(30));
}

#[test]
fn names_the_model_chose_are_redacted_like_their_attributes() {
    let mut t = trace(false);
    t.on(
        at(1),
        &TaskEvent::ToolAnswered(&answer("hunter2-secret", true, "no such tool", 0)),
    );
    let trace = t.end(at(2), &ending(true, None));
    assert_eq!(trace.spans[1].name, "execute_tool ***");
    assert_eq!(
        attr(&trace.spans[1], "gen_ai.tool.name"),
        Some(&Value::Str("***".into()))
    );
    assert_eq!(trace.spans[1].message, "the tool answered an error");
}

#[test]
fn a_traces_contents_stop_at_its_budget_and_the_root_says_how_many_were_left_out() {
    let mut t = trace(true);
    let big = "r".repeat(CONTENT_CAP);
    let calls = CONTENT_TOTAL / CONTENT_CAP + 5;
    for n in 0..calls {
        t.on(
            at(n as i64),
            &TaskEvent::ToolAnswered(&answer("webfetch", false, &big, 0)),
        );
    }
    let trace = t.end(at(1_000_000), &ending(true, None));
    let carried: usize = trace
        .spans
        .iter()
        .flat_map(|s| &s.attributes)
        .map(|(_, v)| match v {
            Value::Str(s) => s.chars().count(),
            _ => 0,
        })
        .sum();
    assert!(
        carried < CONTENT_TOTAL + 100_000,
        "{carried} characters in one trace"
    );
    let Some(Value::Int(dropped)) = attr(&trace.spans[0], "agent_harness.content_dropped") else {
        panic!("the root says contents were left out");
    };
    assert!(*dropped >= 5, "{dropped}");
    assert_eq!(
        trace.spans.len(),
        calls + 1,
        "every call still has its span"
    );
}

#[test]
fn a_dry_run_a_replay_and_an_eval_variant_say_so_on_the_root() {
    let mut t = trace(false).labelled(&[("agent_harness.eval_variant", "v2".into())]);
    t.on(at(1), &sent(1));
    let ending = Summary {
        dry_run: true,
        replay_of: Some("hello/20261126T120000Z".into()),
        ..ending(true, None)
    };
    let trace = t.end(at(2), &ending);
    let root = &trace.spans[0];
    assert_eq!(
        attr(root, "agent_harness.dry_run"),
        Some(&Value::Bool(true))
    );
    assert_eq!(
        attr(root, "agent_harness.replay_of"),
        Some(&Value::Str("hello/20261126T120000Z".into()))
    );
    assert_eq!(
        attr(root, "agent_harness.eval_variant"),
        Some(&Value::Str("v2".into()))
    );
}

#[tokio::test]
async fn a_collector_that_keeps_up_loses_nothing_however_much_a_run_sends() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let collector = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&collector)
        .await;
    let text = format!(
        "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://127.0.0.1:9/v1\"\n[traces]\nendpoint = \"{}/v1/traces\"\n",
        collector.uri()
    );
    let cfg = harness_config::Config::parse(&text, "agent.toml".as_ref(), "/".as_ref(), &|_| None)
        .unwrap();
    let traces = Traces::start(&cfg).unwrap();
    // One task at a time, each trace about 1 MiB: 24 MiB in all, more than
    // the queue ever holds at once.
    let big = "x".repeat(CONTENT_CAP);
    let a = answer("webfetch", false, "", 0);
    for _ in 0..24 {
        let mut t = traces.task("hello", "run", at(0));
        for _ in 0..64 {
            t.on(at(1), &TaskEvent::ToolAnswered(&a));
        }
        let mut trace = t.end(at(2), &ending(true, None));
        for span in &mut trace.spans[1..] {
            span.attributes.push(("filler", Value::Str(big.clone())));
        }
        assert!(traces.send(&trace), "queued");
        let (done, sent) = tokio::sync::oneshot::channel();
        traces.0.tx.send(export::Msg::Flush(done)).ok().unwrap();
        sent.await.unwrap();
    }
    assert_eq!(traces.finish(None).await, 0, "nothing lost");
    assert_eq!(collector.received_requests().await.unwrap().len(), 24);
}

#[test]
fn a_task_with_endless_calls_keeps_a_bounded_trace() {
    let mut t = trace(false);
    for n in 0..MAX_SPANS + 10 {
        t.on(
            at(n as i64),
            &TaskEvent::ToolAnswered(&answer("webfetch", false, "ok", 0)),
        );
    }
    let trace = t.end(at(1_000_000), &ending(true, None));
    assert_eq!(trace.spans.len(), MAX_SPANS + 1);
    assert_eq!(
        attr(&trace.spans[0], "agent_harness.spans_dropped"),
        Some(&Value::Int(10))
    );
}

#[test]
fn the_wire_form_is_otlp_protobuf_with_ids_kinds_and_statuses() {
    let mut t = trace(false);
    let id = t.trace_id();
    two_turns(&mut t);
    let one = t.end(at(130), &ending(true, None));
    let mut other = trace(false);
    other.on(at(1), &sent(1));
    let other = other.end(at(2), &ending(false, Some("no")));
    // Two encoded traces joined are one request, as the exporter sends them.
    let mut body = otlp::encode(std::slice::from_ref(&one));
    body.extend(otlp::encode(std::slice::from_ref(&other)));
    let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
    assert_eq!(request.resource_spans.len(), 2);
    let service = &request.resource_spans[0]
        .resource
        .as_ref()
        .unwrap()
        .attributes[0];
    assert_eq!(service.key, "service.name");
    let spans: &[proto::Span] = &request.resource_spans[0].scope_spans[0].spans;
    assert_eq!(spans.len(), 4);
    let hex: String = spans[0]
        .trace_id
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(hex, id);
    assert!(spans[0].parent_span_id.is_empty());
    assert!(
        spans[1..]
            .iter()
            .all(|s| s.parent_span_id == spans[0].span_id && s.trace_id == spans[0].trace_id)
    );
    assert_eq!(spans[0].kind, proto::span::SpanKind::Internal as i32);
    assert_eq!(spans[1].kind, proto::span::SpanKind::Client as i32);
    assert_eq!(
        spans[0].status.as_ref().unwrap().code,
        proto::status::StatusCode::Ok as i32
    );
    assert_eq!(
        spans[2].status.as_ref().unwrap().code,
        proto::status::StatusCode::Error as i32
    );
    assert!(spans[1].status.is_none());
    assert_eq!(
        spans[1].end_time_unix_nano - spans[1].start_time_unix_nano,
        40_000_000
    );
    let finish = spans[1]
        .attributes
        .iter()
        .find(|kv| kv.key == "gen_ai.response.finish_reasons")
        .unwrap();
    assert!(matches!(
        finish.value.as_ref().unwrap().value,
        Some(any_value::Value::ArrayValue(_))
    ));
    let other_root = &request.resource_spans[1].scope_spans[0].spans[0];
    assert_ne!(
        other_root.trace_id, spans[0].trace_id,
        "each task is its own trace"
    );
}

#[test]
fn a_collectors_partial_success_is_read_and_anything_else_is_success() {
    let answer = ExportTraceServiceResponse {
        partial_success: Some(ExportTracePartialSuccess {
            rejected_spans: 3,
            error_message: "too old".into(),
        }),
    };
    assert_eq!(
        otlp::rejected(&answer.encode_to_vec()),
        Some((3, "too old".into()))
    );
    assert_eq!(
        otlp::rejected(&ExportTraceServiceResponse::default().encode_to_vec()),
        None
    );
    assert_eq!(otlp::rejected(b""), None);
    assert_eq!(otlp::rejected(b"<html>not protobuf</html>"), None);
    // A negative count refused nothing: a warning at most, never every
    // trace of the request counted lost.
    let negative = |message: &str| ExportTraceServiceResponse {
        partial_success: Some(ExportTracePartialSuccess {
            rejected_spans: -5,
            error_message: message.into(),
        }),
    };
    assert_eq!(
        otlp::rejected(&negative("odd").encode_to_vec()),
        Some((0, "odd".into()))
    );
    assert_eq!(otlp::rejected(&negative("").encode_to_vec()), None);
}

proptest! {
    #[test]
    fn any_answer_body_is_read_without_a_panic(body in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = otlp::rejected(&body);
    }
}

/// `text` with its JSON escapes decoded (leniently, as a reader might).
fn unescaped(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16).unwrap_or(0xFFFD);
                out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
            }
            Some('n') => out.push('\n'),
            Some(c) => out.push(c),
            None => out.push('\\'),
        }
    }
    out
}

#[test]
fn a_secret_the_model_wrote_json_escaped_is_redacted_in_contents() {
    let escaped = r#"{"url":"https://example.com/\u0068unter2-secret"}"#;
    let request = serde_json::json!({});
    let calls = vec![ToolCall {
        id: "call-1".into(),
        kind: "function".into(),
        function: FunctionCall {
            name: "webfetch".into(),
            arguments: escaped.into(),
        },
    }];
    let mut t = trace(true);
    t.on(at(10), &sent(1));
    t.on(
        at(20),
        &TaskEvent::Attempt(ModelAttempt {
            turn: 1,
            attempt: &attempt(&request, None, Some(200)),
            context: None,
        }),
    );
    t.on(at(30), &reply(1, usage(100, 20), "tool_calls", "", &calls));
    let mut answered = answer("webfetch", false, "fetched", 5);
    answered.arguments = escaped.into();
    t.on(at(40), &TaskEvent::ToolAnswered(&answered));
    let trace = t.end(at(50), &ending(true, None));
    let Some(Value::Str(args)) = attr(&trace.spans[2], "gen_ai.tool.call.arguments") else {
        panic!("a tool span carries its arguments");
    };
    assert_eq!(args, r#"{"url":"https://example.com/***"}"#);
    for span in &trace.spans {
        for (key, value) in &span.attributes {
            let Value::Str(text) = value else { continue };
            let mut text = text.clone();
            for _ in 0..3 {
                assert!(!text.contains("hunter2-secret"), "{key}: {text}");
                text = unescaped(&text);
            }
        }
    }
}
