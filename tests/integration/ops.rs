//! Operating commands: cancel, dead list/retry/purge, pause/resume, and
//! dead-letter retention enforced without new burials.

use std::process::Output;
use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::config::DeadLetter;
use hourglass::events::EventKind;
use hourglass::redis::{Burial, DeadInfo, JobState, NewJob, Queue};

use crate::util::{Project, RedisServer, Running, enqueue, hourglass, of};

const WAIT: Duration = Duration::from_secs(20);

const TOPICS: &str = r#"
[defaults]
max_attempts = 1

[[topic]]
name = "echo"
handler = "echo.wasm"

[[topic]]
name = "panic"
handler = "panic.wasm"

[[topic]]
name = "slow"
handler = "slow.wasm"
timeout = "10s"
"#;

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_deletes_waiting_running_and_dead_jobs_and_a_running_one_does_not_come_back() {
    let project = Project::new("concurrency = 4\nlease_margin = \"200ms\"", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let waiting = enqueue(&queue, "echo", "x", 3_600_000, 0).await;
    let dead = enqueue(&queue, "panic", "x", 0, 0).await;
    runner.until_settled("panic", &dead, WAIT).await;
    let running = enqueue(&queue, "slow", r#"{"spin_ms":1000}"#, 0, 0).await;
    runner
        .until(WAIT, |seen| {
            seen.iter()
                .any(|e| e.id == running && matches!(e.kind, EventKind::Started { .. }))
        })
        .await;

    let out = stdout(&hourglass(&project, &["cancel", "echo", &waiting]));
    assert!(out.contains("it was waiting"), "{out}");
    let out = stdout(&hourglass(&project, &["cancel", "panic", &dead]));
    assert!(out.contains("it was a dead letter"), "{out}");
    let out = stdout(&hourglass(&project, &["cancel", "slow", &running]));
    assert!(out.contains("it was running"), "{out}");
    let out = hourglass(&project, &["cancel", "echo", "no-such-job"]);
    assert_eq!(out.status.code(), Some(1));

    // the running attempt finishes; its ack is discarded and nothing remains
    let marker = enqueue(&queue, "slow", r#"{"spin_ms":1500}"#, 0, 0).await;
    let events = runner.until_settled("slow", &marker, WAIT).await;
    assert!(
        !of(&events, "slow", &running).contains(&&EventKind::Acked),
        "a cancelled job's outcome was committed: {events:?}"
    );
    for (topic, id) in [("echo", &waiting), ("panic", &dead), ("slow", &running)] {
        assert!(
            queue
                .inspect(&queue.keys(topic), id, now_ms())
                .await
                .unwrap()
                .is_none(),
            "{topic}/{id} survived its cancel"
        );
    }
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_retried_with_fresh_attempts_and_purged() {
    let project = Project::new("concurrency = 4", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = enqueue(&queue, "panic", "x", 0, 0).await;
        runner.until_settled("panic", &id, WAIT).await;
        ids.push(id);
    }

    let list = stdout(&hourglass(&project, &["dead", "list", "panic"]));
    assert!(list.starts_with("3 dead letters in panic"), "{list}");
    assert!(
        list.contains("handler panicked") && list.contains("attempts  1"),
        "{list}"
    );
    let json = stdout(&hourglass(
        &project,
        &["dead", "list", "panic", "--json", "--limit", "1"],
    ));
    let newest: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(newest["id"], ids[2].as_str(), "newest first");

    // retry one: it runs again as attempt 1 (and dies again: a panic handler)
    let out = stdout(&hourglass(&project, &["dead", "retry", "panic", &ids[0]]));
    assert!(out.contains("requeued 1"), "{out}");
    let events = runner.until_settled("panic", &ids[0], WAIT).await;
    assert!(
        events.iter().any(|e| e.id == ids[0]
            && e.attempt == 1
            && matches!(e.kind, EventKind::Started { .. })),
        "a retried dead letter starts over at attempt 1: {events:?}"
    );

    let out = hourglass(&project, &["dead", "purge", "panic"]);
    assert_eq!(out.status.code(), Some(2), "purge needs ids or --all");
    let out = stdout(&hourglass(&project, &["dead", "purge", "panic", "--all"]));
    assert!(out.contains("purged 3"), "{out}");
    let stats = queue.stats(&queue.keys("panic"), now_ms()).await.unwrap();
    assert_eq!(stats.dead, 0);
    assert!(
        queue
            .inspect(&queue.keys("panic"), &ids[1], now_ms())
            .await
            .unwrap()
            .is_none(),
        "purged with its payload"
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_topic_accepts_jobs_and_claims_none_until_resumed() {
    let project = Project::new("concurrency = 4", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let out = stdout(&hourglass(&project, &["pause", "echo"]));
    assert!(out.contains("paused echo"), "{out}");
    let held = enqueue(&queue, "echo", "x", 0, 0).await;
    // the runner is claiming: a later job of another topic runs
    let other = enqueue(&queue, "slow", r#"{"spin_ms":0}"#, 0, 0).await;
    let events = runner.until_settled("slow", &other, WAIT).await;
    assert!(
        of(&events, "echo", &held).is_empty(),
        "a paused topic ran a job"
    );
    let stats = stdout(&hourglass(&project, &["stats"]));
    let row = stats.lines().find(|l| l.starts_with("echo")).unwrap();
    assert!(
        row.contains("(paused)") && row.split_whitespace().nth(2) == Some("1"),
        "{stats}"
    );

    let out = stdout(&hourglass(&project, &["resume", "echo"]));
    assert!(out.contains("resumed echo"), "{out}");
    runner.until_settled("echo", &held, WAIT).await;
    runner.stop().await;
}

#[tokio::test]
async fn dead_letter_retention_by_age_is_enforced_without_new_burials() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let job = NewJob {
        id: Some("old".into()),
        payload: b"p".to_vec(),
        due_at_ms: 0,
        max_attempts: 0,
        ..Default::default()
    };
    q.enqueue(&k, &[job], 0).await.unwrap();
    let claimed = q.pipeline().claim(&k, 1, 1_000, 1).await.unwrap();
    let retention = DeadLetter {
        keep: 100,
        max_age: Duration::from_secs(60),
    };
    let info = DeadInfo {
        reason: "boom".into(),
        attempts: 1,
        failed_at_ms: 10,
        handler: None,
        costs: Vec::new(),
        expires_at_ms: None,
    };
    q.pipeline()
        .bury(
            &k,
            &[Burial {
                logs: String::new(),
                notice: None,
                expired: None,
                end: None,
                id: "old".into(),
                attempt: claimed.jobs[0].attempt,
                info,
            }],
            retention,
            10,
            Default::default(),
        )
        .await
        .unwrap();
    q.pipeline()
        .bury(&k, &[], retention, 60_009, Default::default())
        .await
        .unwrap();
    let view = q.inspect(&k, "old", 60_009).await.unwrap().unwrap();
    assert!(matches!(view.state, JobState::Dead(_)), "not yet 60 s old");
    q.pipeline()
        .bury(&k, &[], retention, 60_011, Default::default())
        .await
        .unwrap();
    assert!(
        q.inspect(&k, "old", 60_011).await.unwrap().is_none(),
        "dropped with its payload once older than max_age"
    );
}
