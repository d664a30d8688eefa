//! Handler versions over the HTTP API against a real runner and redis-server:
//! the kept versions and their roles, a canary shown with its policy,
//! promoted and aborted by hand (a second promote refused), pins (unknown and
//! malformed versions refused naming the field), jobs enqueued and dead
//! letters replayed on a chosen version, `hourglass_rollouts_total` in
//! /metrics; and the dashboard's Versions panel promoting a canary in a real
//! headless Chromium.

use std::collections::HashMap;
use std::time::Duration;

use hourglass::events::EventKind;
use serde_json::{Value, json};
use test_support::components::{ECHO, FLAKY, PROBE};
use test_support::http_client::{Answer, call};

use crate::util::{Api, Project, Running, TOKEN, deploy, eventually, hash_of, settled};

const WAIT: Duration = Duration::from_secs(60);
/// Acked by echo, flaky and probe; order_cancel fails it for good.
const JOB: &str = r#"{"fail_first":0}"#;
/// A well-formed version no topic keeps.
const UNKNOWN: &str = "0123456789abcdef";

/// Topic `pay` (its handler file `pay.wasm`) with `lines` added, served with a token.
fn topics(lines: &str) -> String {
    format!(
        "[[topic]]\nname = \"pay\"\nhandler = \"pay.wasm\"\nmax_attempts = 1\n{lines}\n\n\
         [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"
    )
}

/// `hourglass_rollouts_total` of `pay` by result, once the scrape
/// (refreshed from Redis at most once a second) shows `wanted`.
async fn rollouts_until(api: &Api, wanted: &[(&str, f64)]) -> HashMap<String, f64> {
    eventually(WAIT, &format!("rollouts {wanted:?} scraped"), || async {
        let answer = api.get("/metrics").await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let lines = answer.body.lines().map(|l| Ok(l.to_owned()));
        let scrape =
            test_support::prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
        let counts: HashMap<String, f64> = scrape
            .samples
            .iter()
            .filter(|s| {
                s.metric == "hourglass_rollouts_total" && s.labels.get("topic") == Some("pay")
            })
            .map(|s| match s.value {
                // the parser reads an OpenMetrics counter's `_total` sample as untyped
                test_support::prometheus_parse::Value::Counter(v)
                | test_support::prometheus_parse::Value::Untyped(v) => {
                    (s.labels.get("result").unwrap_or("").to_owned(), v)
                }
                ref other => panic!("hourglass_rollouts_total: {other:?}"),
            })
            .collect();
        if wanted.iter().all(|(r, n)| counts.get(*r) == Some(n)) {
            Ok(counts)
        } else {
            Err(format!("{counts:?}:\n{}", answer.body))
        }
    })
    .await
}

/// A JSON error with `status`, naming `field` (or none), whose message has `text`.
fn refused(answer: &Answer, status: u16, field: Option<&str>, text: &str) {
    assert_eq!(answer.status, status, "{}", answer.body);
    let v = answer.json();
    assert_eq!(v["field"].as_str(), field, "{v}");
    let error = v["error"].as_str().expect("an error message");
    assert!(error.contains(text), "{text:?} not in {error:?}");
}

/// The role `/versions` gives `version`, if it lists it.
fn role_of(listed: &Value, version: &str) -> Option<String> {
    listed["versions"]
        .as_array()?
        .iter()
        .find(|v| v["version"] == version)
        .map(|v| v["role"].as_str().unwrap_or("").to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_is_promoted_aborted_and_a_version_pinned_over_the_api() {
    let project = Project::new(
        "concurrency = 2",
        &topics(r#"rollout = { canary = "50%", for = "1h", min_attempts = 1000 }"#),
    );
    let pay = project.handler("pay.wasm");
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    let (echo, probe, flaky) = (hash_of(ECHO), hash_of(PROBE), hash_of(FLAKY));
    let mut running = Running::start(project.config()).await;
    let addr = running.http.expect("[http] is served").to_string();
    let api = Api(addr.clone());

    // the version the runner loaded is kept, as the stable one
    let listed = api
        .until("/api/topics/pay/versions", |v| {
            v["versions"].as_array().is_some_and(|l| !l.is_empty())
        })
        .await;
    assert_eq!(listed["topic"], "pay");
    assert_eq!(
        listed["versions"].as_array().unwrap().len(),
        1,
        "{listed:#}"
    );
    assert_eq!(
        role_of(&listed, &echo).as_deref(),
        Some("stable"),
        "{listed:#}"
    );
    assert_eq!(listed["rollout"]["stable"], echo.as_str());
    assert_eq!(api.get("/api/topics/nope/versions").await.status, 404);
    assert_eq!(api.get("/api/topics/nope/rollout").await.status, 404);

    // the policy as served, defaults filled in; no canary to promote yet
    let status = api.get("/api/topics/pay/rollout").await.json();
    assert_eq!(
        status["policy"],
        json!({ "canary": 0.5, "window_ms": 3_600_000, "min_attempts": 1000,
                "max_failure_rate": 0.2, "margin": 0.05, "journaled": "pinned" })
    );
    assert_eq!(status["rollout"]["canary"], Value::Null, "{status:#}");
    refused(
        &api.post("/api/topics/pay/rollout/promote", "").await,
        409,
        None,
        "no canary",
    );

    // a new file under the policy: a canary with half the attempts for an hour
    deploy(&pay, &std::fs::read(PROBE).unwrap());
    let status = api
        .until("/api/topics/pay/rollout", |v| {
            v["rollout"]["canary"]["version"] == probe.as_str()
        })
        .await;
    let canary = &status["rollout"]["canary"];
    assert_eq!(canary["share"], 0.5, "{status:#}");
    assert_eq!(
        canary["ends_ms"].as_u64().unwrap() - canary["started_ms"].as_u64().unwrap(),
        3_600_000
    );
    assert_eq!(status["rollout"]["stable"], echo.as_str());
    let listed = api.get("/api/topics/pay/versions").await.json();
    assert_eq!(
        listed["versions"][0]["version"],
        probe.as_str(),
        "newest first"
    );
    assert_eq!(role_of(&listed, &probe).as_deref(), Some("canary"));
    assert_eq!(role_of(&listed, &echo).as_deref(), Some("stable"));

    // changes need the token; promote makes the canary stable, once
    let anonymous = call(
        &addr,
        "POST",
        "/api/topics/pay/rollout/promote",
        None,
        Some(""),
    )
    .await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    let promoted = api.post("/api/topics/pay/rollout/promote", "").await;
    assert_eq!(promoted.status, 200, "{}", promoted.body);
    assert_eq!(
        promoted.json(),
        json!({ "topic": "pay", "result": "promoted", "version": probe, "stable": probe })
    );
    let status = api.get("/api/topics/pay/rollout").await.json();
    let r = &status["rollout"];
    assert_eq!(
        (&r["stable"], &r["canary"]),
        (&json!(probe), &Value::Null),
        "{status:#}"
    );
    assert_eq!(
        (
            &r["last"]["result"],
            &r["last"]["version"],
            &r["last"]["by"]
        ),
        (&json!("promoted"), &json!(probe), &json!("api")),
        "{status:#}"
    );
    refused(
        &api.post("/api/topics/pay/rollout/promote", "").await,
        409,
        None,
        "no canary",
    );
    let counts = rollouts_until(&api, &[("promoted", 1.0)]).await;
    assert_eq!(counts.get("aborted"), Some(&0.0), "{counts:?}");

    // another new file; aborted: retired, the stable version stays
    deploy(&pay, &std::fs::read(FLAKY).unwrap());
    api.until("/api/topics/pay/rollout", |v| {
        v["rollout"]["canary"]["version"] == flaky.as_str()
    })
    .await;
    let aborted = api.post("/api/topics/pay/rollout/abort", "").await;
    assert_eq!(aborted.status, 200, "{}", aborted.body);
    assert_eq!(
        aborted.json(),
        json!({ "topic": "pay", "result": "aborted", "version": flaky, "stable": probe })
    );
    let listed = api.get("/api/topics/pay/versions").await.json();
    assert_eq!(
        role_of(&listed, &flaky).as_deref(),
        Some("retired"),
        "{listed:#}"
    );
    assert_eq!(
        role_of(&listed, &probe).as_deref(),
        Some("stable"),
        "{listed:#}"
    );
    refused(
        &api.post("/api/topics/pay/rollout/abort", "").await,
        409,
        None,
        "no canary",
    );

    // pins: bad input names the field; a kept version is served by every runner
    let pin = |body: &'static str| api.post("/api/topics/pay/pin", body);
    refused(
        &pin(r#"{"version":"nope"}"#).await,
        400,
        Some("version"),
        "16 hex digits",
    );
    refused(&pin("{}").await, 400, Some("version"), "missing");
    refused(
        &pin(r#"{"versoin":"x"}"#).await,
        400,
        Some("versoin"),
        "unknown field",
    );
    refused(&pin("").await, 400, Some("body"), "not JSON");
    refused(
        &api.post(
            "/api/topics/pay/pin",
            &json!({ "version": UNKNOWN }).to_string(),
        )
        .await,
        409,
        Some("version"),
        UNKNOWN,
    );
    let anonymous = call(
        &addr,
        "POST",
        "/api/topics/pay/pin",
        None,
        Some(&json!({ "version": echo }).to_string()),
    )
    .await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    let pinned = api
        .post(
            "/api/topics/pay/pin",
            &json!({ "version": echo }).to_string(),
        )
        .await;
    assert_eq!(pinned.status, 200, "{}", pinned.body);
    assert_eq!(pinned.json(), json!({ "topic": "pay", "pinned": echo }));
    let status = api.get("/api/topics/pay/rollout").await.json();
    assert_eq!(
        (
            &status["rollout"]["pinned"]["version"],
            &status["rollout"]["pinned"]["by"]
        ),
        (&json!(echo), &json!("api")),
        "{status:#}"
    );
    let listed = api.get("/api/topics/pay/versions").await.json();
    assert_eq!(
        role_of(&listed, &echo).as_deref(),
        Some("pinned"),
        "{listed:#}"
    );

    // unpinned: the rollout decides again; a second unpin is refused
    let unpinned = api.delete("/api/topics/pay/pin").await;
    assert_eq!(unpinned.status, 200, "{}", unpinned.body);
    assert_eq!(unpinned.json(), json!({ "topic": "pay", "pinned": null }));
    let status = api.get("/api/topics/pay/rollout").await.json();
    assert_eq!(status["rollout"]["pinned"], Value::Null, "{status:#}");
    refused(
        &api.delete("/api/topics/pay/pin").await,
        409,
        None,
        "not pinned",
    );

    // a job pinned at enqueue to a kept version runs on it (the topic serves probe)
    let job = json!({ "id": "on-echo", "payload": JOB, "version": echo }).to_string();
    let made = api.post("/api/topics/pay/jobs", &job).await;
    assert_eq!(made.status, 201, "{}", made.body);
    let events = running.until_settled("pay", "on-echo", WAIT).await;
    assert_eq!(settled(&events, "pay", "on-echo"), Ok(()));
    let ran: Vec<&str> = events
        .iter()
        .filter(|e| e.id == "on-echo")
        .filter_map(|e| match &e.kind {
            EventKind::Started { handler, .. } => Some(handler.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ran, [echo.as_str()]);
    // a version the topic does not keep, or not a version at all: refused, nothing enqueued
    let unknown = json!({ "id": "on-unknown", "payload": JOB, "version": UNKNOWN });
    refused(
        &api.post("/api/topics/pay/jobs", &unknown.to_string()).await,
        400,
        Some("version"),
        UNKNOWN,
    );
    assert_eq!(api.get("/api/topics/pay/jobs/on-unknown").await.status, 404);
    let bulk = json!([{ "payload": JOB, "version": echo }, unknown]).to_string();
    refused(
        &api.post("/api/topics/pay/jobs", &bulk).await,
        400,
        Some("[1].version"),
        UNKNOWN,
    );
    refused(
        &api.post("/api/topics/pay/jobs", r#"{"payload":"x","version":"v2"}"#)
            .await,
        400,
        Some("version"),
        "16 hex digits",
    );

    // every change counted once, from Redis
    let counts = rollouts_until(
        &api,
        &[
            ("promoted", 1.0),
            ("aborted", 1.0),
            ("pinned", 1.0),
            ("unpinned", 1.0),
        ],
    )
    .await;
    assert_eq!(counts.get("rolled_back"), Some(&0.0), "{counts:?}");
    assert_eq!(counts.len(), 5, "{counts:?}");
    running.stop().await;
}

mod dashboard;
mod replay;
