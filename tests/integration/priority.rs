//! Strict priority: with both topics backlogged, the higher one drains first.

use std::time::Duration;

use crate::util::{Project, Running, backlog, start_order};
use hourglass::clock::now_ms;
use hourglass::events::EventKind;

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
    backlog(&queue, &["low"], 50, now - 1000).await;
    backlog(&queue, &["high"], 50, now).await;
    let mut runner = Running::start(project.config()).await;
    let events = runner
        .until(Duration::from_secs(30), |seen| {
            seen.iter().filter(|e| e.kind == EventKind::Acked).count() == 100
        })
        .await;
    let starts = start_order(&events);
    let last_high = starts.iter().rposition(|t| *t == "high").unwrap();
    let first_low = starts.iter().position(|t| *t == "low").unwrap();
    assert!(
        last_high < first_low,
        "a low job started before the high topic drained: {starts:?}"
    );
    runner.stop().await;
}
