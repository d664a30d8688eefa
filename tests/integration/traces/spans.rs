//! The exporter and the spans around it: a dead collector slows nothing, a
//! graceful stop exports the last spans, the CLI's traceparent, durable steps
//! and replayed calls as spans.

use crate::util::{Api, Project, Running, eventually};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;
use test_support::http_server::{HttpServer, Reply};

use super::*;

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
