//! Jobs end to end through a runner: ack, delay, retry, dead-letter.

use std::time::Duration;

use hourglass::events::EventKind;

use crate::util::{Project, Running, enqueue, of};

const TOPICS: &str = r#"
[defaults]
backoff = { base = "50ms", factor = 2.0, max = "1s", jitter = 0.0 }

[[topic]]
name = "echo"
handler = "echo.wasm"

[[topic]]
name = "flaky"
handler = "flaky.wasm"
max_attempts = 3

[[topic]]
name = "order_cancel"
handler = "order_cancel.wasm"
"#;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immediate_job_is_acked_and_deleted() {
    let project = Project::new("concurrency = 4", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = enqueue(&queue, "echo", "hello", 0, 0).await;
    let events = runner.until_settled("echo", &id, WAIT).await;
    let kinds = of(&events, "echo", &id);
    assert!(
        matches!(
            kinds[..],
            [
                EventKind::Started { .. },
                EventKind::Ran { .. },
                EventKind::Acked
            ]
        ),
        "{kinds:?}"
    );
    let stats = queue
        .stats(&queue.keys("echo"), hourglass::clock::now_ms())
        .await
        .unwrap();
    assert_eq!(
        (stats.scheduled, stats.ready, stats.running, stats.dead),
        (0, 0, 0, 0)
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_jobs_never_start_early_and_do_start() {
    let project = Project::new("concurrency = 8", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let mut ids = Vec::new();
    for delay in [300, 50, 700, 1200, 10, 450, 900, 1500] {
        ids.push(enqueue(&queue, "echo", "later", delay, 0).await);
    }
    let events = runner
        .until(WAIT, |seen| {
            ids.iter().all(|id| {
                seen.iter()
                    .any(|e| &e.id == id && e.kind == EventKind::Acked)
            })
        })
        .await;
    let mut lateness = Vec::new();
    for e in &events {
        if let EventKind::Started {
            due_at_ms,
            started_at_ms,
            ..
        } = e.kind
        {
            assert!(
                started_at_ms >= due_at_ms,
                "job {} started {} ms early",
                e.id,
                due_at_ms - started_at_ms
            );
            lateness.push(started_at_ms - due_at_ms);
        }
    }
    assert_eq!(lateness.len(), ids.len());
    lateness.sort();
    println!("lateness of delayed jobs (ms): {lateness:?}");
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaky_is_retried_with_rising_attempts_then_acked() {
    let project = Project::new("concurrency = 4", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = enqueue(&queue, "flaky", r#"{"fail_first":2}"#, 0, 0).await;
    let events = runner.until_settled("flaky", &id, WAIT).await;
    let attempts: Vec<(u32, &EventKind)> = events
        .iter()
        .filter(|e| {
            e.id == id && !matches!(e.kind, EventKind::Started { .. } | EventKind::Ran { .. })
        })
        .map(|e| (e.attempt, &e.kind))
        .collect();
    assert!(
        matches!(
            &attempts[..],
            [(1, EventKind::Retried { reason: r1, .. }), (2, EventKind::Retried { reason: r2, .. }), (3, EventKind::Acked)]
                if r1.contains("attempt 1") && r2.contains("attempt 2")
        ),
        "{attempts:?}"
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_retries_and_fail_are_dead_lettered_with_reason_and_attempts() {
    let project = Project::new("concurrency = 4", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let exhausted = enqueue(&queue, "flaky", r#"{"fail_first":10}"#, 0, 0).await;
    let failed = enqueue(
        &queue,
        "order_cancel",
        r#"{"order_id":7,"customer":"ada","amount_cents":0}"#,
        0,
        0,
    )
    .await;
    let garbage = enqueue(&queue, "order_cancel", "not json", 0, 0).await;
    runner
        .until(WAIT, |seen| {
            [
                ("flaky", &exhausted),
                ("order_cancel", &failed),
                ("order_cancel", &garbage),
            ]
            .iter()
            .all(|(t, id)| {
                seen.iter().any(|e| {
                    e.topic == *t && &e.id == *id && matches!(e.kind, EventKind::Dead { .. })
                })
            })
        })
        .await;
    let info = queue
        .dead()
        .info(&queue.keys("flaky"), &exhausted)
        .await
        .unwrap()
        .expect("dead letter stored");
    assert_eq!(info.attempts, 3);
    assert!(
        info.reason.contains("attempts exhausted (3/3)")
            && info.reason.contains("flaking on attempt 3"),
        "{info:?}"
    );
    let info = queue
        .dead()
        .info(&queue.keys("order_cancel"), &failed)
        .await
        .unwrap()
        .expect("dead letter stored");
    assert_eq!(info.attempts, 1, "fail skips the remaining attempts");
    assert!(info.reason.contains("order 7 has no amount"), "{info:?}");
    let info = queue
        .dead()
        .info(&queue.keys("order_cancel"), &garbage)
        .await
        .unwrap()
        .expect("dead letter stored");
    assert_eq!(
        info.attempts, 1,
        "a payload that does not parse is not retried"
    );
    assert!(info.reason.contains("JSON"), "{info:?}");
    assert_eq!(
        queue
            .stats(&queue.keys("flaky"), hourglass::clock::now_ms())
            .await
            .unwrap()
            .dead,
        1
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_jobs_across_topics_are_each_acked_once() {
    let project = Project::new("concurrency = 16", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let mut ids = Vec::new();
    for i in 0..300u64 {
        let (topic, payload) = if i % 2 == 0 {
            ("echo", format!("n{i}"))
        } else {
            (
                "order_cancel",
                format!(r#"{{"order_id":{i},"customer":"c{i}","amount_cents":100}}"#),
            )
        };
        let id = enqueue(&queue, topic, &payload, (i % 7) * 3, 0).await;
        ids.push((topic, id));
    }
    let mut events = runner
        .until(WAIT, |seen| {
            seen.iter().filter(|e| e.kind == EventKind::Acked).count() >= ids.len()
        })
        .await;
    // Redis empty, then every event sent until then is in
    events.extend(
        runner
            .after_drained(&queue, &["echo", "order_cancel"], WAIT)
            .await,
    );
    let mut acked: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e.kind == EventKind::Acked)
        .map(|e| (e.topic.as_str(), e.id.as_str()))
        .collect();
    acked.sort();
    let mut expected: Vec<(&str, &str)> = ids.iter().map(|(t, id)| (*t, id.as_str())).collect();
    expected.sort();
    assert_eq!(
        acked, expected,
        "every job of both topics acked exactly once"
    );
    let started = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Started { .. }))
        .count();
    assert_eq!(started, ids.len(), "every job started exactly once");
    runner.stop().await;
}
