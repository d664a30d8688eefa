//! Webhook topics: 5xx retried, `Retry-After` waited for, a 4xx dead-lettered
//! with its status and body.

use crate::util::{Project, Running, enqueue, of, retry_reasons, settled};
use hourglass::events::{Event, EventKind};
use test_support::{HttpServer, Reply};

use super::*;

fn webhook_topics(url: &str) -> String {
    format!(
        r#"
[[topic]]
name = "webhook"
handler = "webhook.wasm"
max_attempts = 5
backoff = {{ base = "50ms", factor = 1.0, jitter = 0.0 }}
grants = {{ http = ["{url}"] }}
"#
    )
}

fn hook(url: &str) -> String {
    format!(r#"{{"url":"{url}/hooks/order","body":{{"order":1042,"state":"cancelled"}}}}"#)
}

/// One webhook job against a receiver answering `script`: the receiver, the
/// events until the job settled, and the job's id.
async fn deliver(script: Vec<Reply>) -> (HttpServer, Vec<Event>, String) {
    let server = HttpServer::start(script);
    let project = Project::new("concurrency = 4", &webhook_topics(&server.url()));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = enqueue(&queue, "webhook", &hook(&server.url()), 0, 0).await;
    let events = runner.until_settled("webhook", &id, WAIT).await;
    runner.stop().await;
    (server, events, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_retries_5xx_and_acks_on_the_attempt_that_gets_a_2xx() {
    let (server, events, id) = deliver(vec![
        Reply::status(503, "busy"),
        Reply::status(503, "busy"),
        Reply::status(200, "thanks"),
    ])
    .await;
    assert_eq!(settled(&events, "webhook", &id), Ok(()));
    let acked = events
        .iter()
        .find(|e| e.id == id && e.kind == EventKind::Acked)
        .unwrap();
    assert_eq!(acked.attempt, 3);
    let retries = retry_reasons(&events, "webhook", &id);
    assert!(retries.iter().all(|r| r.contains("503")), "{retries:?}");
    let received = server.received();
    assert_eq!(received.len(), 3);
    for request in &received {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/hooks/order");
        assert_eq!(request.header("content-type"), Some("application/json"));
        // a length, not a chunked upload: some servers refuse those (411)
        let length = request.body.len().to_string();
        assert_eq!(request.header("content-length"), Some(length.as_str()));
        assert_eq!(request.header("transfer-encoding"), None);
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body, serde_json::json!({"order":1042,"state":"cancelled"}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_waits_as_long_as_retry_after_says() {
    let (_server, events, id) = deliver(vec![
        Reply::status(429, "slow down").with_header("retry-after", "2"),
        Reply::status(204, ""),
    ])
    .await;
    assert_eq!(settled(&events, "webhook", &id), Ok(()));
    let starts: Vec<u64> = of(&events, "webhook", &id)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::Started { started_at_ms, .. } => Some(*started_at_ms),
            _ => None,
        })
        .collect();
    assert_eq!(starts.len(), 2, "{events:#?}");
    // the topic's backoff is 50 ms: only Retry-After explains the wait
    assert!(
        starts[1] - starts[0] >= 2000,
        "second attempt {} ms after the first",
        starts[1] - starts[0]
    );
    let next_due = of(&events, "webhook", &id)
        .into_iter()
        .find_map(|k| match k {
            EventKind::Retried { next_due_ms, .. } => Some(*next_due_ms),
            _ => None,
        });
    assert!(next_due.unwrap() >= starts[0] + 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_dead_letters_a_4xx_with_its_status_and_body() {
    let (server, events, id) =
        deliver(vec![Reply::status(404, "no such hook: /hooks/order")]).await;
    let reason = settled(&events, "webhook", &id).unwrap_err();
    assert!(
        reason.contains("answered 404: no such hook: /hooks/order"),
        "{reason}"
    );
    assert!(retry_reasons(&events, "webhook", &id).is_empty());
    assert_eq!(server.received().len(), 1);
}
