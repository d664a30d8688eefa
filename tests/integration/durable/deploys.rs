//! A journal seen and kept across change: the API shows it and takes signals,
//! it pins its job across a deploy and a canary, and lives in its topic's slot
//! on a Cluster.

use crate::util::{Api, Project, Running, TOKEN, enqueue, eventually, hourglass, settled};
use hourglass::events::EventKind;
use std::time::Duration;
use test_support::{HttpServer, Reply};

use super::*;

/// `hourglass_steps_total` of checkout by `how`, as /metrics shows it.
async fn steps_scraped(api: &Api) -> (f64, f64) {
    let answer = api.get("/metrics").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let lines = answer.body.lines().map(|l| Ok(l.to_owned()));
    let scrape =
        test_support::prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    let count = |how: &str| {
        scrape
            .samples
            .iter()
            .filter(|s| {
                s.metric == "hourglass_steps_total"
                    && s.labels.get("topic") == Some("checkout")
                    && s.labels.get("how") == Some(how)
            })
            .map(|s| match s.value {
                test_support::prometheus_parse::Value::Counter(v)
                | test_support::prometheus_parse::Value::Untyped(v) => v,
                ref other => panic!("hourglass_steps_total: {other:?}"),
            })
            .sum::<f64>()
    };
    (count("recorded"), count("replayed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_shows_the_journal_and_takes_signals() {
    let http = format!("\n[http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n");
    let (shop, _project, queue, mut running) = serving("concurrency = 2", "", &http).await;
    let api = Api(running.http.unwrap().to_string());
    let id = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "approval_ms": 600000"#),
        0,
        0,
    )
    .await;
    until_suspended(&queue, &id).await;
    let view = api
        .until(&format!("/api/topics/checkout/jobs/{id}"), |v| {
            !v["suspended"].is_null()
        })
        .await;
    assert_eq!(view["suspended"]["signal"], "approved", "{view:#}");
    let steps: Vec<&str> = view["journal"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["charge", "reserve"], "{view:#}");
    assert_eq!(view["version_source"], "journal", "{view:#}");
    assert_eq!(
        view["journal"]["steps"][0]["bytes"], 6,
        "\"ch_1\" as JSON: {view:#}"
    );

    // the suspended job in /metrics (read from Redis at most once a second)
    eventually(Duration::from_secs(10), "suspended in /metrics", || async {
        let answer = api.get("/metrics").await;
        let line = "hourglass_jobs{topic=\"checkout\",state=\"suspended\"} 1";
        match answer.body.lines().any(|l| l == line) {
            true => Ok(()),
            false => Err(answer.body),
        }
    })
    .await;
    let answer = api
        .post(
            &format!("/api/topics/checkout/jobs/{id}/signals/approved"),
            "dee",
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["delivered"], "woken");
    let events = running
        .until_settled("checkout", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    // gone: 404 for a signal and a wake
    let answer = api
        .post(
            &format!("/api/topics/checkout/jobs/{id}/signals/approved"),
            "x",
        )
        .await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    let answer = api
        .post(&format!("/api/topics/checkout/jobs/{id}/wake"), "")
        .await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    let answer = api
        .post("/api/topics/checkout/jobs/nobody/signals/approved", "x")
        .await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    // recorded: charge, reserve, approved, email; replayed: charge, reserve
    eventually(Duration::from_secs(10), "steps in /metrics", || async {
        match steps_scraped(&api).await {
            (4.0, 2.0) => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    running.stop().await;
}

/// The handler versions that started attempts of job `id`, in order.
fn versions_of(events: &[hourglass::events::Event], id: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.id == id)
        .filter_map(|e| match &e.kind {
            EventKind::Started { handler, .. } => Some(handler.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_pins_its_job_across_a_deploy_and_a_canary_and_replays_need_a_reset() {
    let rollout = "rollout = { canary = \"99%\", for = \"1h\", min_attempts = 100000, max_failure_rate = 0.9 }";
    let (shop, project, queue, mut running) = serving("concurrency = 4", rollout, "").await;
    let old = crate::util::hash_of(test_support::components::CHECKOUT);
    let sleeper = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "sleep_ms": 3600000"#),
        0,
        0,
    )
    .await;
    until_suspended(&queue, &sleeper).await;
    // a job that dies with a journal: its approval never comes
    let dies = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "approval_ms": 200"#),
        0,
        0,
    )
    .await;
    let events = running
        .until_settled("checkout", &dies, Duration::from_secs(60))
        .await;
    assert!(settled(&events, "checkout", &dies).is_err());

    // a new version, served as a canary to 99% of attempts
    let bytes = std::fs::read(test_support::components::CHECKOUT).unwrap();
    let new_bytes = crate::util::variant(&bytes, "v2");
    let new = hourglass::wasm::content_hash(&new_bytes);
    crate::util::deploy(&project.handler("checkout.wasm"), &new_bytes);
    eventually(Duration::from_secs(60), "the canary", || async {
        let r = queue.rollouts().get(&queue.keys("checkout")).await.unwrap();
        match r.canary {
            Some(c) if c.version == new => Ok(()),
            _ => Err(format!("{r:?}")),
        }
    })
    .await;
    let mut fresh = Vec::new();
    for _ in 0..10 {
        fresh.push(enqueue(&queue, "checkout", r#"{"noop": true}"#, 0, 0).await);
    }
    let out = hourglass(&project, &["wake", "checkout", &sleeper]);
    assert!(out.status.success(), "{out:?}");
    let events = running
        .until(Duration::from_secs(60), |seen| {
            fresh.iter().chain([&sleeper]).all(|id| {
                seen.iter()
                    .any(|e| &e.id == id && crate::util::is_final(&e.kind))
            })
        })
        .await;
    assert_eq!(settled(&events, "checkout", &sleeper), Ok(()));
    assert_eq!(
        versions_of(&events, &sleeper),
        std::slice::from_ref(&old),
        "the journaled job finished on the version that wrote its journal"
    );
    let on_canary = fresh
        .iter()
        .filter(|id| versions_of(&events, id) == [new.clone()])
        .count();
    assert!(
        on_canary >= 5,
        "the canary serves jobs without a journal: {on_canary} of 10"
    );

    // replay of the dead letter: on its own version by default (the journal
    // replays: no new charge); on another only with --reset-journal
    let charges = calls(&shop)[0];
    let out = hourglass(
        &project,
        &["dead", "retry", "checkout", &dies, "--version", &new],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--reset-journal"),
        "{out:?}"
    );
    let out = hourglass(&project, &["dead", "retry", "checkout", &dies]);
    assert!(out.status.success(), "{out:?}");
    let events = running
        .until_settled("checkout", &dies, Duration::from_secs(60))
        .await;
    assert!(settled(&events, "checkout", &dies).is_err());
    assert_eq!(
        versions_of(&events, &dies),
        std::slice::from_ref(&old),
        "replayed: no wait this time"
    );
    assert_eq!(
        calls(&shop)[0],
        charges,
        "replayed on its version: no new charge"
    );
    let out = hourglass(
        &project,
        &[
            "dead",
            "retry",
            "checkout",
            &dies,
            "--version",
            &new,
            "--reset-journal",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let events = running
        .until_settled("checkout", &dies, Duration::from_secs(60))
        .await;
    // (two attempts' starts: the wait for the approval suspends it once)
    assert_eq!(versions_of(&events, &dies), [new.clone(), new.clone()]);
    assert_eq!(
        calls(&shop)[0],
        charges + 1,
        "a reset journal charges again"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_journal_lives_in_its_topics_slot() {
    let cluster = test_support::RedisCluster::start();
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let project = Project::on_cluster(cluster.urls(), "concurrency = 2", &topics(&shop, ""));
    let queue = project.queue().await;
    let keys = queue.keys("checkout");
    let mut running = Running::start(project.config()).await;
    let id = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "email_fails": 1, "approval_ms": 600000"#),
        0,
        0,
    )
    .await;
    until_suspended(&queue, &id).await;
    assert_eq!(
        cluster.master_of(&keys.journal_of(&id)),
        cluster.master_of(&keys.job),
        "the journal is on the topic's master"
    );
    let out = hourglass(&project, &["signal", "checkout", &id, "approved", "ana"]);
    assert!(out.status.success(), "{out:?}");
    let events = running
        .until_settled("checkout", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    assert_eq!(calls(&shop), [1, 1, 2, 1, 0]);
    assert!(!journal_exists(&queue, &id).await);
    running.stop().await;
}
