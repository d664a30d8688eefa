//! Priority within a topic: among its due jobs a higher priority (0 is the
//! highest) starts first, equal priorities keep due order, and no priority
//! starts a job before it is due. What priorities keep in Redis goes with
//! their jobs.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::{Event, EventKind};
use hourglass::redis::{NewJob, Queue};

use test_support::RedisCluster;

use crate::util::{Project, Running};

const WAIT: Duration = Duration::from_secs(60);

const TOPICS: &str = r#"
[[topic]]
name = "mail"
handler = "echo.wasm"

[[topic]]
name = "flaky"
handler = "flaky.wasm"
backoff = { base = "1h", jitter = 0.0 }
"#;

fn job(id: &str, due_at_ms: u64, priority: u8) -> NewJob {
    NewJob {
        id: Some(id.into()),
        payload: b"{}".to_vec(),
        due_at_ms,
        priority,
        ..Default::default()
    }
}

async fn put(queue: &Queue, jobs: &[NewJob]) {
    queue
        .enqueue(&queue.keys("mail"), jobs, now_ms())
        .await
        .unwrap();
}

/// The ids of the attempts started, in order, with when each started.
fn started(events: &[Event]) -> Vec<(&str, u64)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Started { started_at_ms, .. } => Some((e.id.as_str(), *started_at_ms)),
            _ => None,
        })
        .collect()
}

fn acked(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Acked))
        .count()
}

/// Keys of the topic's priorities left in Redis.
async fn priority_keys(project: &Project, queue: &Queue) -> Vec<String> {
    let keys = queue.keys("mail");
    let mut conn = redis::Client::open(project.endpoint.urls()[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let found: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:p*", keys.pending))
        .query_async(&mut conn)
        .await
        .unwrap();
    // each priority's counter of bucket names stays, as the time index's does
    found
        .into_iter()
        .filter(|k| !k.ends_with(":next"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_urgent_jobs_start_before_a_thousand_earlier_ones() {
    // one at a time: with more, two attempts claimed together may tell
    // their starts in either order
    let project = Project::new("concurrency = 1", TOPICS);
    let queue = project.queue().await;
    let now = now_ms();
    // the low ones are older: due order alone would run every one of them first
    let low: Vec<NewJob> = (0..1_000)
        .map(|i| job(&format!("low{i}"), now - 10_000 + i, 5))
        .collect();
    put(&queue, &low).await;
    let high: Vec<NewJob> = (0..10)
        .map(|i| job(&format!("high{i}"), now + i, 0))
        .collect();
    put(&queue, &high).await;
    let stats = queue.stats(&queue.keys("mail"), now_ms()).await.unwrap();
    assert_eq!(
        stats.ready, 1_010,
        "every priority counts as ready: {stats:?}"
    );
    let mut runner = Running::start(project.config()).await;
    let events = runner.until(WAIT, |seen| acked(seen) >= 1_010).await;
    runner.stop().await;
    let order: Vec<&str> = started(&events).into_iter().map(|(id, _)| id).collect();
    let first_ten: Vec<&str> = order[..10].to_vec();
    assert!(
        first_ten.iter().all(|id| id.starts_with("high")),
        "the 10 urgent ones start first: {first_ten:?}"
    );
    // equal priorities keep due order
    let highs: Vec<&str> = order
        .iter()
        .copied()
        .filter(|i| i.starts_with("high"))
        .collect();
    let expected: Vec<String> = (0..10).map(|i| format!("high{i}")).collect();
    assert_eq!(highs, expected);
    let lows: Vec<usize> = order
        .iter()
        .filter_map(|id| id.strip_prefix("low"))
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(
        lows.windows(2).all(|w| w[0] < w[1]),
        "low ones in due order"
    );
    assert!(
        priority_keys(&project, &queue).await.is_empty(),
        "nothing of the priorities is left once their jobs ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_never_starts_a_job_before_it_is_due() {
    let project = Project::new("concurrency = 1", TOPICS);
    let queue = project.queue().await;
    let now = now_ms();
    let low: Vec<NewJob> = (0..2_000)
        .map(|i| job(&format!("low{i}"), now, 9))
        .collect();
    put(&queue, &low).await;
    put(&queue, &[job("soon", now + 700, 0)]).await;
    let mut runner = Running::start(project.config()).await;
    let events = runner.until(WAIT, |seen| acked(seen) >= 2_001).await;
    runner.stop().await;
    let order = started(&events);
    let (at, when) = order
        .iter()
        .enumerate()
        .find_map(|(i, (id, t))| (*id == "soon").then_some((i, *t)))
        .unwrap();
    assert!(when >= now + 700, "started {} ms early", now + 700 - when);
    assert!(at > 0, "the low ones due now ran while it was not due");
    // once due it goes ahead of the low ones still waiting
    let lows_left = order[at + 1..]
        .iter()
        .filter(|(id, _)| id.starts_with("low"))
        .count();
    assert!(
        lows_left > 0,
        "it should come before the low backlog ends: at #{at}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_and_expiry_hold_on_a_cluster() {
    let cluster = RedisCluster::start();
    let topics = format!("{TOPICS}\n[[topic]]\nname = \"codes\"\nhandler = \"echo.wasm\"\n");
    let project = Project::on_cluster(cluster.urls(), "concurrency = 1", &topics);
    let queue = project.queue().await;
    let now = now_ms();
    let low: Vec<NewJob> = (0..200)
        .map(|i| job(&format!("low{i}"), now - 1_000, 4))
        .collect();
    put(&queue, &low).await;
    put(&queue, &[job("high", now, 0)]).await;
    let late = NewJob {
        expires_at_ms: Some(now + 200),
        ..job("late", now, 0)
    };
    queue
        .enqueue(&queue.keys("codes"), &[late], now)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut runner = Running::start(project.config()).await;
    let events = runner
        .until(WAIT, |seen| {
            acked(seen) >= 201
                && seen
                    .iter()
                    .any(|e| e.id == "late" && matches!(e.kind, EventKind::Expired { .. }))
        })
        .await;
    runner.stop().await;
    let order: Vec<&str> = started(&events)
        .into_iter()
        .filter(|(id, _)| *id != "late")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(order[0], "high", "{:?}", &order[..5]);
    assert!(!started(&events).iter().any(|(id, _)| *id == "late"));
    let stats = queue.stats(&queue.keys("codes"), now_ms()).await.unwrap();
    assert_eq!(stats.expired, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_keeps_its_priority_through_a_retry_and_a_dead_letter() {
    let project = Project::new("concurrency = 2", TOPICS);
    let queue = project.queue().await;
    let keys = queue.keys("flaky");
    let mut runner = Running::start(project.config()).await;
    let failing = |id: &str, max_attempts| NewJob {
        payload: br#"{"fail_first": 5}"#.to_vec(),
        max_attempts,
        ..job(id, now_ms(), 6)
    };
    let jobs = [failing("retried", 5), failing("dead", 1)];
    queue.enqueue(&keys, &jobs, now_ms()).await.unwrap();
    runner
        .until(WAIT, |seen| {
            let any = |id: &str, dead: bool| {
                seen.iter().any(|e| {
                    e.id == id
                        && match &e.kind {
                            EventKind::Retried { .. } => !dead,
                            EventKind::Dead { .. } => dead,
                            _ => false,
                        }
                })
            };
            any("retried", false) && any("dead", true)
        })
        .await;
    runner.stop().await;
    for id in ["retried", "dead"] {
        let view = queue.inspect(&keys, id, now_ms()).await.unwrap().unwrap();
        assert_eq!(view.priority, 6, "{id}: {view:?}");
    }
    let again = queue.dead().retry(&keys, &["dead".into()], now_ms()).await;
    assert_eq!(again.unwrap(), ["dead"]);
    let view = queue
        .inspect(&keys, "dead", now_ms())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.priority, 6);
    // both wait on priority 6's own index
    let mut conn = redis::Client::open(project.endpoint.urls()[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let buckets: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{}:p6", keys.pending))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut waiting = Vec::new();
    for b in buckets {
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(format!("{}:p6:{b}", keys.pending))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        waiting.extend(ids);
    }
    waiting.sort();
    assert_eq!(waiting, ["dead", "retried"]);
}
