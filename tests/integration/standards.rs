//! Standards to the letter, checked with what third parties use: W3C Trace
//! Context on outbound requests (tracestate passed on, trace flags kept, the
//! producer's context passed through with export off), the OTLP endpoint
//! variables as the OpenTelemetry specification reads them, the CLI's
//! enqueue span, `/metrics` negotiated on `Accept` and the classic text
//! passing `promtool check metrics`, and what scripts read: a job's
//! effective values in `inspect --json` and the API, the kept end in the
//! API's job view.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::json;
use test_support::components::PROBE;
use test_support::http_server::{HttpServer, Reply};

use crate::util::{Api, Project, Running, TOKEN, add_handler, eventually, hash_of, hourglass};

const WAIT: Duration = Duration::from_secs(60);
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";
const STATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

/// Enqueue a job of `topic` carrying the caller's context with `flags`.
async fn traced_job(project: &Project, topic: &str, payload: &str, flags: &str) {
    let queue = project.queue().await;
    let trace =
        hourglass::redis::TraceContext::parse(&format!("00-{TRACE}-{CALLER}-{flags}"), Some(STATE))
            .unwrap();
    let job = hourglass::redis::NewJob {
        payload: payload.as_bytes().to_vec(),
        trace: Some(trace),
        ..Default::default()
    };
    queue
        .enqueue(&queue.keys(topic), &[job], hourglass::clock::now_ms())
        .await
        .unwrap();
}

/// The one request `service` got, once it came.
async fn the_call(service: &HttpServer) -> test_support::http_server::Received {
    eventually(WAIT, "the handler's call", || async {
        match service.received().as_slice() {
            [one] => Ok(one.clone()),
            other => Err(format!("{} calls", other.len())),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_requests_carry_the_tracestate_and_flags_and_pass_the_context_through_with_export_off()
 {
    for export in [true, false] {
        let service = HttpServer::start(vec![Reply::status(200, "ok")]);
        let receiver = HttpServer::start(vec![Reply::status(200, "")]);
        let telemetry = if export {
            format!("\n[telemetry]\nendpoint = \"{}\"\n", receiver.url())
        } else {
            String::new()
        };
        let project = Project::new(
            "",
            &format!(
                "[[topic]]\nname = \"call\"\nhandler = \"probe.wasm\"\n\
                 grants = {{ http = [\"{}\"] }}\n{telemetry}",
                service.url()
            ),
        );
        let running = Running::start(project.config()).await;
        let plan = json!({ "fetch": format!("{}/x", service.url()) }).to_string();
        // flags 03: sampled, and a random trace id (W3C Trace Context Level 2)
        traced_job(&project, "call", &plan, "03").await;
        let call = the_call(&service).await;
        let parent = call.header("traceparent").expect("a traceparent");
        let parts: Vec<&str> = parent.split('-').collect();
        assert_eq!(parts[1], TRACE, "export {export}: {parent}");
        assert_eq!(parts[3], "03", "export {export}: the flags as they came");
        if export {
            assert_ne!(parts[2], CALLER, "the client span is the parent: {parent}");
        } else {
            assert_eq!(
                parent,
                format!("00-{TRACE}-{CALLER}-03"),
                "without spans, the producer's context passes through"
            );
        }
        assert_eq!(
            call.header("tracestate"),
            Some(STATE),
            "export {export}: the tracestate passed on"
        );
        running.stop().await;
    }
}

/// The spans an OTLP receiver got at `path`.
fn spans_at(receiver: &HttpServer, path: &str) -> Vec<opentelemetry_proto::tonic::trace::v1::Span> {
    receiver
        .received()
        .iter()
        .filter(|r| r.path == path)
        .flat_map(|r| {
            ExportTraceServiceRequest::decode(&r.body[..])
                .unwrap()
                .resource_spans
        })
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect()
}

#[test]
fn the_otlp_variables_are_read_as_the_specification_says_and_the_cli_enqueue_is_a_producer_span() {
    let project = Project::new("", "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n");
    let receiver = HttpServer::start(vec![Reply::status(200, "")]);
    let enqueue = |id: &str, variable: &str, value: &str| {
        let mut cmd = std::process::Command::new(crate::util::hourglass_bin());
        cmd.args(["enqueue", "echo", "x", "--delay", "1h", "--id", id])
            .args(["--traceparent", &format!("00-{TRACE}-{CALLER}-01")])
            .arg("--config")
            .arg(project.config_path());
        for name in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_SDK_DISABLED",
            "TRACEPARENT",
            "TRACESTATE",
        ] {
            cmd.env_remove(name);
        }
        let out = cmd.env(variable, value).output().unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    // the signal's own variable is the full URL, used as it is
    enqueue(
        "by-traces-endpoint",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        &format!("{}/custom/traces", receiver.url()),
    );
    // the general one is a base URL: /v1/traces is appended
    enqueue(
        "by-endpoint",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        &format!("{}/base/", receiver.url()),
    );
    let paths: Vec<String> = receiver.received().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/custom/traces", "/base/v1/traces"], "{paths:?}");
    for (path, id) in [
        ("/custom/traces", "by-traces-endpoint"),
        ("/base/v1/traces", "by-endpoint"),
    ] {
        let spans = spans_at(&receiver, path);
        let [span] = spans.as_slice() else {
            panic!("one span at {path}: {spans:?}")
        };
        assert_eq!(span.name, "enqueue echo");
        assert_eq!(span.kind, 4, "a producer span");
        let parent: String = span
            .parent_span_id
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(parent, CALLER, "under the caller's span");
        // the job continues from the enqueue span
        let out = hourglass(&project, &["inspect", "echo", id, "--json"]);
        let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let own: String = span.span_id.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            view["traceparent"],
            format!("00-{TRACE}-{own}-01"),
            "{view}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_in_the_format_asked_for_and_the_classic_text_passes_promtool() {
    let project = Project::new(
        "",
        &format!(
            "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n\
             [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"
        ),
    );
    let mut running = Running::start(project.config()).await;
    let addr = running.http.expect("[http]").to_string();
    let queue = project.queue().await;
    let id = crate::util::enqueue(&queue, "echo", "x", 0, 0).await;
    running.until_settled("echo", &id, WAIT).await;
    let get = |accept: Option<&'static str>| {
        let addr = addr.clone();
        async move {
            let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("accept", *a)).collect();
            test_support::http_client::call_with_headers(
                &addr,
                "GET",
                "/metrics",
                Some(TOKEN),
                None,
                &headers,
            )
            .await
        }
    };
    // what Prometheus sends: OpenMetrics first
    let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    let om = get(Some(prometheus)).await;
    assert!(
        om.header("content-type")
            .is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "{:?}",
        om.header("content-type")
    );
    assert!(om.body.ends_with("# EOF\n"), "{}", om.body);
    // curl and agents: no Accept, */*, text/plain
    for accept in [None, Some("*/*"), Some("text/plain;version=0.0.4")] {
        let classic = get(accept).await;
        assert_eq!(
            classic.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8"),
            "{accept:?}"
        );
        assert!(!classic.body.contains("# EOF"), "{accept:?}");
        assert!(
            classic
                .body
                .contains("# TYPE hourglass_attempts_total counter"),
            "{}",
            classic.body
        );
        // Prometheus' own linter reads it with no complaint
        let promtool = which("promtool");
        let mut check = std::process::Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(check.stdin.as_mut().unwrap(), classic.body.as_bytes()).unwrap();
        drop(check.stdin.take());
        let out = check.wait_with_output().unwrap();
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "promtool check metrics: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            classic.body
        );
    }
    running.stop().await;
}

/// `tool`'s path, or a failure saying how to get it.
fn which(tool: &str) -> std::path::PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{tool} is not installed: scripts/setup --test installs it (Debian's prometheus)"
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_view_shows_effective_values_and_the_api_shows_a_kept_end() {
    let project = Project::new(
        "",
        &format!(
            "[[topic]]\nname = \"probe\"\nhandler = \"probe.wasm\"\nmax_attempts = 4\n\
             results = {{ keep = \"1h\" }}\n\n\
             [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"
        ),
    );
    add_handler(&project, "probe.wasm", PROBE);
    let mut running = Running::start(project.config()).await;
    let api = Api(running.http.expect("[http]").to_string());
    let queue = project.queue().await;
    let keys = queue.keys("probe");
    let version = hash_of(PROBE);
    eventually(WAIT, "the stable version recorded", || async {
        match queue.rollouts().get(&keys).await.unwrap().stable {
            Some(v) if v == version => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // a job that names neither attempts nor version: the topic's, shown as such
    let later = hourglass::redis::NewJob {
        id: Some("later".into()),
        payload: b"{}".to_vec(),
        due_at_ms: hourglass::clock::now_ms() + 3_600_000,
        ..Default::default()
    };
    queue
        .enqueue(&keys, &[later], hourglass::clock::now_ms())
        .await
        .unwrap();
    let out = hourglass(&project, &["inspect", "probe", "later", "--json"]);
    let cli: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let from_api = api.get("/api/topics/probe/jobs/later").await.json();
    for view in [&cli, &from_api] {
        assert_eq!(view["max_attempts"], 4, "{view}");
        assert_eq!(view["max_attempts_source"], "topic", "{view}");
        assert_eq!(view["version"], version.as_str(), "{view}");
        assert_eq!(view["version_source"], "stable", "{view}");
        assert_eq!(view["pinned_version"], serde_json::Value::Null, "{view}");
    }
    // an acked job whose end is kept: the API's job view shows the end
    let done = crate::util::enqueue(&queue, "probe", r#"{"result":{"ok":1}}"#, 0, 0).await;
    running.until_settled("probe", &done, WAIT).await;
    let view = api.get(&format!("/api/topics/probe/jobs/{done}")).await;
    assert_eq!(view.status, 200, "{}", view.body);
    let view = view.json();
    assert_eq!(view["state"], "acked", "{view}");
    assert_eq!(view["result"], json!({ "ok": 1 }), "{view}");
    assert_eq!(view["topic"], "probe", "{view}");
    // what a kept end costs Redis (docs/src/results.md): its key, measured
    let mut conn = redis::Client::open(project.endpoint.urls()[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut sizes = Vec::new();
    for n in [11, 20, 1000] {
        let id = crate::util::enqueue(&queue, "probe", &format!(r#"{{"result_bytes":{n}}}"#), 0, 0)
            .await;
        running.until_settled("probe", &id, WAIT).await;
        let bytes: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(keys.result(&id))
            .query_async(&mut conn)
            .await
            .unwrap();
        sizes.push((n, bytes));
    }
    eprintln!("kept end, result bytes -> MEMORY USAGE: {sizes:?}");
    for (n, bytes) in sizes {
        // the docs: about 170 bytes plus the result plus a one-attempt
        // story (about 330), rounded up to the allocator's size class (at
        // most a quarter more)
        assert!(
            bytes >= 150 + 300 + n && bytes as f64 <= (170 + 330 + n) as f64 * 1.25 + 16.0,
            "a kept end with a {n}-byte result takes {bytes} B"
        );
    }
    running.stop().await;
}
