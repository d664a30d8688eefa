//! The HTTP API, /metrics and health against a real runner and redis-server:
//! every route with a valid and an invalid request, authentication, a bulk
//! enqueue of 10,000 jobs that then run, a Redis outage as 503, and the
//! metrics' counters matching what the test did.

use serde_json::json;
use test_support::http_client::{Answer, call};

use crate::util::{Api, Project, Running, TOKEN, hash_of};

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

mod serving;
mod traffic;
