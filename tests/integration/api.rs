//! The HTTP API, /metrics and health against a real runner and redis-server:
//! every route with a valid and an invalid request, authentication, a bulk
//! enqueue of 10,000 jobs that then run, a Redis outage as 503, and the
//! metrics' counters matching what the test did.

use std::time::Duration;

use hourglass::events::EventKind;
use serde_json::{Value, json};
use test_support::http_client::{Answer, call};

use crate::util::{Api, Project, RedisServer, Running, TOKEN, eventually, hash_of, hourglass_bin};

const TOPICS: &str = "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n\
    [[topic]]\nname = \"panic\"\nhandler = \"panic.wasm\"\nmax_attempts = 1\n\n\
    [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"test-token-0123456789abcdef\"\n";

/// A 4xx JSON error naming `field`.
fn refused(answer: &Answer, status: u16, field: &str) {
    assert_eq!(answer.status, status, "{}", answer.body);
    let v = answer.json();
    assert!(v["error"].is_string(), "{v}");
    assert_eq!(v["field"], field, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_with_a_valid_and_an_invalid_request() {
    let project = Project::new("concurrency = 4", TOPICS);
    let running = Running::start(project.config()).await;
    let addr = running.http.expect("[http] is served").to_string();
    let api = Api(addr.clone());

    // health needs no token; everything else does
    assert_eq!(call(&addr, "GET", "/healthz", None, None).await.status, 200);
    let ready = api.until("/readyz", |v| v["ready"] == true).await;
    assert_eq!(ready["problems"], json!([]));
    let none = call(&addr, "GET", "/api/topics", None, None).await;
    assert_eq!(none.status, 401, "{}", none.body);
    assert!(!none.body.contains(TOKEN));
    let wrong = call(
        &addr,
        "GET",
        "/api/topics",
        Some("not-the-token-at-all"),
        None,
    )
    .await;
    assert_eq!(wrong.status, 401);
    let wrong = call(&addr, "POST", "/api/topics/echo/pause", Some("x"), Some("")).await;
    assert_eq!(wrong.status, 401);
    assert_eq!(call(&addr, "GET", "/metrics", None, None).await.status, 401);

    // topics: config, handler version, counts
    let topics = api.get("/api/topics").await.json();
    let names: Vec<&str> = topics["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "panic"]);
    let echo = api.get("/api/topics/echo").await.json();
    assert_eq!(echo["handler"], hash_of(test_support::components::ECHO));
    assert_eq!(echo["max_attempts"], 5);
    assert_eq!(api.get("/api/topics/nope").await.status, 404);

    // enqueue one: new, then duplicate; bad fields are named
    let later = api
        .post(
            "/api/topics/echo/jobs",
            r#"{"id":"later","payload":{"n":1},"delay":"1h"}"#,
        )
        .await;
    assert_eq!(
        (later.status, later.json()["status"].clone()),
        (201, json!("new")),
        "{}",
        later.body
    );
    let again = api
        .post("/api/topics/echo/jobs", r#"{"id":"later","payload":"x"}"#)
        .await;
    assert_eq!(
        (again.status, again.json()["status"].clone()),
        (200, json!("duplicate"))
    );
    refused(
        &api.post("/api/topics/echo/jobs", r#"{"payload":"x","delay":"soon"}"#)
            .await,
        400,
        "delay",
    );
    refused(
        &api.post(
            "/api/topics/echo/jobs",
            r#"{"payload":"x","at":"tomorrow"}"#,
        )
        .await,
        400,
        "at",
    );
    refused(
        &api.post(
            "/api/topics/echo/jobs",
            r#"{"payload":"x","max_attempts":"three"}"#,
        )
        .await,
        400,
        "max_attempts",
    );
    refused(
        &api.post("/api/topics/echo/jobs", r#"{"payload":"x","id":""}"#)
            .await,
        400,
        "id",
    );
    refused(
        &api.post("/api/topics/echo/jobs", r#"{"paylod":"x"}"#).await,
        400,
        "paylod",
    );
    // a missing field is named itself, not the object that lacks it
    refused(
        &api.post("/api/topics/echo/jobs", r#"{"id":"no-payload"}"#)
            .await,
        400,
        "payload",
    );
    refused(
        &api.post(
            "/api/topics/echo/jobs",
            r#"[{"payload":"a"},{"payload":"b"},{"payload":"c"},{"id":"d"}]"#,
        )
        .await,
        400,
        "[3].payload",
    );
    refused(
        &api.post(
            "/api/topics/echo/jobs",
            r#"[{"payload":"a"},{"payload":"b","delay":3}]"#,
        )
        .await,
        400,
        "[1].delay",
    );
    refused(
        &api.post("/api/topics/echo/jobs", "not json").await,
        400,
        "body",
    );
    refused(&api.post("/api/topics/echo/jobs", "[]").await, 400, "body");
    let big = format!(r#"{{"payload":"{}"}}"#, "x".repeat(1 << 21));
    refused(
        &api.post("/api/topics/echo/jobs", &big).await,
        400,
        "payload",
    );
    assert_eq!(
        api.post("/api/topics/nope/jobs", r#"{"payload":"x"}"#)
            .await
            .status,
        404
    );
    assert_eq!(
        api.post("/api/topics/bad%20name/jobs", r#"{"payload":"x"}"#)
            .await
            .status,
        404
    );

    // inspect and cancel
    let job = api.get("/api/topics/echo/jobs/later").await.json();
    assert_eq!(
        (job["state"].as_str(), job["payload"].as_str()),
        (Some("scheduled"), Some(r#"{"n":1}"#))
    );
    assert_eq!(api.get("/api/topics/echo/jobs/missing").await.status, 404);
    let replaced = api
        .post(
            "/api/topics/echo/jobs",
            r#"{"id":"later","payload":"v2","delay":"2h","replace":true}"#,
        )
        .await;
    assert_eq!(
        (replaced.status, replaced.json()["status"].clone()),
        (200, json!("replaced"))
    );
    let job = api.get("/api/topics/echo/jobs/later").await.json();
    assert_eq!(job["payload"], "v2");
    refused(
        &api.post("/api/topics/echo/jobs", r#"{"payload":"x","replace":true}"#)
            .await,
        400,
        "replace",
    );
    refused(
        &api.post(
            "/api/topics/echo/jobs",
            r#"{"id":"u","payload":"x","unique_for":"ever"}"#,
        )
        .await,
        400,
        "unique_for",
    );
    let cancelled = api.delete("/api/topics/echo/jobs/later").await;
    assert_eq!(
        (cancelled.status, cancelled.json()["was"].clone()),
        (200, json!("waiting"))
    );
    assert_eq!(api.delete("/api/topics/echo/jobs/later").await.status, 404);

    // dead letters: listed (paged), retried, purged
    for id in ["p1", "p2", "p3"] {
        let body = format!(r#"{{"id":"{id}","payload":"boom"}}"#);
        assert_eq!(api.post("/api/topics/panic/jobs", &body).await.status, 201);
    }
    let dead = api
        .until("/api/topics/panic/dead?limit=2", |v| v["total"] == 3)
        .await;
    assert_eq!(dead["letters"].as_array().unwrap().len(), 2);
    assert!(
        dead["letters"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("panicked"),
        "{dead}"
    );
    let page2 = api
        .get("/api/topics/panic/dead?offset=2&limit=2")
        .await
        .json();
    assert_eq!(page2["letters"].as_array().unwrap().len(), 1);
    refused(
        &api.get("/api/topics/panic/dead?limit=0").await,
        400,
        "limit",
    );
    refused(
        &api.get("/api/topics/panic/dead?limit=many").await,
        400,
        "limit",
    );

    let paused = api.post("/api/topics/panic/pause", "").await.json();
    assert_eq!(
        (paused["paused"].clone(), paused["changed"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(api.get("/api/topics/panic").await.json()["paused"], true);
    assert_eq!(
        api.post("/api/topics/panic/dead/p1/retry", "").await.status,
        200
    );
    assert_eq!(
        api.post("/api/topics/panic/dead/p1/retry", "").await.status,
        404
    );
    let p1 = api.get("/api/topics/panic/jobs/p1").await.json();
    assert_eq!(p1["state"], "ready", "paused: it waits, {p1}");
    assert_eq!(api.delete("/api/topics/panic/dead/p2").await.status, 200);
    assert_eq!(api.delete("/api/topics/panic/dead/p2").await.status, 404);
    let resumed = api.post("/api/topics/panic/resume", "").await.json();
    assert_eq!(resumed["paused"], false);
    api.until("/api/topics/panic", |v| v["dead"] == 2).await;
    let retried = api.post("/api/topics/panic/dead/retry", "").await.json();
    assert_eq!(retried["requeued"], 2);
    api.until("/api/topics/panic", |v| {
        v["dead"] == 2 && v["ready"] == 0 && v["running"] == 0
    })
    .await;
    let purged = api.delete("/api/topics/panic/dead").await.json();
    assert_eq!(purged["purged"], 2);
    assert_eq!(api.get("/api/topics/panic").await.json()["dead"], 0);

    // stats, runners, reloads, and an unknown route
    let stats = api.get("/api/stats").await.json();
    assert_eq!(stats["echo"]["dead"], 0, "{stats}");
    let runners = api
        .until("/api/runners", |v| {
            v["runners"].as_array().is_some_and(|r| r.len() == 1)
        })
        .await;
    assert_eq!(runners["runners"][0]["pid"], std::process::id());
    assert!(api.get("/api/reloads").await.json()["reloads"].is_array());
    let unknown = api.get("/api/nothing/here").await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.json()["error"].is_string());
    running.stop().await;
}

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
async fn hourglass_serve_needs_only_redis_and_http() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let port = test_support::free_port();
    let config = dir.path().join("queues.toml");
    std::fs::write(
        &config,
        format!(
            "[redis]\nurl = {:?}\nnamespace = \"test\"\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n",
            redis.url()
        ),
    )
    .unwrap();
    let mut serve = std::process::Command::new(hourglass_bin())
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    eventually(
        Duration::from_secs(20),
        "hourglass serve listening",
        || async {
            tokio::net::TcpStream::connect(&addr)
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await;
    // no token on loopback: open; any valid topic name (the file lists none)
    let made = call(
        &addr,
        "POST",
        "/api/topics/mail/jobs",
        None,
        Some(r#"{"id":"m1","payload":"hi"}"#),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let job = call(&addr, "GET", "/api/topics/mail/jobs/m1", None, None)
        .await
        .json();
    assert_eq!(job["state"], "ready");
    refused(
        &call(
            &addr,
            "POST",
            "/api/topics/no%20spaces/jobs",
            None,
            Some(r#"{"payload":"x"}"#),
        )
        .await,
        400,
        "topic",
    );
    let ready = call(&addr, "GET", "/readyz", None, None).await.json();
    assert_eq!(ready["ready"], true, "no handlers needed: {ready}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(serve.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(serve.wait().unwrap().success());
}

#[test]
fn a_token_never_shows_in_debug_output_and_an_open_server_stays_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queues.toml");
    let parse = |http: &str| {
        hourglass::Config::parse_for(
            &path,
            &format!("[http]\n{http}\n"),
            hourglass::config::Check::Producer,
        )
    };
    let config = parse(&format!("listen = \"127.0.0.1:9090\"\ntoken = \"{TOKEN}\"")).unwrap();
    assert!(!format!("{config:?}").contains(TOKEN));
    let open = parse("listen = \"0.0.0.0:9090\"").unwrap_err().to_string();
    assert!(
        open.contains("field `listen`") && open.contains("token"),
        "{open}"
    );
    let short = parse("listen = \"127.0.0.1:9090\"\ntoken = \"short\"")
        .unwrap_err()
        .to_string();
    assert!(short.contains("field `token`"), "{short}");
    let bad = parse("listen = \"localhost\"").unwrap_err().to_string();
    assert!(
        bad.contains("field `listen`") && bad.contains(":2:"),
        "{bad}"
    );
    let unset = parse("listen = \"127.0.0.1:9090\"\ntoken = \"${HOURGLASS_TEST_UNSET_TOKEN}\"")
        .unwrap_err()
        .to_string();
    assert!(unset.contains("HOURGLASS_TEST_UNSET_TOKEN"), "{unset}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_token_applies_live_and_the_address_waits_for_a_restart() {
    let project = Project::new("concurrency = 2", TOPICS);
    let mut running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    let read = |token: &'static str| {
        let addr = addr.clone();
        async move {
            call(&addr, "GET", "/api/topics", Some(token), None)
                .await
                .status
        }
    };
    assert_eq!(read(TOKEN).await, 200);
    let next = "the-next-token-0123456789";
    let topics = TOPICS
        .replace(TOKEN, next)
        .replace("127.0.0.1:0", "127.0.0.1:1");
    project.write_config("concurrency = 2", &format!("{topics}public_read = true\n"));
    running
        .notice(Duration::from_secs(20), |n| {
            matches!(n, hourglass::Notice::ConfigApplied)
        })
        .await;
    assert_eq!(read(TOKEN).await, 401, "the old token is refused");
    assert_eq!(read(next).await, 200);
    // public_read: reads without a token, changes still need one
    assert_eq!(
        call(&addr, "GET", "/api/topics", None, None).await.status,
        200
    );
    let change = call(&addr, "POST", "/api/topics/echo/pause", None, Some("")).await;
    assert_eq!(change.status, 401);
    // the address is restart-only: still served where it was
    assert_eq!(call(&addr, "GET", "/healthz", None, None).await.status, 200);
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
