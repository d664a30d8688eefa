//! OpenTelemetry: a job followed across services. A real OTLP/HTTP receiver
//! (an HTTP server whose bodies are decoded with `opentelemetry-proto`)
//! gets the runner's spans: an API enqueue carrying a `traceparent`, a
//! handler that retries once, calls out over HTTP and starts a follow-up.
//! The tree is checked: one trace, the enqueue under the caller's span, the
//! attempts under the enqueue, the outbound call's `traceparent` naming its
//! client span under the attempt, the follow-up's attempt in the same trace.
//! And a dead collector: jobs flow, the drop counter rises.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;
use test_support::http_server::{HttpServer, Reply};

use crate::util::{Api, Project, Running, eventually};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_slows_nothing_and_the_drops_are_counted() {
    // a port nobody listens on: every export fails at once
    let port = test_support::free_port();
    let project = Project::new(
        "concurrency = 8",
        &format!(
            "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n\
             [telemetry]\nendpoint = \"http://127.0.0.1:{port}\"\nqueue = 64\n\n\
             [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"test-token-0123456789abcdef\"\n"
        ),
    );
    let mut running = Running::start(project.config()).await;
    let api = Api(running.http.expect("[http]").to_string());
    let queue = project.queue().await;
    let jobs: Vec<serde_json::Value> = (0..2_000).map(|i| json!({ "payload": i })).collect();
    let started = std::time::Instant::now();
    let bulk = api
        .post(
            "/api/topics/echo/jobs",
            &serde_json::Value::Array(jobs).to_string(),
        )
        .await;
    assert_eq!(bulk.json()["new"], 2_000, "{}", bulk.body);
    running.after_drained(&queue, &["echo"], WAIT).await;
    let took = started.elapsed();
    eprintln!("2,000 jobs with a dead collector: {took:?}");
    let dropped = eventually(WAIT, "drops counted", || async {
        let metrics = api.get("/metrics").await.body;
        let dropped: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("hourglass_telemetry_spans_dropped_total "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0);
        if dropped >= 1_000.0 {
            Ok(dropped)
        } else {
            Err(format!("{dropped} dropped"))
        }
    })
    .await;
    assert!(dropped <= 2_001.0, "{dropped}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_exports_the_last_spans_first() {
    let receiver = HttpServer::start(vec![Reply::status(200, "")]);
    let project = Project::new(
        "concurrency = 4",
        &format!(
            "[[topic]]\nname = \"work\"\nhandler = \"probe.wasm\"\n\n[telemetry]\nendpoint = \"{}\"\n",
            receiver.url()
        ),
    );
    let queue = project.queue().await;
    let keys = queue.keys("work");
    let jobs: Vec<hourglass::redis::NewJob> = (0..3_000)
        .map(|_| hourglass::redis::NewJob {
            payload: br#"{"spin_ms":1}"#.to_vec(),
            ..Default::default()
        })
        .collect();
    queue
        .enqueue(&keys, &jobs, hourglass::clock::now_ms())
        .await
        .unwrap();
    let mut runner = crate::util::RunnerProcess::start(&project);
    // stop it while jobs still flow: the spans of the last attempts are
    // still queued (an export waits up to 200 ms to fill a batch)
    eventually(WAIT, "some jobs done", || async {
        let left = queue
            .stats(&keys, hourglass::clock::now_ms())
            .await
            .unwrap()
            .ready;
        if left < 2_500 {
            Ok(())
        } else {
            Err(format!("{left} ready"))
        }
    })
    .await;
    runner.assert_alive();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(runner.exit(WAIT).await.success());
    let stats = queue
        .stats(&keys, hourglass::clock::now_ms())
        .await
        .unwrap();
    let acked = 3_000 - (stats.ready + stats.scheduled + stats.running + stats.dead);
    let exported = spans(&receiver)
        .iter()
        .filter(|s| s.name == "process work")
        .filter(|s| attribute(s, "hourglass.outcome").as_deref() == Some("acked"))
        .count() as u64;
    assert!(acked > 0 && acked < 3_000, "stopped mid-way: {acked} acked");
    assert_eq!(exported, acked, "one exported span per acked job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_carries_a_traceparent_from_its_flag_or_the_environment() {
    let project = Project::new("", "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n");
    let traceparent = format!("00-{TRACE}-{CALLER}-01");
    let run = |args: &[&str], env: Option<&str>| {
        let mut cmd = std::process::Command::new(crate::util::hourglass_bin());
        cmd.args(args).arg("--config").arg(project.config_path());
        cmd.env_remove("TRACEPARENT");
        if let Some(value) = env {
            cmd.env("TRACEPARENT", value);
        }
        cmd.output().unwrap()
    };
    let flag = run(
        &[
            "enqueue",
            "echo",
            "x",
            "--id",
            "by-flag",
            "--delay",
            "1h",
            "--traceparent",
            &traceparent,
            "--tracestate",
            "congo=t61rcWkgMzE",
        ],
        None,
    );
    assert!(flag.status.success(), "{flag:?}");
    let env = run(
        &["enqueue", "echo", "x", "--id", "by-env", "--delay", "1h"],
        Some(&traceparent),
    );
    assert!(env.status.success(), "{env:?}");
    for id in ["by-flag", "by-env"] {
        let out = run(&["inspect", "echo", id, "--json"], None);
        let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(view["traceparent"], traceparent, "{id}: {view}");
    }
    let text = run(&["inspect", "echo", "by-flag"], None);
    assert!(String::from_utf8_lossy(&text.stdout).contains(&traceparent));
    let bad = run(
        &["enqueue", "echo", "x", "--traceparent", "00-nonsense-01"],
        None,
    );
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--traceparent"),
        "{bad:?}"
    );
}

/// A durable handler's steps: a span each under its attempt's, recorded in
/// the first attempt, replayed in the second (the email failed once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_durable_step_is_a_span_under_its_attempt() {
    let receiver = HttpServer::start(vec![Reply::status(200, "")]);
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let project = Project::new(
        "concurrency = 2",
        &format!(
            "[[topic]]\nname = \"checkout\"\nhandler = \"checkout.wasm\"\n\
             backoff = {{ base = \"50ms\", max = \"50ms\", jitter = 0.0 }}\n\
             grants = {{ http = [\"{shop}\"] }}\n\n\
             [telemetry]\nendpoint = \"{receiver}\"\n",
            shop = shop.url(),
            receiver = receiver.url(),
        ),
    );
    let running = Running::start(project.config()).await;
    let queue = project.queue().await;
    let payload = format!(
        r#"{{"order": 7, "shop": "{}", "email_fails": 1}}"#,
        shop.url()
    );
    crate::util::enqueue(&queue, "checkout", &payload, 0, 0).await;
    let all = eventually(WAIT, "the step spans arrived", || async {
        let spans = spans(&receiver);
        let steps = spans.iter().filter(|s| s.name.starts_with("step ")).count();
        let attempts = spans
            .iter()
            .filter(|s| s.name == "process checkout")
            .count();
        match (steps, attempts) {
            (6.., 2..) => Ok(spans),
            seen => Err(format!("{seen:?} of {} spans", spans.len())),
        }
    })
    .await;
    let attempt_of = |s: &Span| {
        let parent = all
            .iter()
            .find(|p| p.span_id == s.parent_span_id)
            .unwrap_or_else(|| panic!("{} has no parent among {} spans", s.name, all.len()));
        assert_eq!(parent.name, "process checkout");
        attribute(parent, "hourglass.attempt").unwrap()
    };
    let mut steps: Vec<(String, String, String)> = all
        .iter()
        .filter(|s| s.name.starts_with("step "))
        .map(|s| {
            (
                attempt_of(s),
                s.name.clone(),
                attribute(s, "hourglass.step.outcome").unwrap(),
            )
        })
        .collect();
    steps.sort();
    let want = [
        ("1", "step charge", "recorded"),
        ("1", "step email", "failed"),
        ("1", "step reserve", "recorded"),
        ("2", "step charge", "replayed"),
        ("2", "step email", "recorded"),
        ("2", "step reserve", "replayed"),
    ];
    let steps: Vec<(&str, &str, &str)> = steps
        .iter()
        .map(|(a, n, o)| (a.as_str(), n.as_str(), o.as_str()))
        .collect();
    assert_eq!(steps, want);
    running.stop().await;
}

/// On a topic with `journal = "effects"`, a call answered from the journal
/// on the retry has a client span marked `hourglass.replayed`; the first
/// attempt's (sent) has none, and the server saw the call once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_call_is_a_span_marked_replayed() {
    let receiver = HttpServer::start(vec![Reply::status(200, "")]);
    let shop = HttpServer::start(vec![Reply::status(200, "ok")]);
    let project = Project::new(
        "concurrency = 2",
        &format!(
            "[[topic]]\nname = \"pay\"\nhandler = \"probe.wasm\"\njournal = \"effects\"\n\
             grants = {{ http = [\"{shop}\"] }}\n\n\
             [telemetry]\nendpoint = \"{receiver}\"\n",
            shop = shop.url(),
            receiver = receiver.url(),
        ),
    );
    let running = Running::start(project.config()).await;
    let queue = project.queue().await;
    let payload = format!(
        r#"{{"calls": [{{"url": "{}/charge"}}], "retry_first": 1}}"#,
        shop.url()
    );
    crate::util::enqueue(&queue, "pay", &payload, 0, 0).await;
    let clients = eventually(WAIT, "both attempts' client spans arrived", || async {
        let clients: Vec<Span> = spans(&receiver)
            .into_iter()
            .filter(|s| s.kind == 3)
            .collect();
        match clients.len() {
            2.. => Ok(clients),
            n => Err(format!("{n} client spans")),
        }
    })
    .await;
    let mut replayed: Vec<Option<String>> = clients
        .iter()
        .map(|s| attribute(s, "hourglass.replayed"))
        .collect();
    replayed.sort();
    assert_eq!(replayed, [None, Some("Some(BoolValue(true))".to_owned())]);
    assert_eq!(shop.received().len(), 1, "sent once");
    running.stop().await;
}
