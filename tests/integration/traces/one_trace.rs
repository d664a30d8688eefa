//! A job as one trace from the caller's request through retries, calls and
//! follow-ups; with links only, attempts start traces.

use crate::util::{Api, Project, Running, eventually};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;
use std::collections::HashMap;
use test_support::http_server::{HttpServer, Reply};

use super::*;

/// The spans under `parent`, one line each, indented by depth (what the
/// docs' Tracing page shows).
fn tree(spans: &[Span], parent: &str, depth: usize) -> String {
    let mut children: Vec<&Span> = spans
        .iter()
        .filter(|s| hex(&s.parent_span_id) == parent)
        .collect();
    children.sort_by_key(|s| s.start_time_unix_nano);
    let mut out = String::new();
    for s in children {
        let ms = (s.end_time_unix_nano - s.start_time_unix_nano) as f64 / 1e6;
        let mut said = vec![format!("{:.1} ms", ms)];
        for key in [
            "messaging.destination.name",
            "messaging.message.id",
            "hourglass.attempt",
            "hourglass.outcome",
            "http.response.status_code",
        ] {
            if let Some(v) = attribute(s, key) {
                said.push(format!("{key}={v}"));
            }
        }
        for e in &s.events {
            said.push(format!("event {}", e.name));
        }
        out.push_str(&format!(
            "{}{} {}  [{}]\n",
            "  ".repeat(depth),
            s.name,
            hex(&s.span_id),
            said.join(", ")
        ));
        out.push_str(&tree(spans, &hex(&s.span_id), depth + 1));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_one_trace_from_the_callers_request_through_retries_calls_and_follow_ups() {
    let receiver = HttpServer::start(vec![Reply::status(200, "")]);
    let service = HttpServer::start(vec![Reply::status(200, "ok")]);
    let project = Project::new(
        "concurrency = 4",
        &format!(
            "[[topic]]\nname = \"charge\"\nhandler = \"probe.wasm\"\nmay_enqueue = [\"receipt\"]\n\
             grants = {{ http = [\"{service}\"] }}\n\n\
             [[topic]]\nname = \"receipt\"\nhandler = \"echo.wasm\"\n\n\
             [telemetry]\nendpoint = \"{receiver}\"\nservice_name = \"billing-worker\"\n\n\
             [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"test-token-0123456789abcdef\"\n",
            service = service.url(),
            receiver = receiver.url(),
        ),
    );
    let running = Running::start(project.config()).await;
    let addr = running.http.expect("[http]").to_string();
    let plan = json!({
        "fetch": format!("{}/charge", service.url()),
        "follow_ups": [{ "topic": "receipt", "payload": "r-1", "id": "receipt-1" }],
        "retry_first": 1,
    });
    let body = json!({ "id": "charge-1", "payload": plan }).to_string();
    let answer = test_support::http_client::call_with_headers(
        &addr,
        "POST",
        "/api/topics/charge/jobs",
        Some(crate::util::TOKEN),
        Some(&body),
        &[("traceparent", &format!("00-{TRACE}-{CALLER}-01"))],
    )
    .await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let _ = Api(addr);

    // enqueue, two attempts, two outbound calls, a delivery, the follow-up's attempt
    let all = eventually(WAIT, "the spans arrived", || async {
        let spans = spans(&receiver);
        let attempts = spans
            .iter()
            .filter(|s| s.name.starts_with("process "))
            .count();
        match attempts {
            3.. => Ok(spans),
            _ => Err(format!("{} spans, {attempts} attempts", spans.len())),
        }
    })
    .await;
    let by_id: HashMap<String, &Span> = all.iter().map(|s| (hex(&s.span_id), s)).collect();
    eprintln!("{}", tree(&all, CALLER, 0));
    for s in &all {
        assert_eq!(
            hex(&s.trace_id),
            TRACE,
            "{} is in the caller's trace",
            s.name
        );
    }
    let enqueue = all
        .iter()
        .find(|s| s.name == "enqueue charge")
        .expect("the enqueue span, named `{operation} {destination}`");
    assert_eq!(enqueue.kind, 4, "a producer span (SPAN_KIND_PRODUCER)");
    assert_eq!(
        attribute(enqueue, "messaging.operation.type").as_deref(),
        Some("send")
    );
    assert_eq!(
        attribute(enqueue, "messaging.message.id").as_deref(),
        Some("charge-1")
    );
    assert_eq!(
        attribute(enqueue, "messaging.batch.message_count"),
        None,
        "one job is not a batch"
    );
    assert_eq!(
        hex(&enqueue.parent_span_id),
        CALLER,
        "the enqueue is the caller's child"
    );
    let attempts: Vec<&Span> = all
        .iter()
        .filter(|s| {
            s.name == "process charge"
                && attribute(s, "messaging.message.id").as_deref() == Some("charge-1")
        })
        .collect();
    assert_eq!(attempts.len(), 2, "one retry: {attempts:#?}");
    for a in &attempts {
        assert_eq!(a.kind, 5, "a consumer span (SPAN_KIND_CONSUMER)");
        assert_eq!(
            attribute(a, "messaging.operation.type").as_deref(),
            Some("process")
        );
        assert_eq!(
            attribute(a, "messaging.destination.name").as_deref(),
            Some("charge")
        );
        assert_eq!(
            a.parent_span_id, enqueue.span_id,
            "attempts under the enqueue"
        );
    }
    let outcomes: Vec<String> = attempts
        .iter()
        .map(|a| attribute(a, "hourglass.outcome").unwrap())
        .collect();
    assert!(outcomes.contains(&"retry".to_owned()) && outcomes.contains(&"acked".to_owned()));
    let retried = attempts
        .iter()
        .find(|a| attribute(a, "hourglass.outcome").as_deref() == Some("retry"))
        .unwrap();
    assert!(
        retried.events.iter().any(|e| e.name == "retry"),
        "{retried:#?}"
    );
    assert!(attribute(retried, "hourglass.cpu_us").is_some());

    // the service saw a traceparent naming a client span under an attempt
    let calls = service.received();
    assert_eq!(calls.len(), 2, "one call per attempt");
    for call in &calls {
        let parent = call
            .header("traceparent")
            .expect("the call carried a traceparent");
        let parts: Vec<&str> = parent.split('-').collect();
        assert_eq!(parts[1], TRACE);
        let client = by_id.get(parts[2]).expect("the client span was exported");
        assert_eq!(client.kind, 3, "a client span (SPAN_KIND_CLIENT)");
        assert_eq!(
            client.name, "GET",
            "an HTTP client span is named by its method"
        );
        assert_eq!(
            attribute(client, "server.address").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            attribute(client, "server.port"),
            service.url().rsplit(':').next().map(str::to_owned)
        );
        assert_eq!(
            attribute(client, "url.full"),
            Some(format!("{}/charge", service.url()))
        );
        assert_eq!(
            attribute(client, "http.response.status_code").as_deref(),
            Some("200")
        );
        let attempt = by_id[&hex(&client.parent_span_id)];
        assert_eq!(attempt.name, "process charge");
    }

    // the follow-up: delivered and run in the same trace, under the acked attempt
    let acked = attempts
        .iter()
        .find(|a| attribute(a, "hourglass.outcome").as_deref() == Some("acked"))
        .unwrap();
    let receipt = all
        .iter()
        .find(|s| {
            s.name == "process receipt"
                && attribute(s, "messaging.message.id").as_deref() == Some("receipt-1")
        })
        .expect("the follow-up's attempt");
    assert_eq!(receipt.parent_span_id, acked.span_id);
    let delivery = all
        .iter()
        .find(|s| s.name == "send receipt")
        .expect("the delivery span");
    assert_eq!(delivery.kind, 4, "a producer span");
    assert_eq!(delivery.parent_span_id, acked.span_id);

    // the exporter names the service
    let request = receiver
        .received()
        .into_iter()
        .find(|r| r.path == "/v1/traces")
        .unwrap();
    let decoded = ExportTraceServiceRequest::decode(&request.body[..]).unwrap();
    assert_eq!(
        decoded.resource_spans[0].scope_spans[0].schema_url,
        "https://opentelemetry.io/schemas/1.37.0",
        "the scope names the semantic conventions it follows"
    );
    let resource = decoded.resource_spans[0].resource.clone().unwrap();
    assert!(
        resource.attributes.iter().any(|a| a.key == "service.name"
            && format!("{:?}", a.value).contains("billing-worker")),
        "{resource:?}"
    );
}

/// `parent = "link"`: only an attempt starts a trace of its own (linked to
/// the span that enqueued its job); the producers' spans stay in their
/// callers' traces: the API's enqueue under the caller's span, a
/// follow-up's delivery under the attempt that made it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_links_only_attempts_start_traces_and_producer_spans_keep_their_callers() {
    let receiver = HttpServer::start(vec![Reply::status(200, "")]);
    let project = Project::new(
        "concurrency = 4",
        &format!(
            "[[topic]]\nname = \"charge\"\nhandler = \"probe.wasm\"\nmay_enqueue = [\"receipt\"]\n\n\
             [[topic]]\nname = \"receipt\"\nhandler = \"echo.wasm\"\n\n\
             [telemetry]\nendpoint = \"{receiver}\"\nparent = \"link\"\n\n\
             [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"test-token-0123456789abcdef\"\n",
            receiver = receiver.url(),
        ),
    );
    let running = Running::start(project.config()).await;
    let addr = running.http.expect("[http]").to_string();
    let plan = json!({
        "follow_ups": [{ "topic": "receipt", "payload": "r-1", "id": "receipt-1" }],
    });
    let body = json!({ "id": "charge-1", "payload": plan }).to_string();
    let answer = test_support::http_client::call_with_headers(
        &addr,
        "POST",
        "/api/topics/charge/jobs",
        Some(crate::util::TOKEN),
        Some(&body),
        &[("traceparent", &format!("00-{TRACE}-{CALLER}-01"))],
    )
    .await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let all = eventually(WAIT, "the spans arrived", || async {
        let spans = spans(&receiver);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        match [
            "enqueue charge",
            "process charge",
            "send receipt",
            "process receipt",
        ]
        .iter()
        .all(|n| names.contains(n))
        {
            true => Ok(spans),
            false => Err(format!("spans so far: {names:?}")),
        }
    })
    .await;
    let named = |name: &str| all.iter().find(|s| s.name == name).unwrap();
    let enqueue = named("enqueue charge");
    assert_eq!(
        hex(&enqueue.trace_id),
        TRACE,
        "the enqueue stays in the caller's trace"
    );
    assert_eq!(
        hex(&enqueue.parent_span_id),
        CALLER,
        "under the caller's span"
    );
    let attempt = named("process charge");
    assert_ne!(
        hex(&attempt.trace_id),
        TRACE,
        "the attempt starts a trace of its own"
    );
    assert!(
        attempt.parent_span_id.is_empty(),
        "with no parent: {attempt:#?}"
    );
    assert!(
        attempt
            .links
            .iter()
            .any(|l| l.trace_id == enqueue.trace_id && l.span_id == enqueue.span_id),
        "linked to the enqueue: {:#?}",
        attempt.links
    );
    let delivery = named("send receipt");
    assert_eq!(
        (delivery.trace_id.clone(), delivery.parent_span_id.clone()),
        (attempt.trace_id.clone(), attempt.span_id.clone()),
        "the follow-up's delivery is the attempt's child, in its trace"
    );
    let receipt = named("process receipt");
    assert_ne!(
        receipt.trace_id, attempt.trace_id,
        "the follow-up's attempt: a trace of its own"
    );
    assert!(
        receipt.links.iter().any(|l| l.span_id == attempt.span_id),
        "linked to the attempt that made it: {:#?}",
        receipt.links
    );
}
