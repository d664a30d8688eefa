//! Flows across a Redis failover with `durability`: the Sentinel primary is
//! SIGKILLed while the children of a flow complete, a replica is promoted,
//! and the parent still runs once, seeing every child's result (each step
//! of a flow was confirmed by a replica before the next was taken).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hourglass::events::EventKind;
use hourglass::redis::Standing;
use serde_json::json;
use test_support::sentinel::Replicated;

use crate::util::{Project, Running, assert_fan_in_result, fan_in, starts, until_flow_ended};

const CHILDREN: usize = 400;

const TOPICS: &str = r#"
[[topic]]
name = "child"
handler = "probe.wasm"
max_attempts = 50
backoff = { base = "100ms", max = "1s" }
results = { keep = "1h", max = "1MiB" }

[[topic]]
name = "parent"
handler = "probe.wasm"
max_attempts = 50
backoff = { base = "100ms", max = "1s" }
results = { keep = "1h", max = "1MiB" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durability_a_flow_survives_a_sentinel_failover_and_its_parent_runs_once() {
    let redis = tokio::task::spawn_blocking(|| Replicated::start(None))
        .await
        .unwrap();
    let project = Project::on_sentinel(
        redis.sentinel_urls(),
        None,
        "durability = { replicas = 1, timeout = \"250ms\" }",
        "concurrency = 16\nlease_margin = \"2s\"",
        TOPICS,
    );
    let redis = Arc::new(std::sync::Mutex::new(redis));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let child = |i| json!({"spin_ms": 2, "result": i});
    fan_in(&queue, "fo", CHILDREN, child, json!({"echo_deps": true})).await;
    until_flow_ended(&queue, "fo", CHILDREN / 3, Duration::from_secs(180)).await;
    let deadline = Instant::now() + Duration::from_secs(180);
    redis.lock().unwrap().kill_primary();
    let promoted = std::thread::spawn({
        let redis = redis.clone();
        move || {
            redis
                .lock()
                .unwrap()
                .until_promoted(Duration::from_secs(60))
        }
    });
    let events = runner
        .until(Duration::from_secs(180), |seen| {
            seen.iter()
                .any(|e| e.topic == "parent" && e.id == "fo/p" && crate::util::is_final(&e.kind))
        })
        .await;
    promoted.join().unwrap();
    // a connection of its own to the promoted primary
    let queue = project.queue().await;
    let events = [
        events,
        runner
            .after_drained(&queue, &["child", "parent"], Duration::from_secs(60))
            .await,
    ]
    .concat();
    assert_eq!(
        starts(&events, "parent", "fo/p"),
        1,
        "the parent ran more than once"
    );
    assert!(
        events
            .iter()
            .any(|e| e.id == "fo/p" && e.kind == EventKind::Acked),
        "the parent did not ack"
    );
    let end = loop {
        match queue.standing(&queue.keys("parent"), "fo/p").await {
            Ok(Standing::Ended(end)) => break end,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("fo/p: {other:?}"),
        }
    };
    assert_fan_in_result(&end, CHILDREN);
    runner.stop().await;
}
