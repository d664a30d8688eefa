//! The API under traffic: a bulk enqueue of 10,000 answered per job, `/metrics`
//! counting what happened, follow-ups counted, a Redis outage as a 503.

use crate::util::{Api, Project, RedisServer, Running, eventually, hash_of};
use hourglass::events::EventKind;
use serde_json::{Value, json};
use std::time::Duration;
use test_support::http_client::call;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_enqueue_of_ten_thousand_answers_per_job_and_they_run() {
    let project = Project::new("concurrency = 16", TOPICS);
    let mut running = Running::start(project.config()).await;
    let api = Api(running.http.unwrap().to_string());
    let now = hourglass::clock::now_ms();
    let mut jobs: Vec<Value> = (0..9_990)
        .map(|i| match i % 3 {
            0 => json!({ "id": format!("b-{i}"), "payload": { "i": i } }),
            1 => json!({ "id": format!("b-{i}"), "payload": "text", "delay": "10ms" }),
            _ => json!({ "id": format!("b-{i}"), "payload": [i], "due_at_ms": now }),
        })
        .collect();
    // ten repeats of ids already in the batch
    jobs.extend((0..10).map(|i| json!({ "id": format!("b-{i}"), "payload": "again" })));
    let answer = api
        .post("/api/topics/echo/jobs", &Value::from(jobs).to_string())
        .await;
    assert_eq!(
        answer.status,
        200,
        "{}",
        &answer.body[..answer.body.len().min(500)]
    );
    let v = answer.json();
    assert_eq!(
        (v["new"].clone(), v["duplicate"].clone()),
        (json!(9_990), json!(10))
    );
    let answers = v["jobs"].as_array().unwrap();
    assert_eq!(answers.len(), 10_000);
    assert_eq!(answers[5], json!({ "id": "b-5", "status": "new" }));
    assert_eq!(
        answers[9_995],
        json!({ "id": "b-5", "status": "duplicate" })
    );
    let acked = running
        .until(Duration::from_secs(120), |events| {
            events.iter().filter(|e| e.kind == EventKind::Acked).count() == 9_990
        })
        .await;
    let mut ids: Vec<&str> = acked
        .iter()
        .filter(|e| e.kind == EventKind::Acked)
        .map(|e| e.id.as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 9_990, "every job ran once");
    // more than the bulk limit is refused whole
    let too_many = Value::from(vec![json!({ "payload": "x" }); 10_001]).to_string();
    refused(
        &api.post("/api/topics/echo/jobs", &too_many).await,
        400,
        "body",
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_happened_and_parse() {
    let project = Project::new("concurrency = 4", TOPICS);
    let mut running = Running::start(project.config()).await;
    let api = Api(running.http.unwrap().to_string());
    let (acks, dead) = (20, 3);
    let jobs: Vec<Value> = (0..acks).map(|i| json!({ "payload": i })).collect();
    api.post("/api/topics/echo/jobs", &Value::from(jobs).to_string())
        .await;
    let jobs: Vec<Value> = (0..dead).map(|i| json!({ "payload": i })).collect();
    api.post("/api/topics/panic/jobs", &Value::from(jobs).to_string())
        .await;
    running
        .until(Duration::from_secs(60), |events| {
            let n = |k: fn(&EventKind) -> bool| events.iter().filter(|e| k(&e.kind)).count();
            n(|k| *k == EventKind::Acked) == acks
                && n(|k| matches!(k, EventKind::Dead { .. })) == dead
        })
        .await;
    // as Prometheus asks for it (`standards` checks the classic text)
    let answer = test_support::http_client::call_with_headers(
        &api.0,
        "GET",
        "/metrics",
        Some(crate::util::TOKEN),
        None,
        &[("accept", "application/openmetrics-text;version=1.0.0")],
    )
    .await;
    assert_eq!(answer.status, 200);
    assert!(
        answer
            .header("content-type")
            .unwrap()
            .contains("openmetrics")
    );
    let lines = answer.body.lines().map(|l| Ok(l.to_owned()));
    let scrape =
        test_support::prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    let value = |name: &str, labels: &[(&str, &str)]| -> f64 {
        let found: Vec<f64> = scrape
            .samples
            .iter()
            .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                test_support::prometheus_parse::Value::Counter(v)
                | test_support::prometheus_parse::Value::Gauge(v)
                | test_support::prometheus_parse::Value::Untyped(v) => v,
                ref other => panic!("{name}: {other:?}"),
            })
            .collect();
        assert_eq!(found.len(), 1, "{name} {labels:?} in:\n{}", answer.body);
        found[0]
    };
    // labelled with the handler version that ran them
    let echo_version = hash_of(test_support::components::ECHO);
    assert_eq!(
        value(
            "hourglass_attempts_total",
            &[
                ("topic", "echo"),
                ("version", &echo_version),
                ("outcome", "ack")
            ]
        ),
        acks as f64
    );
    assert_eq!(
        value(
            "hourglass_attempts_total",
            &[("topic", "panic"), ("outcome", "dead")]
        ),
        dead as f64
    );
    assert_eq!(
        value(
            "hourglass_attempts_total",
            &[("topic", "echo"), ("outcome", "retry")]
        ),
        0.0
    );
    assert_eq!(
        value("hourglass_lateness_seconds_count", &[("topic", "echo")]),
        acks as f64
    );
    assert_eq!(
        value(
            "hourglass_attempt_duration_seconds_count",
            &[("topic", "echo"), ("version", &echo_version)]
        ),
        acks as f64
    );
    assert_eq!(
        value("hourglass_enqueued_total", &[("topic", "echo")]),
        acks as f64
    );
    assert_eq!(
        value("hourglass_jobs", &[("topic", "panic"), ("state", "dead")]),
        dead as f64
    );
    assert_eq!(
        value("hourglass_jobs", &[("topic", "echo"), ("state", "ready")]),
        0.0
    );
    assert_eq!(value("hourglass_topic_paused", &[("topic", "echo")]), 0.0);
    assert_eq!(value("hourglass_redis_up", &[]), 1.0);
    let echo = hash_of(test_support::components::ECHO);
    assert_eq!(
        value(
            "hourglass_handler_info",
            &[("topic", "echo"), ("version", &echo)]
        ),
        1.0
    );
    // the lateness histogram resolves milliseconds
    assert!(
        answer
            .body
            .contains("hourglass_lateness_seconds_bucket{le=\"0.001\",topic=\"echo\"}")
            || answer
                .body
                .contains("hourglass_lateness_seconds_bucket{topic=\"echo\",le=\"0.001\"}"),
        "{}",
        answer.body
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_is_a_503_with_a_retry_hint() {
    let mut redis = RedisServer::start();
    let project = Project::with_redis(redis.url(), "concurrency = 2", TOPICS);
    let running = Running::start(project.config()).await;
    let api = Api(running.http.unwrap().to_string());
    assert_eq!(api.get("/api/topics").await.status, 200);
    redis.stop();
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        api.post("/api/topics/echo/jobs", r#"{"payload":"x"}"#),
    )
    .await
    .expect("answers while Redis is away");
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert!(answer.json()["error"].as_str().unwrap().contains("redis"));
    let ready = call(
        &running.http.unwrap().to_string(),
        "GET",
        "/readyz",
        None,
        None,
    )
    .await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    redis.resume();
    eventually(
        Duration::from_secs(30),
        "an enqueue after Redis is back",
        || async {
            let answer = api
                .post("/api/topics/echo/jobs", r#"{"id":"after","payload":"x"}"#)
                .await;
            match answer.status {
                201 => Ok(()),
                other => Err(format!("{other} {}", answer.body)),
            }
        },
    )
    .await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueued_counts_follow_ups_this_runner_delivered() {
    let topics = "[[topic]]\nname = \"parent\"\nhandler = \"probe.wasm\"\nmay_enqueue = [\"child\"]\n\n\
        [[topic]]\nname = \"child\"\nhandler = \"echo.wasm\"\n\n[http]\nlisten = \"127.0.0.1:0\"\n";
    let project = Project::new("concurrency = 2", topics);
    let mut running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    let plan = r#"{"payload":{"follow_ups":[{"topic":"child","payload":"a","id":"c1"},{"topic":"child","payload":"b","id":"c2"}]}}"#;
    let made = call(&addr, "POST", "/api/topics/parent/jobs", None, Some(plan)).await;
    assert_eq!(made.status, 201, "{}", made.body);
    running
        .until(Duration::from_secs(20), |seen| {
            seen.iter()
                .filter(|e| e.topic == "child" && e.kind == EventKind::Acked)
                .count()
                == 2
        })
        .await;
    let text = call(&addr, "GET", "/metrics", None, None).await.body;
    assert!(
        text.contains("hourglass_enqueued_total{topic=\"parent\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("hourglass_enqueued_total{topic=\"child\"} 2"),
        "{text}"
    );
    running.stop().await;
}
