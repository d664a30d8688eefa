//! Faults: a runner killed under load, redis-server restarted under load,
//! Redis unreachable at start and for a minute mid-run, SIGTERM with jobs in
//! flight. Every job is accounted for by the files the probe handler leaves,
//! one per execution (`<id>.<attempt>`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::{Enqueued, NewJob, Queue, TopicStats};

use crate::util::{Project, RedisServer, Running, hourglass_bin};

fn topics(data: &Path, extra: &str) -> String {
    format!(
        r#"
[[topic]]
name = "work"
handler = "probe.wasm"
{extra}
grants = {{ dirs = [{{ host = "{}", guest = "/data", write = true }}] }}
"#,
        data.display()
    )
}

const TOUCH: &str = r#"{"touch":"/data","spin_ms":2}"#;

fn job(id: String, due_at_ms: u64) -> NewJob {
    NewJob {
        id: Some(id),
        payload: TOUCH.into(),
        due_at_ms,
        max_attempts: 0,
        ..Default::default()
    }
}

/// Executions per job id, from the files the probe left.
fn executions(data: &Path) -> BTreeMap<String, Vec<u32>> {
    let mut runs: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for entry in std::fs::read_dir(data).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let (id, attempt) = name.rsplit_once('.').unwrap();
        runs.entry(id.to_owned())
            .or_default()
            .push(attempt.parse().unwrap());
    }
    runs
}

async fn stats(queue: &Queue) -> TopicStats {
    queue.stats(&queue.keys("work"), now_ms()).await.unwrap()
}

/// Poll until `done` holds of the topic's counts (or panic after `within`).
async fn until_stats(queue: &Queue, within: Duration, done: impl Fn(&TopicStats) -> bool) {
    let deadline = Instant::now() + within;
    loop {
        match queue.stats(&queue.keys("work"), now_ms()).await {
            Ok(s) if done(&s) => return,
            Ok(s) => assert!(Instant::now() < deadline, "still {s:?} after {within:?}"),
            Err(e) => assert!(Instant::now() < deadline, "redis: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn drained(s: &TopicStats) -> bool {
    s.scheduled + s.ready + s.running == 0
}

/// `hourglass run` as a child process logging to `log`.
fn spawn_runner(project: &Project, log: &Path) -> Child {
    Command::new(hourglass_bin())
        .args(["run", "--config"])
        .arg(project.config_path())
        // the scheduler's debug lines show each retry of a failed claim
        .env(
            "RUST_LOG",
            "info,wasmtime=warn,cranelift=warn,hourglass::worker::scheduler=debug",
        )
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// Wait until the runner's log contains `text` (the runner must stay alive).
async fn until_logged(runner: &mut Child, log: &Path, text: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let seen = std::fs::read_to_string(log).unwrap_or_default();
        if seen.contains(text) {
            return;
        }
        assert!(
            runner.try_wait().unwrap().is_none(),
            "the runner exited; log:\n{seen}"
        );
        assert!(
            Instant::now() < deadline,
            "{text:?} not logged within {within:?}; log:\n{seen}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_under_load_loses_nothing_and_only_jobs_in_flight_run_twice() {
    let data = tempfile::tempdir().unwrap();
    let project = Project::new(
        "concurrency = 8\nlease_margin = \"300ms\"",
        &topics(data.path(), "timeout = \"2s\""),
    );
    let queue = project.queue().await;
    let n = 2000;
    let jobs: Vec<NewJob> = (0..n).map(|i| job(format!("j{i}"), 0)).collect();
    queue
        .enqueue(&queue.keys("work"), &jobs, now_ms())
        .await
        .unwrap();

    let log = project.dir.path().join("first.log");
    let mut first = spawn_runner(&project, &log);
    until_stats(&queue, Duration::from_secs(60), |s| s.ready < 1400).await;
    first.kill().unwrap(); // SIGKILL, mid-stream
    first.wait().unwrap();
    let in_flight = stats(&queue).await.running;
    assert!(
        in_flight >= 2,
        "the kill should catch several jobs in flight, caught {in_flight}"
    );

    let second = Running::start(project.config()).await;
    until_stats(&queue, Duration::from_secs(60), drained).await;
    second.stop().await;

    let runs = executions(data.path());
    let missing: Vec<_> = (0..n)
        .map(|i| format!("j{i}"))
        .filter(|id| !runs.contains_key(id))
        .collect();
    assert!(missing.is_empty(), "never ran: {missing:?}");
    let twice: Vec<_> = runs.iter().filter(|(_, a)| a.len() > 1).collect();
    assert!(
        twice.len() as u64 <= in_flight,
        "{} jobs ran twice but only {in_flight} were in flight: {twice:?}",
        twice.len()
    );
    assert!(runs.values().all(|a| a.len() <= 2), "a job ran three times");
    assert_eq!(stats(&queue).await.dead, 0);
    println!(
        "killed with {in_flight} in flight; {n} jobs, {} ran twice, 0 lost",
        twice.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_under_load_loses_no_acknowledged_enqueue() {
    let store = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut redis = RedisServer::persistent(store.path());
    let project = Project::with_redis(
        redis.url(),
        "concurrency = 8\nlease_margin = \"300ms\"",
        &topics(data.path(), "timeout = \"2s\""),
    );
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;

    // a producer that retries each enqueue until it is acknowledged, noting
    // what it was told while Redis was away
    let producer = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let keys = queue.keys("work");
            let (mut acknowledged, mut refused) = (Vec::new(), Vec::new());
            let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
            for i in 0..1500 {
                let id = format!("r{i}");
                // every tenth job is delayed past the restart
                let due = if i % 10 == 0 { now_ms() + 1500 } else { 0 };
                loop {
                    match queue
                        .enqueue(&keys, &[job(id.clone(), due)], now_ms())
                        .await
                    {
                        Ok(answer) => {
                            assert!(matches!(
                                answer[..],
                                [Enqueued::New(_) | Enqueued::Duplicate(_)]
                            ));
                            acknowledged.push(id);
                            break;
                        }
                        Err(e) => {
                            assert!(
                                tokio::time::Instant::now() < give_up,
                                "redis never came back for the producer: {e}"
                            );
                            refused.push(e);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (acknowledged, refused)
        })
    };
    runner
        .until(Duration::from_secs(60), |seen| {
            seen.iter().filter(|e| e.kind == EventKind::Acked).count() >= 300
        })
        .await;
    redis.stop(); // a crash: SIGKILL
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.resume();
    let (acknowledged, refused) = producer.await.unwrap();
    // the outage was visible to the producer, as errors it can retry on
    assert!(!refused.is_empty(), "the producer never noticed the outage");
    assert!(
        refused.iter().all(|e| e.is_retryable()),
        "an outage must read as retryable: {:?}",
        refused.iter().map(|e| e.to_string()).collect::<Vec<_>>()
    );
    until_stats(&queue, Duration::from_secs(60), drained).await;
    runner.stop().await;

    let runs = executions(data.path());
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|id| !runs.contains_key(*id))
        .collect();
    assert!(lost.is_empty(), "acknowledged but never ran: {lost:?}");
    assert_eq!(stats(&queue).await.dead, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_unreachable_at_start_and_for_a_minute_mid_run_the_runner_waits_and_recovers() {
    let store = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut redis = RedisServer::persistent(store.path());
    let project = Project::with_redis(redis.url(), "concurrency = 4", &topics(data.path(), ""));
    redis.stop();

    // at start: it waits, says so once, and does not exit
    let log = project.dir.path().join("runner.log");
    let mut runner = spawn_runner(&project, &log);
    until_logged(&mut runner, &log, "waiting for it", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.resume();
    until_logged(
        &mut runner,
        &log,
        "hourglass running",
        Duration::from_secs(60),
    )
    .await;
    let queue = project.queue().await;
    let keys = queue.keys("work");
    let first: Vec<NewJob> = (0..20).map(|i| job(format!("a{i}"), 0)).collect();
    queue.enqueue(&keys, &first, now_ms()).await.unwrap();
    until_stats(&queue, Duration::from_secs(30), drained).await;

    // mid-run: jobs due during a one-minute outage run after it
    let during: Vec<NewJob> = (0..20)
        .map(|i| job(format!("b{i}"), now_ms() + 2_000 + i * 2_000))
        .collect();
    queue.enqueue(&keys, &during, now_ms()).await.unwrap();
    redis.stop();
    let outage = Instant::now();
    until_logged(
        &mut runner,
        &log,
        "claiming failed",
        Duration::from_secs(30),
    )
    .await;
    while outage.elapsed() < Duration::from_secs(60) {
        assert!(
            runner.try_wait().unwrap().is_none(),
            "the runner exited during the outage"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    redis.resume();
    until_logged(
        &mut runner,
        &log,
        "reachable again",
        Duration::from_secs(30),
    )
    .await;
    until_stats(&queue, Duration::from_secs(30), drained).await;
    let after: Vec<NewJob> = (0..20).map(|i| job(format!("c{i}"), 0)).collect();
    queue.enqueue(&keys, &after, now_ms()).await.unwrap();
    until_stats(&queue, Duration::from_secs(30), drained).await;
    runner.kill().unwrap();
    runner.wait().unwrap();

    let runs = executions(data.path());
    for prefix in ["a", "b", "c"] {
        for i in 0..20 {
            assert!(
                runs.contains_key(&format!("{prefix}{i}")),
                "{prefix}{i} never ran"
            );
        }
    }
    // the outage is said once when it starts and once when it ends, and the
    // runner waits between tries (backoff up to 2 s), not spins
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("claiming failed: ").count(), 1, "{text}");
    assert_eq!(text.matches("reachable again").count(), 1, "{text}");
    let retries = text.matches("claiming failed again, retrying in").count();
    assert!(
        (10..=60).contains(&retries),
        "{retries} claim retries in a 60 s outage: with backoff up to 2 s there are about 35\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_jobs_in_flight_finishes_what_it_can_and_releases_the_rest_at_once() {
    let data = tempfile::tempdir().unwrap();
    let project = Project::new(
        "concurrency = 4\nshutdown_grace = \"1s\"",
        &topics(data.path(), "timeout = \"30s\""),
    );
    let queue = project.queue().await;
    let keys = queue.keys("work");
    let short = NewJob {
        id: Some("short".into()),
        payload: r#"{"spin_ms":300,"touch":"/data"}"#.into(),
        due_at_ms: 0,
        max_attempts: 0,
        ..Default::default()
    };
    let long = NewJob {
        id: Some("long".into()),
        payload: r#"{"spin_ms":20000}"#.into(),
        due_at_ms: 0,
        max_attempts: 0,
        ..Default::default()
    };
    let log = project.dir.path().join("runner.log");
    let mut runner = spawn_runner(&project, &log);
    until_logged(
        &mut runner,
        &log,
        "hourglass running",
        Duration::from_secs(30),
    )
    .await;
    queue
        .enqueue(&keys, &[short, long], now_ms())
        .await
        .unwrap();
    until_stats(&queue, Duration::from_secs(10), |s| s.running == 2).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = runner.wait().unwrap();
    assert!(status.success(), "{status}");
    let s = stats(&queue).await;
    assert_eq!(
        (s.running, s.ready, s.dead),
        (0, 1, 0),
        "the long job is ready again at once, not leased until its lease expires"
    );
    assert!(
        executions(data.path()).contains_key("short"),
        "the short job finished"
    );
    let view = queue
        .inspect(&keys, "long", now_ms())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.attempts, 0, "a released attempt is not counted");
}
