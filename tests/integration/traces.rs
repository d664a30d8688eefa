//! OpenTelemetry: a job followed across services. A real OTLP/HTTP receiver
//! (an HTTP server whose bodies are decoded with `opentelemetry-proto`)
//! gets the runner's spans: an API enqueue carrying a `traceparent`, a
//! handler that retries once, calls out over HTTP and starts a follow-up.
//! The tree is checked: one trace, the enqueue under the caller's span, the
//! attempts under the enqueue, the outbound call's `traceparent` naming its
//! client span under the attempt, the follow-up's attempt in the same trace.
//! And a dead collector: jobs flow, the drop counter rises.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use test_support::http_server::HttpServer;

const WAIT: Duration = Duration::from_secs(60);

/// The caller's span: trace 4bf92f35..., span 00f067aa0ba902b7.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every span the receiver got so far.
fn spans(receiver: &HttpServer) -> Vec<Span> {
    receiver
        .received()
        .iter()
        .filter(|r| r.path == "/v1/traces")
        .flat_map(|r| {
            ExportTraceServiceRequest::decode(&r.body[..])
                .expect("an OTLP protobuf body")
                .resource_spans
        })
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|a| a.key == key).map(|a| {
        use opentelemetry_proto::tonic::common::v1::any_value::Value;
        match a.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(Value::StringValue(s)) => s.clone(),
            Some(Value::IntValue(i)) => i.to_string(),
            other => format!("{other:?}"),
        }
    })
}

mod one_trace;
mod spans;
