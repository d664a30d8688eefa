//! Strict priority: with both topics backlogged, the higher one drains first.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::NewJob;

use crate::util::{Project, Running};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_higher_priority_topic_drains_first() {
    let topics = r#"
[[topic]]
name = "low"
handler = "echo.wasm"
priority = 1

[[topic]]
name = "high"
handler = "echo.wasm"
priority = 10
"#;
    let project = Project::new("concurrency = 2", topics);
    let queue = project.queue().await;
    let now = now_ms();
    // the low topic's jobs are older: FIFO alone would run them first
    for (topic, due) in [("low", now - 1000), ("high", now)] {
        let jobs: Vec<NewJob> = (0..50)
            .map(|i| NewJob {
                id: None,
                payload: format!("{i}").into_bytes(),
                due_at_ms: due,
                max_attempts: 0,
            })
            .collect();
        queue.enqueue(&queue.keys(topic), &jobs, now).await.unwrap();
    }
    let mut runner = Running::start(project.config()).await;
    let events = runner
        .until(Duration::from_secs(30), |seen| {
            seen.iter().filter(|e| e.kind == EventKind::Acked).count() == 100
        })
        .await;
    let starts: Vec<&str> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Started { .. }))
        .map(|e| e.topic.as_str())
        .collect();
    let last_high = starts.iter().rposition(|t| *t == "high").unwrap();
    let first_low = starts.iter().position(|t| *t == "low").unwrap();
    assert!(
        last_high < first_low,
        "a low job started before the high topic drained: {starts:?}"
    );
    runner.stop().await;
}
