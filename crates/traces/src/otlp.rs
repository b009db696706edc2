//! The OTLP/HTTP wire form (binary protobuf) of a batch of traces, on the
//! OpenTelemetry project's own message types, and a collector's answer
//! read back.

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{self as proto, ResourceSpans, ScopeSpans, status};
use prost::Message;

use super::data::{Span, SpanKind, Trace, Value};

/// The content type every OTLP/HTTP collector takes for protobuf.
pub(crate) const CONTENT_TYPE: &str = "application/x-protobuf";

const NAME: &str = "agent-harness";
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The request body for `traces`: one resource (this program), one scope.
pub(crate) fn encode(traces: &[Trace]) -> Vec<u8> {
    let spans = traces
        .iter()
        .flat_map(|t| t.spans.iter().map(|s| span(&t.trace_id, s)))
        .collect();
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", &Value::Str(NAME.into())),
                    kv("service.version", &Value::Str(VERSION.into())),
                ],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: NAME.into(),
                    version: VERSION.into(),
                    ..InstrumentationScope::default()
                }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    };
    request.encode_to_vec()
}

/// Spans the collector said it refused, and why, from a 2xx answer's
/// body; an empty or unreadable body is a full success, as OTLP says.
pub(crate) fn rejected(body: &[u8]) -> Option<(u64, String)> {
    let answer = ExportTraceServiceResponse::decode(body).ok()?;
    let partial = answer.partial_success?;
    // A negative count (the field is signed) refused nothing.
    let rejected = u64::try_from(partial.rejected_spans).unwrap_or(0);
    (rejected > 0 || !partial.error_message.is_empty()).then_some((rejected, partial.error_message))
}

fn span(trace_id: &[u8; 16], s: &Span) -> proto::Span {
    proto::Span {
        trace_id: trace_id.to_vec(),
        span_id: s.span_id.to_vec(),
        parent_span_id: s.parent.map(|p| p.to_vec()).unwrap_or_default(),
        // Sampled (W3C trace flags).
        flags: 1,
        name: s.name.clone(),
        kind: match s.kind {
            SpanKind::Internal => proto::span::SpanKind::Internal,
            SpanKind::Client => proto::span::SpanKind::Client,
        } as i32,
        start_time_unix_nano: nanos(s.start),
        end_time_unix_nano: nanos(s.end),
        attributes: s.attributes.iter().map(|(k, v)| kv(k, v)).collect(),
        status: s.ok.map(|ok| proto::Status {
            message: if ok { String::new() } else { s.message.clone() },
            code: if ok {
                status::StatusCode::Ok
            } else {
                status::StatusCode::Error
            } as i32,
        }),
        ..proto::Span::default()
    }
}

fn kv(key: &str, value: &Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(any(value)),
        ..KeyValue::default()
    }
}

fn any(value: &Value) -> AnyValue {
    let value = match value {
        Value::Str(s) => any_value::Value::StringValue(s.clone()),
        Value::Int(n) => any_value::Value::IntValue(*n),
        Value::Bool(b) => any_value::Value::BoolValue(*b),
        Value::Strs(list) => any_value::Value::ArrayValue(ArrayValue {
            values: list
                .iter()
                .map(|s| AnyValue {
                    value: Some(any_value::Value::StringValue(s.clone())),
                })
                .collect(),
        }),
    };
    AnyValue { value: Some(value) }
}

/// Nanoseconds since the epoch; a time before it is the epoch.
fn nanos(t: chrono::DateTime<chrono::Utc>) -> u64 {
    t.timestamp_nanos_opt()
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(0)
}
