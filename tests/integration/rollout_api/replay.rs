//! Dead letters replayed on a chosen version over the API.

use crate::util::{Api, Project, Running, deploy, hash_of, settled};
use hourglass::events::EventKind;
use serde_json::json;
use test_support::components::{ECHO, ORDER_CANCEL};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_replay_on_a_chosen_version_over_the_api() {
    // no rollout policy: a new file serves every attempt at once
    let project = Project::new("concurrency = 2", &topics(""));
    let pay = project.handler("pay.wasm");
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    let (echo, bad) = (hash_of(ECHO), hash_of(ORDER_CANCEL));
    let mut running = Running::start(project.config()).await;
    let api = Api(running.http.unwrap().to_string());
    api.until("/api/topics/pay/versions", |v| {
        role_of(v, &echo).as_deref() == Some("stable")
    })
    .await;
    deploy(&pay, &std::fs::read(ORDER_CANCEL).unwrap());
    api.until("/api/topics/pay/versions", |v| {
        role_of(v, &bad).as_deref() == Some("stable")
    })
    .await;

    // three jobs die on the bad version (one attempt each)
    let mut dead = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut n = 0;
    while dead.len() < 3 {
        n += 1;
        let id = format!("job-{n}");
        let job = json!({ "id": id, "payload": JOB }).to_string();
        assert_eq!(api.post("/api/topics/pay/jobs", &job).await.status, 201);
        let events = running.until_settled("pay", &id, WAIT).await;
        match settled(&events, "pay", &id) {
            Err(_) => dead.push(id),
            // still the old version: the swap had not reached the scheduler yet
            Ok(()) => assert!(
                tokio::time::Instant::now() < deadline,
                "the bad version never served"
            ),
        }
    }

    // bad bodies are refused naming the field; nothing is requeued
    let retry_one = format!("/api/topics/pay/dead/{}/retry", dead[0]);
    refused(
        &api.post(&retry_one, r#"{"version":"v1"}"#).await,
        400,
        Some("version"),
        "16 hex digits",
    );
    refused(
        &api.post(&retry_one, &json!({ "version": UNKNOWN }).to_string())
            .await,
        400,
        Some("version"),
        UNKNOWN,
    );
    refused(
        &api.post(&retry_one, r#"{"verison":"x"}"#).await,
        400,
        Some("verison"),
        "unknown field",
    );
    refused(
        &api.post(&retry_one, "{").await,
        400,
        Some("body"),
        "not JSON",
    );
    assert_eq!(api.get("/api/topics/pay").await.json()["dead"], 3);

    // one, then the rest, on echo: they ack there although the file is still bad
    let on_echo = json!({ "version": echo }).to_string();
    let one = api.post(&retry_one, &on_echo).await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(
        one.json(),
        json!({ "id": dead[0], "requeued": true, "version": echo })
    );
    let rest = api.post("/api/topics/pay/dead/retry", &on_echo).await;
    assert_eq!(rest.status, 200, "{}", rest.body);
    assert_eq!(rest.json(), json!({ "requeued": 2, "version": echo }));
    let queue = project.queue().await;
    let events = running.after_drained(&queue, &["pay"], WAIT).await;
    for id in &dead {
        let ran: Vec<&str> = events
            .iter()
            .filter(|e| &e.id == id)
            .filter_map(|e| match &e.kind {
                EventKind::Started { handler, .. } => Some(handler.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ran, [echo.as_str()], "{id} replayed on echo");
        assert_eq!(settled(&events, "pay", id), Ok(()), "{id}");
    }
    assert_eq!(api.get("/api/topics/pay").await.json()["dead"], 0);
    running.stop().await;
}
