//! Rolling out a handler version safely: a canary that fails every job is
//! rolled back before its window ends and costs no dead letter; a good one is
//! promoted when its window ends; two runner processes agree, and a runner
//! killed with SIGKILL mid-rollout resumes it; pins survive a restart and a
//! new file; dead letters replay on a chosen version; jobs pinned to a version.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::{Event, EventKind};
use hourglass::redis::{NewJob, Queue, Rollout, TopicKeys, TopicStats};
use test_support::components::{ECHO, FLAKY, ORDER_CANCEL, PROBE};

use crate::util::{
    Monitor, Project, RedisServer, RunnerProcess, Running, deploy, enqueue, eventually, hash_of,
    hourglass,
};

/// Acked by echo and flaky; order_cancel fails it for good (not its JSON:
/// "a typo in a field name"); probe acks it.
const JOB: &str = r#"{"fail_first":0}"#;
const WAIT: Duration = Duration::from_secs(60);

fn topic(rollout: &str) -> String {
    format!(
        "[[topic]]\nname = \"pay\"\nhandler = \"pay.wasm\"\nconcurrency = 8\nmax_attempts = 3\n\
         backoff = {{ base = \"20ms\", factor = 1.0, max = \"20ms\", jitter = 0.0 }}\n{rollout}\n"
    )
}

/// A steady load on `pay` (`per_tick` jobs every 10 ms) until the returned
/// flag is set: a verdict that needs a sample never waits for a producer
/// that already stopped (the machine may be slow). The task returns the ids.
fn produce_until_stopped(
    queue: &Queue,
    per_tick: usize,
) -> (
    tokio::task::JoinHandle<Vec<String>>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (queue, flag) = (queue.clone(), stop.clone());
    let task = tokio::spawn(async move {
        let keys = queue.keys("pay");
        let mut ids = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            tick.tick().await;
            let now = now_ms();
            let jobs: Vec<NewJob> = (ids.len()..ids.len() + per_tick)
                .map(|i| NewJob {
                    id: Some(format!("job-{i}")),
                    payload: JOB.as_bytes().to_vec(),
                    due_at_ms: now,
                    ..Default::default()
                })
                .collect();
            ids.extend(jobs.iter().filter_map(|j| j.id.clone()));
            queue.enqueue(&keys, &jobs, now).await.unwrap();
        }
        ids
    });
    (task, stop)
}

/// The rollout of `pay` once `wanted` holds.
async fn rollout_until(queue: &Queue, what: &str, wanted: impl Fn(&Rollout) -> bool) -> Rollout {
    eventually(WAIT, what, || async {
        let state = queue
            .rollouts()
            .get(&queue.keys("pay"))
            .await
            .map_err(|e| e.to_string())?;
        if wanted(&state) {
            Ok(state)
        } else {
            Err(format!("{state:?}"))
        }
    })
    .await
}

/// Wait until each of `runners` runners has sent `pay`'s rollout report
/// (`rollout_sync.lua`, every 250 ms while a rollout policy applies) `n`
/// times since `monitor` started. The first may have been on its way
/// already; the second was sent after the first was answered, so it counts
/// every attempt that ended before the monitor started, and the route the
/// first one asked for is in force by then.
async fn reports(monitor: &mut Monitor, keys: &TopicKeys, runners: usize, n: usize) {
    let mut by = HashMap::<String, usize>::new();
    let what = format!("{n} rollout reports from each of {runners} runners");
    monitor
        .call(WAIT, &what, |args| {
            // EVALSHA, its hash, 2 keys, then now, file, share, window, keep,
            // who, counts... (a verdict or a pin, rollout_set.lua, has 5 arguments)
            if let [cmd, _, nkeys, rollout, versions, _, _, _, _, _, who, ..] = args
                && cmd.eq_ignore_ascii_case("evalsha")
                && nkeys == "2"
                && *rollout == keys.rollout
                && *versions == keys.versions
            {
                *by.entry(who.clone()).or_default() += 1;
            }
            by.values().filter(|sent| **sent >= n).count() >= runners
        })
        .await;
}

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

/// The URL of the (one) redis-server `project` uses.
fn url_of(project: &Project) -> String {
    project.endpoint.urls()[0].clone()
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

/// Per job, the handler version of each attempt and how the job ended.
fn lives(events: &[Event]) -> HashMap<&str, (Vec<&str>, Vec<&EventKind>)> {
    let mut lives: HashMap<&str, (Vec<&str>, Vec<&EventKind>)> = HashMap::new();
    for e in events.iter().filter(|e| e.topic == "pay") {
        let life = lives.entry(&e.id).or_default();
        match &e.kind {
            EventKind::Started { handler, .. } => life.0.push(handler),
            EventKind::Ran { .. } => {}
            other => life.1.push(other),
        }
    }
    lives
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

/// Run `pay` jobs until one runs on `version` (a change reaching the runner).
async fn until_ran_on(runner: &mut Running, queue: &Queue, version: &str) {
    let runner = tokio::sync::Mutex::new(runner);
    eventually(WAIT, &format!("a job run on {version}"), || async {
        match ran_on(*runner.lock().await, queue).await {
            ran if ran == version => Ok(()),
            ran => Err(format!("run on {ran}")),
        }
    })
    .await;
}

/// Run one `pay` job; the version that ran it.
async fn ran_on(runner: &mut Running, queue: &Queue) -> String {
    let id = enqueue(queue, "pay", JOB, 0, 1).await;
    let events = runner.until_settled("pay", &id, WAIT).await;
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Started { handler, .. } if e.id == id => Some(handler.clone()),
            _ => None,
        })
        .expect("started")
}

fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_survives_a_restart_and_a_new_file_and_unpin_returns_to_the_file() {
    // no rollout policy: a new file replaces the old at once, as always
    let project = Project::new("concurrency = 4", &topic(""));
    let pay = project.handler("pay.wasm");
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    let (echo, flaky, probe) = (hash_of(ECHO), hash_of(FLAKY), hash_of(PROBE));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    assert_eq!(ran_on(&mut runner, &queue).await, echo);
    deploy(&pay, &std::fs::read(FLAKY).unwrap());
    until_ran_on(&mut runner, &queue, &flaky).await;

    let refused = hourglass(&project, &["pin", "pay", "0123456789abcdef"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("keeps no version 0123456789abcdef"));
    ok(hourglass(&project, &["pin", "pay", &echo]));
    until_ran_on(&mut runner, &queue, &echo).await;
    let listed: serde_json::Value =
        serde_json::from_str(&ok(hourglass(&project, &["versions", "pay", "--json"]))).unwrap();
    let role = |v: &str| {
        listed["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["version"] == v)
            .map(|x| x["role"].as_str().unwrap().to_owned())
    };
    assert_eq!(role(&echo).as_deref(), Some("pinned"), "{listed:#}");
    assert_eq!(role(&flaky).as_deref(), Some("stable"), "{listed:#}");

    // a restart and a new file: still pinned
    runner.stop().await;
    deploy(&pay, &std::fs::read(PROBE).unwrap());
    let mut runner = Running::start(project.config()).await;
    for _ in 0..5 {
        assert_eq!(
            ran_on(&mut runner, &queue).await,
            echo,
            "pinned across the restart"
        );
    }
    ok(hourglass(&project, &["unpin", "pay"]));
    until_ran_on(&mut runner, &queue, &probe).await;
    let again = hourglass(&project, &["unpin", "pay"]);
    assert_eq!(again.status.code(), Some(2), "not pinned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_of_a_bad_version_replay_on_the_old_one_and_pinned_jobs_run_on_theirs() {
    let project = Project::new("concurrency = 4", &topic(""));
    let pay = project.handler("pay.wasm");
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    let (echo, bad) = (hash_of(ECHO), hash_of(ORDER_CANCEL));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    assert_eq!(ran_on(&mut runner, &queue).await, echo);
    deploy(&pay, &std::fs::read(ORDER_CANCEL).unwrap());
    let mut dead = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while dead.len() < 5 {
        let id = enqueue(&queue, "pay", JOB, 0, 1).await;
        let events = runner.until_settled("pay", &id, WAIT).await;
        match crate::util::settled(&events, "pay", &id) {
            Err(reason) => {
                assert!(
                    reason.contains("payload is not the expected JSON"),
                    "{reason}"
                );
                assert!(events.iter().any(
                    |e| matches!(&e.kind, EventKind::Started { handler, .. } if *handler == bad)
                ));
                dead.push(id);
            }
            // still the old version: the swap had not reached it yet
            Ok(()) => assert!(
                tokio::time::Instant::now() < deadline,
                "the bad version never served"
            ),
        }
    }

    let out = ok(hourglass(
        &project,
        &["dead", "retry", "pay", "--all", "--version", &echo],
    ));
    assert!(out.contains(&format!("on version {echo}")), "{out}");
    let events = runner.after_drained(&queue, &["pay"], WAIT).await;
    let lives = lives(&events);
    let mut replayed = 0;
    for id in &dead {
        if let Some((versions, ends)) = lives.get(id.as_str()) {
            assert_eq!(versions, &vec![echo.as_str()], "{id} replayed on echo");
            assert_eq!(ends, &vec![&EventKind::Acked], "{id}");
            replayed += 1;
        }
    }
    assert!(replayed >= 5, "every dead letter replayed: {replayed}");

    // one job pinned at enqueue runs on its version; the file still says `bad`
    let out = ok(hourglass(
        &project,
        &[
            "enqueue",
            "pay",
            JOB,
            "--id",
            "pinned-1",
            "--version",
            &echo,
        ],
    ));
    assert!(out.contains("pinned-1"), "{out}");
    let events = runner.until_settled("pay", "pinned-1", WAIT).await;
    assert_eq!(crate::util::settled(&events, "pay", "pinned-1"), Ok(()));
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Started { handler, .. } if *handler == echo))
    );
    // a version nobody keeps: refused by the CLI, and a job pinned to it anyway fails clearly
    let refused = hourglass(
        &project,
        &["enqueue", "pay", JOB, "--version", "0123456789abcdef"],
    );
    assert_eq!(refused.status.code(), Some(2));
    let keys = queue.keys("pay");
    let orphan = NewJob {
        id: Some("orphan".into()),
        payload: JOB.as_bytes().to_vec(),
        due_at_ms: now_ms(),
        version: Some("0123456789abcdef".into()),
        ..Default::default()
    };
    queue.enqueue(&keys, &[orphan], now_ms()).await.unwrap();
    let events = runner.until_settled("pay", "orphan", WAIT).await;
    let reason = crate::util::settled(&events, "pay", "orphan").unwrap_err();
    assert!(
        reason.contains("pinned to handler version 0123456789abcdef"),
        "{reason}"
    );
    let shown = ok(hourglass(&project, &["inspect", "pay", "orphan"]));
    assert!(
        shown.contains("handler version 0123456789abcdef"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_without_the_canarys_file_serves_the_stable_version() {
    let project = Project::new(
        "concurrency = 4",
        &topic(r#"rollout = { canary = "50%", for = "1h", min_attempts = 1000 }"#),
    );
    deploy(&project.handler("pay.wasm"), &std::fs::read(ECHO).unwrap());
    let stable = hash_of(ECHO);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    rollout_until(&queue, "echo recorded as stable", |r| {
        r.stable.as_deref() == Some(&stable)
    })
    .await;
    // another runner (on another machine) reports a new file: a canary this one lacks
    let elsewhere = "0123456789abcdef";
    let policy = hourglass::redis::Policy {
        share: 0.5,
        window_ms: 3_600_000,
    };
    let keys = queue.keys("pay");
    let state = queue
        .rollouts()
        .sync(
            &keys,
            now_ms(),
            Some(elsewhere),
            Some(policy),
            5,
            "elsewhere",
            &[],
            &[],
        )
        .await
        .unwrap();
    assert_eq!(state.canary.map(|c| c.version).as_deref(), Some(elsewhere));
    // this runner has seen the canary in a report and routes by it
    let mut monitor = Monitor::start(&url_of(&project)).await;
    reports(&mut monitor, &keys, 1, 2).await;
    drop(monitor);
    for _ in 0..20 {
        assert_eq!(ran_on(&mut runner, &queue).await, stable);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_beyond_keep_versions_are_forgotten_on_disk_and_in_redis() {
    let project = Project::new("concurrency = 4\nkeep_versions = 2", &topic(""));
    let pay = project.handler("pay.wasm");
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    let (echo, flaky, probe) = (hash_of(ECHO), hash_of(FLAKY), hash_of(PROBE));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    assert_eq!(ran_on(&mut runner, &queue).await, echo);
    for (component, version) in [(FLAKY, &flaky), (PROBE, &probe)] {
        deploy(&pay, &std::fs::read(component).unwrap());
        until_ran_on(&mut runner, &queue, version).await;
    }
    let kept_files = |dir: &std::path::Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".wasm"))
            .collect();
        names.sort();
        names
    };
    let dir = project.dir.path().join(".hourglass/versions");
    let mut expected = vec![format!("{flaky}.wasm"), format!("{probe}.wasm")];
    expected.sort();
    // pruned once the kept versions are known to hold no job (a read of
    // Redis), so a moment after the newest one first runs
    eventually(
        WAIT,
        "the newest two on disk, outside handlers_dir",
        || async {
            match kept_files(&dir) {
                files if files == expected => Ok(()),
                files => Err(format!("{files:?}")),
            }
        },
    )
    .await;
    // the newest two, newest first
    let newest = vec![probe.clone(), flaky.clone()];
    eventually(WAIT, "the newest two versions in redis", || async {
        let (_, v) = queue
            .rollouts()
            .versions(&queue.keys("pay"))
            .await
            .map_err(|e| e.to_string())?;
        let v: Vec<String> = v.into_iter().map(|v| v.version).collect();
        if v == newest {
            Ok(())
        } else {
            Err(format!("{v:?}"))
        }
    })
    .await;
    let refused = hourglass(&project, &["pin", "pay", &echo]);
    assert_eq!(refused.status.code(), Some(2), "echo is no longer kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_bad_canary_is_rolled_back_and_a_pin_holds() {
    let cluster = test_support::RedisCluster::start();
    let project = Project::on_cluster(
        cluster.urls(),
        "concurrency = 8",
        &topic(
            r#"rollout = { canary = "20%", for = "1h", min_attempts = 10, max_failure_rate = 0.2 }"#,
        ),
    );
    let pay = project.handler("pay.wasm");
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    let (stable, bad) = (hash_of(ECHO), hash_of(ORDER_CANCEL));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    rollout_until(&queue, "echo recorded as stable", |r| {
        r.stable.as_deref() == Some(&stable)
    })
    .await;
    let (producer, stop) = produce_until_stopped(&queue, 3);
    deploy(&pay, &std::fs::read(ORDER_CANCEL).unwrap());
    let after = rollout_until(&queue, "the canary rolled back", |r| {
        r.last
            .as_ref()
            .is_some_and(|v| v.result == "rolled_back" && v.version == bad)
    })
    .await;
    assert_eq!(after.stable.as_deref(), Some(stable.as_str()));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let ids = producer.await.unwrap();
    let events = runner.after_drained(&queue, &["pay"], WAIT).await;
    let lives = lives(&events);
    for id in &ids {
        let (versions, ends) = &lives[id.as_str()];
        assert_eq!(ends.last(), Some(&&EventKind::Acked), "{id}: {ends:?}");
        assert_eq!(versions.last(), Some(&stable.as_str()), "{id}");
    }
    let listed = ok(hourglass(&project, &["versions", "pay", "--json"]));
    assert!(listed.contains(r#""role":"retired""#), "{listed}");
    ok(hourglass(&project, &["pin", "pay", &bad]));
    until_ran_on(&mut runner, &queue, &bad).await;
    ok(hourglass(&project, &["unpin", "pay"]));
    // the file still holds the retired version: the stable one serves again
    until_ran_on(&mut runner, &queue, &stable).await;
}
