//! The same pipeline on a local three-master Redis Cluster: delay, retry,
//! dead-letter, priority, follow-ups across slots, lease recovery, and two
//! runners sharing topics without running a job twice.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::{JobState, NewJob};
use test_support::RedisCluster;

use crate::util::{
    Project, RUNNER_LOG, RunnerProcess, Running, backlog, enqueue, eventually, of, start_order,
    until_running,
};

const WAIT: Duration = Duration::from_secs(30);

const TOPICS: &str = r#"
[defaults]
backoff = { base = "50ms", jitter = 0.0 }

[[topic]]
name = "echo"
handler = "echo.wasm"

[[topic]]
name = "flaky"
handler = "flaky.wasm"
max_attempts = 3

[[topic]]
name = "panic"
handler = "panic.wasm"
max_attempts = 1

[[topic]]
name = "parent"
handler = "probe.wasm"
may_enqueue = ["child"]

[[topic]]
name = "child"
handler = "echo.wasm"

[[topic]]
name = "low"
handler = "echo.wasm"
priority = 1

[[topic]]
name = "high"
handler = "echo.wasm"
priority = 10
"#;

/// Keys per node, so a test can show its topics spread over the masters.
fn keys_per_node(cluster: &RedisCluster) -> Vec<u64> {
    cluster
        .nodes
        .iter()
        .map(|n| {
            let out = Command::new("redis-cli")
                .args(["-p", &n.port.to_string(), "dbsize"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_retry_dead_letter_priority_and_follow_ups_work_on_a_cluster() {
    let cluster = RedisCluster::start();
    let project = Project::on_cluster(cluster.urls(), "concurrency = 1", TOPICS);
    let queue = project.queue().await;

    // priority: both backlogged before the runner starts
    backlog(&queue, &["low", "high"], 10, now_ms()).await;
    let mut runner = Running::start(project.config()).await;
    let events = runner
        .until(WAIT, |seen| {
            seen.iter().filter(|e| e.kind == EventKind::Acked).count() == 20
        })
        .await;
    let order = start_order(&events);
    assert_eq!(order, [vec!["high"; 10], vec!["low"; 10]].concat());

    let delayed = enqueue(&queue, "echo", "later", 300, 0).await;
    let flaky = enqueue(&queue, "flaky", r#"{"fail_first":2}"#, 0, 0).await;
    let dead = enqueue(&queue, "panic", "x", 0, 0).await;
    let parent = enqueue(
        &queue,
        "parent",
        r#"{"follow_ups":[{"topic":"child","payload":"hi","id":"kid"}]}"#,
        0,
        0,
    )
    .await;
    let events = runner
        .until(WAIT, |seen| {
            [
                ("echo", &delayed),
                ("flaky", &flaky),
                ("panic", &dead),
                ("parent", &parent),
            ]
            .iter()
            .all(|(t, id)| {
                seen.iter().any(|e| {
                    e.topic == *t
                        && e.id == **id
                        && matches!(e.kind, EventKind::Acked | EventKind::Dead { .. })
                })
            }) && seen
                .iter()
                .any(|e| e.topic == "child" && e.id == "kid" && e.kind == EventKind::Acked)
        })
        .await;
    for e in &events {
        if let EventKind::Started {
            due_at_ms,
            started_at_ms,
            ..
        } = e.kind
        {
            assert!(started_at_ms >= due_at_ms, "{} started early", e.id);
        }
    }
    let flaky_runs: Vec<u32> = events
        .iter()
        .filter(|e| {
            e.topic == "flaky" && e.id == flaky && matches!(e.kind, EventKind::Started { .. })
        })
        .map(|e| e.attempt)
        .collect();
    assert_eq!(flaky_runs, [1, 2, 3]);
    assert_eq!(
        of(&events, "flaky", &flaky).last(),
        Some(&&EventKind::Acked)
    );
    let view = queue
        .inspect(&queue.keys("panic"), &dead, now_ms())
        .await
        .unwrap()
        .unwrap();
    match view.state {
        JobState::Dead(info) => assert!(info.reason.contains("handler panicked"), "{info:?}"),
        other => panic!("not dead: {other:?}"),
    }
    runner.stop().await;

    let spread = keys_per_node(&cluster);
    assert!(
        spread.iter().filter(|n| **n > 0).count() >= 2,
        "the topics should live on several masters: keys per node {spread:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_mid_job_on_a_cluster_loses_nothing() {
    let cluster = RedisCluster::start();
    let project = Project::on_cluster(
        cluster.urls(),
        "concurrency = 2\nlease_margin = \"300ms\"",
        "[[topic]]\nname = \"slow\"\nhandler = \"slow.wasm\"\ntimeout = \"2s\"\n",
    );
    let queue = project.queue().await;
    let id = enqueue(&queue, "slow", r#"{"spin_ms":800}"#, 0, 0).await;
    let mut first = RunnerProcess::launch(&project, RUNNER_LOG);
    until_running(&mut first, &queue, "slow", WAIT).await;
    first.kill(); // SIGKILL, mid-job
    let mut second = Running::start(project.config()).await;
    let events = second.until_settled("slow", &id, WAIT).await;
    assert_eq!(
        of(&events, "slow", &id).last(),
        Some(&&EventKind::Acked),
        "{events:?}"
    );
    assert!(events.iter().any(|e| e.id == id && e.attempt == 2));
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runners_share_topics_on_a_cluster_and_run_every_job_once() {
    let cluster = RedisCluster::start();
    let data = tempfile::tempdir().unwrap();
    let topics: String = ["a", "b", "c"]
        .iter()
        .map(|t| {
            format!(
                "[[topic]]\nname = \"{t}\"\nhandler = \"probe.wasm\"\ngrants = {{ dirs = [{{ host = \"{}\", guest = \"/data\", write = true }}] }}\n\n",
                data.path().display()
            )
        })
        .collect();
    // two slots each and 5 ms a job: neither runner can hold the work alone,
    // so both take some whatever the timing (no chance involved)
    let project = Project::on_cluster(cluster.urls(), "concurrency = 2", &topics);
    let queue = project.queue().await;
    let mut one = Running::start(project.config()).await;
    let mut two = Running::start(project.config()).await;
    let n = 600;
    for (i, topic) in ["a", "b", "c"].iter().enumerate() {
        let jobs: Vec<NewJob> = (0..n / 3)
            .map(|j| NewJob {
                id: Some(format!("{topic}-{}", i * 1000 + j)),
                payload: br#"{"touch":"/data","spin_ms":5}"#.to_vec(),
                due_at_ms: 0,
                max_attempts: 0,
                ..Default::default()
            })
            .collect();
        queue
            .enqueue(&queue.keys(topic), &jobs, now_ms())
            .await
            .unwrap();
    }
    eventually(WAIT, "every job ran", || async {
        match std::fs::read_dir(data.path()).unwrap().count() {
            ran if ran >= n => Ok(()),
            ran => Err(format!("{ran} of {n} ran")),
        }
    })
    .await;
    let mut acked = BTreeMap::new();
    for (name, runner) in [("one", &mut one), ("two", &mut two)] {
        let mut count = 0;
        while let Ok(e) = runner.events.try_recv() {
            if e.kind == EventKind::Acked {
                count += 1;
            }
        }
        acked.insert(name, count);
    }
    one.stop().await;
    two.stop().await;
    let files: Vec<String> = std::fs::read_dir(data.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files.len(), n, "each job ran exactly once");
    assert!(
        files.iter().all(|f| f.ends_with(".1")),
        "no job needed a second attempt"
    );
    assert!(
        acked.values().all(|n| *n > 0),
        "both runners should have taken work: {acked:?}"
    );
    println!("two runners on a 3-master cluster: {acked:?} of {n} jobs, each once");
}
