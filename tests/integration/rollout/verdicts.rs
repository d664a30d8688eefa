//! A canary's verdict: rolled back in its window, promoted at its end, one
//! verdict followed by two runner processes, resumed after a SIGKILL.

use crate::util::{
    Monitor, Project, RedisServer, RunnerProcess, Running, deploy, enqueue, eventually, hash_of,
};
use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::{Queue, TopicStats};
use std::sync::Arc;
use std::time::Duration;
use test_support::components::{ECHO, FLAKY, ORDER_CANCEL, PROBE};

use super::*;

/// Wait until `left` says nothing of `pay` is left (`what`), then until each
/// of `runners` runners has reported what it ran ([`reports`]).
async fn all_reported(
    queue: &Queue,
    url: &str,
    runners: usize,
    what: &str,
    left: impl Fn(&TopicStats) -> u64,
) {
    let keys = queue.keys("pay");
    eventually(WAIT, what, || async {
        match queue
            .stats(&keys, now_ms())
            .await
            .map_err(|e| e.to_string())?
        {
            s if left(&s) == 0 => Ok(()),
            s => Err(format!("{s:?}")),
        }
    })
    .await;
    let mut monitor = Monitor::start(url).await;
    reports(&mut monitor, &keys, runners, 2).await;
}

/// A project whose `pay` topic has `rollout` and serves echo, with a runner
/// in this process, once Redis records echo as the stable version.
async fn serving_echo(runner_lines: &str, rollout: &str) -> (Project, Running, Queue) {
    let project = Project::new(runner_lines, &topic(rollout));
    deploy(&project.handler("pay.wasm"), &std::fs::read(ECHO).unwrap());
    let runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let stable = hash_of(ECHO);
    rollout_until(&queue, "echo recorded as stable", |r| {
        r.stable.as_deref() == Some(&stable)
    })
    .await;
    (project, runner, queue)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_failing_every_job_is_rolled_back_in_its_window_and_no_job_dies() {
    let (project, mut runner, queue) = serving_echo(
        "concurrency = 8",
        r#"rollout = { canary = "10%", for = "60s", min_attempts = 20, max_failure_rate = 0.2 }"#,
    )
    .await;
    let pay = project.handler("pay.wasm");
    let (stable, bad) = (hash_of(ECHO), hash_of(ORDER_CANCEL));

    // a load until the verdict: compiling the new file can take seconds on
    // a loaded machine, and a canary with nothing to run is never judged
    let (producer, stop) = produce_until_stopped(&queue, 5);
    // the load runs on the stable version before the new file comes
    let mut events = runner
        .until(WAIT, |seen| seen.iter().any(|e| e.kind == EventKind::Acked))
        .await;
    deploy(&pay, &std::fs::read(ORDER_CANCEL).unwrap());
    let started = rollout_until(&queue, "the bad version as a canary", |r| {
        r.canary.as_ref().is_some_and(|c| c.version == bad)
    })
    .await
    .canary
    .unwrap();
    let after = rollout_until(&queue, "the canary rolled back", |r| r.canary.is_none()).await;
    let verdict = after.last.clone().expect("a verdict");
    assert_eq!(
        (verdict.result.as_str(), verdict.version.as_str()),
        ("rolled_back", bad.as_str())
    );
    assert!(
        verdict.at_ms < started.ends_ms,
        "rolled back before its window ended: {verdict:?}"
    );
    assert_eq!(after.stable.as_deref(), Some(stable.as_str()));
    assert!(after.retired.contains(&bad), "{after:?}");
    // a rolled-back version is not rolled out again while the file holds it:
    // the runner's next report (of that file) leaves no canary
    let mut monitor = Monitor::start(&url_of(&project)).await;
    reports(&mut monitor, &queue.keys("pay"), 1, 1).await;
    drop(monitor);
    let later = queue.rollouts().get(&queue.keys("pay")).await.unwrap();
    assert!(later.canary.is_none(), "{later:?}");

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let ids = producer.await.unwrap();
    events.extend(runner.after_drained(&queue, &["pay"], WAIT).await);
    let lives = lives(&events);
    let mut on_canary = 0;
    let mut first_canary_start = u64::MAX;
    for e in &events {
        if let EventKind::Started {
            handler,
            started_at_ms,
            ..
        } = &e.kind
            && *handler == bad
        {
            first_canary_start = first_canary_start.min(*started_at_ms);
            // a route change reaches the scheduler at once; in flight by then at most
            assert!(
                *started_at_ms <= verdict.at_ms + 1_000,
                "canary attempt after the verdict"
            );
        }
    }
    for id in &ids {
        let (versions, ends) = &lives[id.as_str()];
        on_canary += versions.iter().filter(|v| **v == bad).count();
        let acks = ends.iter().filter(|k| ***k == EventKind::Acked).count();
        assert_eq!(acks, 1, "{id}: acked once: {ends:?}");
        assert!(
            !ends.iter().any(|k| matches!(k, EventKind::Dead { .. })),
            "{id} died: {ends:?}"
        );
        assert_eq!(
            versions.last(),
            Some(&stable.as_str()),
            "{id} acked on the stable version"
        );
    }
    assert!(on_canary >= 20, "the canary served its sample: {on_canary}");
    let attempts: usize = lives.values().map(|(versions, _)| versions.len()).sum();
    assert!(
        on_canary * 4 < attempts,
        "about a tenth of attempts, not all: {on_canary} of {attempts}"
    );
    let dead = queue
        .stats(&queue.keys("pay"), now_ms())
        .await
        .unwrap()
        .dead;
    assert_eq!(dead, 0);
    eprintln!(
        "first canary attempt to rollback verdict: {} ms ({on_canary} canary attempts)",
        verdict.at_ms - first_canary_start
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_canary_is_promoted_when_its_window_ends_and_then_serves_everything() {
    let (project, mut runner, queue) = serving_echo(
        "concurrency = 8",
        r#"rollout = { canary = "30%", for = "2s", min_attempts = 20, max_failure_rate = 0.2 }"#,
    )
    .await;
    let pay = project.handler("pay.wasm");
    let good = hash_of(FLAKY);
    let (producer, stop) = produce_until_stopped(&queue, 5);
    deploy(&pay, &std::fs::read(FLAKY).unwrap());
    let canary = rollout_until(&queue, "the good version as a canary", |r| {
        r.canary.as_ref().is_some_and(|c| c.version == good)
    })
    .await
    .canary
    .unwrap();
    let after = rollout_until(&queue, "the canary promoted", |r| {
        r.last.as_ref().is_some_and(|v| v.result == "promoted")
    })
    .await;
    let verdict = after.last.unwrap();
    assert_eq!(verdict.version, good);
    assert!(
        verdict.at_ms >= canary.ends_ms,
        "not before the window ended: {verdict:?}"
    );
    assert_eq!(after.stable.as_deref(), Some(good.as_str()));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer.await.unwrap();
    runner.after_drained(&queue, &["pay"], WAIT).await;

    // afterwards every attempt runs it
    let ids: Vec<String> = {
        let mut ids = Vec::new();
        for _ in 0..50 {
            ids.push(enqueue(&queue, "pay", JOB, 0, 1).await);
        }
        ids
    };
    let events = runner.after_drained(&queue, &["pay"], WAIT).await;
    let lives = lives(&events);
    for id in &ids {
        assert_eq!(lives[id.as_str()].0, vec![good.as_str()], "{id}");
    }
}

/// A project on a server the test owns, with `pay.wasm` = echo.
fn project_on(redis: &RedisServer, topic: &str) -> Project {
    let project = Project::with_redis(redis.url(), "concurrency = 8", topic);
    deploy(&project.handler("pay.wasm"), &std::fs::read(ECHO).unwrap());
    project
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runner_processes_follow_one_verdict_reached_from_failures_on_one() {
    let redis = RedisServer::start();
    // a low bar: b's acks with the canary (however many it ran before a
    // loaded it) must not keep a's failures under it
    let policy =
        r#"rollout = { canary = "30%", for = "1h", min_attempts = 20, max_failure_rate = 0.05 }"#;
    // the canary (probe, reading PATH) fails on `a`, whose topic has no grant
    // for it, and acks on `b`, whose topic has
    let a = project_on(&redis, &topic(policy));
    let b = project_on(
        &redis,
        &format!("{}grants = {{ env = [\"PATH\"] }}\n", topic(policy)),
    );
    let (stable, canary) = (hash_of(ECHO), hash_of(PROBE));
    let mut runner_a = RunnerProcess::start(&a);
    let mut runner_b = RunnerProcess::start(&b);
    let queue = a.queue().await;
    rollout_until(&queue, "echo recorded as stable", |r| {
        r.stable.as_deref() == Some(&stable)
    })
    .await;
    let probe_job = r#"{"env":"PATH"}"#;
    // jobs keep coming until the verdict (a loaded machine may take seconds
    // to compile the new file on each runner), then 200 more
    let verdict = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (queue, verdict) = (queue.clone(), verdict.clone());
        tokio::spawn(async move {
            let mut after = 0;
            while after < 200 {
                enqueue(&queue, "pay", probe_job, 0, 0).await;
                // the load's pace, not a wait for anything
                tokio::time::sleep(Duration::from_millis(5)).await;
                if verdict.load(std::sync::atomic::Ordering::Relaxed) {
                    after += 1;
                }
            }
        })
    };
    let tally = |queue: Queue| async move {
        let (_, versions) = queue.rollouts().versions(&queue.keys("pay")).await.unwrap();
        versions
            .into_iter()
            .find(|v| v.version == hash_of(PROBE))
            .map(|v| v.tally)
            .unwrap_or_default()
    };
    // b gets the canary first and acks with it before a gets it too: else a's
    // failures could reach the verdict before b's watcher saw the new file
    deploy(&b.handler("pay.wasm"), &std::fs::read(PROBE).unwrap());
    eventually(WAIT, "b ran the canary", || async {
        match tally(queue.clone()).await {
            t if t.attempts > 0 => Ok(()),
            t => Err(format!("{t:?}")),
        }
    })
    .await;
    deploy(&a.handler("pay.wasm"), &std::fs::read(PROBE).unwrap());
    let after = rollout_until(&queue, "the canary rolled back", |r| {
        r.last.as_ref().is_some_and(|v| v.result == "rolled_back")
    })
    .await;
    assert_eq!(after.last.as_ref().unwrap().version, canary);
    verdict.store(true, std::sync::atomic::Ordering::Relaxed);
    // both runners say so, and both stop routing to it: its count stops
    runner_a.logged("rolled back", WAIT).await;
    runner_b.logged("rolled back", WAIT).await;
    // its count with every attempt begun by now in it: the topic paused
    // until nothing runs, and each runner's reports since
    let (keys, url) = (queue.keys("pay"), redis.url());
    queue.admin().set_paused(&keys, true).await.unwrap();
    all_reported(&queue, &url, 2, "nothing running", |s| s.running).await;
    let settled = tally(queue.clone()).await;
    assert!(settled.failures > 0, "the canary failed on a: {settled:?}");
    assert!(
        settled.attempts > settled.failures,
        "and acked on b: {settled:?}"
    );
    queue.admin().set_paused(&keys, false).await.unwrap();
    // the 200 jobs enqueued after the verdict have all run, and each runner
    // has reported what it ran
    producer.await.unwrap();
    all_reported(&queue, &url, 2, "every job run", |s| {
        s.ready + s.scheduled + s.running
    })
    .await;
    assert_eq!(
        tally(queue.clone()).await,
        settled,
        "no canary attempt after the verdict"
    );
    let dead = queue
        .stats(&queue.keys("pay"), now_ms())
        .await
        .unwrap()
        .dead;
    assert_eq!(dead, 0, "a bad canary costs retries, not dead letters");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_mid_rollout_resumes_it_after_a_restart() {
    let redis = RedisServer::start();
    let project = project_on(
        &redis,
        &topic(
            r#"rollout = { canary = "50%", for = "6s", min_attempts = 10, max_failure_rate = 0.2 }"#,
        ),
    );
    let good = hash_of(FLAKY);
    let runner = RunnerProcess::start(&project);
    let queue = project.queue().await;
    rollout_until(&queue, "echo recorded as stable", |r| {
        r.stable.as_deref() == Some(&hash_of(ECHO))
    })
    .await;
    let (producer, stop) = produce_until_stopped(&queue, 3);
    deploy(&project.handler("pay.wasm"), &std::fs::read(FLAKY).unwrap());
    let before = rollout_until(&queue, "the canary under way", |r| {
        r.canary
            .as_ref()
            .is_some_and(|c| c.version == good && c.tally.attempts >= 5)
    })
    .await
    .canary
    .unwrap();
    runner.kill();
    let held = queue
        .rollouts()
        .get(&queue.keys("pay"))
        .await
        .unwrap()
        .canary
        .expect("still rolled out");
    assert_eq!(
        (held.started_ms, held.ends_ms),
        (before.started_ms, before.ends_ms)
    );
    let restarted = RunnerProcess::start(&project);
    let resumed = queue.rollouts().get(&queue.keys("pay")).await.unwrap();
    let resumed_canary = resumed.canary.expect("resumed, not restarted");
    assert_eq!(
        resumed_canary.started_ms, before.started_ms,
        "the same window"
    );
    assert!(
        resumed_canary.tally.attempts >= held.tally.attempts,
        "counts kept"
    );
    let after = rollout_until(&queue, "promoted after the restart", |r| {
        r.last.as_ref().is_some_and(|v| v.result == "promoted")
    })
    .await;
    assert!(after.last.unwrap().at_ms >= before.ends_ms);
    assert_eq!(after.stable.as_deref(), Some(good.as_str()));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer.await.unwrap();
    drop(restarted);
}
