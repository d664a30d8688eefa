//! Losing a runner: SIGKILL mid-job, and graceful shutdown.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::EventKind;

use crate::util::{Project, RUNNER_LOG, RunnerProcess, Running, enqueue, until_running};

const TOPICS: &str = r#"
[[topic]]
name = "slow"
handler = "slow.wasm"
timeout = "4s"
max_attempts = 3
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_mid_job_loses_nothing() {
    let project = Project::new("concurrency = 4\nlease_margin = \"500ms\"", TOPICS);
    let queue = project.queue().await;
    let mut first = RunnerProcess::launch(&project, RUNNER_LOG);
    let id = enqueue(&queue, "slow", r#"{"spin_ms":1500}"#, 0, 0).await;
    let keys = queue.keys("slow");
    until_running(&mut first, &queue, "slow", Duration::from_secs(30)).await;
    first.kill(); // SIGKILL, mid-job
    assert_eq!(
        queue.stats(&keys, now_ms()).await.unwrap().running,
        1,
        "the job is still leased to the dead runner"
    );

    let mut second = Running::start(project.config()).await;
    let events = second
        .until_settled("slow", &id, Duration::from_secs(30))
        .await;
    let mine: Vec<(u32, &EventKind)> = events
        .iter()
        .filter(|e| e.id == id)
        .map(|e| (e.attempt, &e.kind))
        .collect();
    assert!(
        matches!(
            &mine[..],
            [
                (2, EventKind::Started { .. }),
                (2, EventKind::Ran { .. }),
                (2, EventKind::Acked)
            ]
        ),
        "the second runner runs attempt 2 after the lease expires: {mine:?}"
    );
    let stats = queue.stats(&keys, now_ms()).await.unwrap();
    assert_eq!(
        (stats.ready, stats.scheduled, stats.running, stats.dead),
        (0, 0, 0, 0)
    );
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_short_jobs_finish_and_releases_the_rest_uncounted() {
    let project = Project::new("concurrency = 4\nshutdown_grace = \"700ms\"", TOPICS);
    let queue = project.queue().await;
    let mut runner = Running::start(project.config()).await;
    let short = enqueue(&queue, "slow", r#"{"spin_ms":200}"#, 0, 0).await;
    let endless = enqueue(&queue, "slow", "{}", 0, 0).await;
    runner
        .until(Duration::from_secs(20), |seen| {
            [&short, &endless].iter().all(|id| {
                seen.iter()
                    .any(|e| &&e.id == id && matches!(e.kind, EventKind::Started { .. }))
            })
        })
        .await;
    let mut after = runner.events.resubscribe();
    runner.stop().await;
    // the release is reported like every other state change
    let mut released = Vec::new();
    while let Ok(e) = after.try_recv() {
        if e.kind == EventKind::Released {
            released.push(e.id);
        }
    }
    assert_eq!(
        released,
        std::slice::from_ref(&endless),
        "the stopped job's release is an event"
    );
    let keys = queue.keys("slow");
    let stats = queue.stats(&keys, now_ms()).await.unwrap();
    assert_eq!(
        (stats.running, stats.ready, stats.dead),
        (0, 1, 0),
        "only the endless job is left, released"
    );
    let claimed = queue
        .pipeline()
        .claim(&keys, now_ms(), now_ms() + 1000, 10)
        .await
        .unwrap();
    assert_eq!(claimed.jobs.len(), 1);
    assert_eq!(claimed.jobs[0].id, endless);
    assert_eq!(
        claimed.jobs[0].attempt, 1,
        "a released attempt is not counted"
    );
}
