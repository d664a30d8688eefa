//! Losing the Redis primary: a producer enqueues jobs by id while a runner
//! works through them, the primary is killed with SIGKILL, Redis Sentinel
//! promotes a replica, and both carry on by themselves. Counted: ids
//! answered `new` that never ran (none with `durability`), ids run more than
//! once, and the time from the kill to the first ack on the new primary.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hourglass::clock::now_ms;
use hourglass::events::{Event, EventKind};
use hourglass::redis::{Enqueued, NewJob, QueueError};
use test_support::sentinel::Replicated;
use tokio::sync::broadcast::error::TryRecvError;

use crate::util::{Project, Running};

const TOPICS: &str = r#"
[[topic]]
name = "echo"
handler = "echo.wasm"
max_attempts = 50
backoff = { base = "100ms", max = "1s" }
"#;

const JOBS: usize = 20_000;
const CONCURRENCY: usize = 32;

/// What one failover did to the jobs.
struct Count {
    /// Ids the producer was told are live (`new`, or `duplicate` after a retry).
    answered: HashSet<String>,
    /// Ids answered live that never started.
    lost: Vec<String>,
    /// Ids started more than once.
    twice: usize,
    /// Enqueue calls that failed and were repeated.
    producer_errors: usize,
    /// From the kill to the first ack of a job enqueued after it (so on the new primary).
    recovery: Duration,
}

/// The `[redis]` line that turns durability on (or nothing).
fn durability(on: bool) -> &'static str {
    if on {
        "durability = { replicas = 1, timeout = \"250ms\" }"
    } else {
        ""
    }
}

/// `[runner]` for the failover runs.
fn runner_lines() -> String {
    format!("concurrency = {CONCURRENCY}\nlease_margin = \"2s\"")
}

/// One failover run at a time: each moves 20,000 jobs through several
/// redis-servers on two cores, and two at once starve the other tests.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A primary, two replicas, three sentinels; the primary killed.
async fn on_sentinel(durable: bool) -> Count {
    let _alone = ONE_AT_A_TIME.lock().await;
    let redis = tokio::task::spawn_blocking(|| Replicated::start(None))
        .await
        .unwrap();
    let project = Project::on_sentinel(
        redis.sentinel_urls(),
        None,
        durability(durable),
        &runner_lines(),
        TOPICS,
    );
    let redis = Arc::new(std::sync::Mutex::new(redis));
    failover(&project, {
        let redis = redis.clone();
        move || {
            redis.lock().unwrap().kill_primary();
            std::thread::spawn(move || {
                redis
                    .lock()
                    .unwrap()
                    .until_promoted(Duration::from_secs(60));
            })
        }
    })
    .await
}

/// Three masters with a replica each; the master of the topic's slot killed.
/// With one replica per master, the promoted replica has none left: with
/// durability its shard refuses writes until the killed node is back (it
/// rejoins as a replica), so here it is restarted once the failover is done.
async fn on_cluster(durable: bool) -> Count {
    let _alone = ONE_AT_A_TIME.lock().await;
    let cluster = tokio::task::spawn_blocking(|| test_support::RedisCluster::with_replicas(1))
        .await
        .unwrap();
    let project =
        Project::on_cluster_lines(cluster.urls(), durability(durable), &runner_lines(), TOPICS);
    let cluster = Arc::new(std::sync::Mutex::new(cluster));
    failover(&project, {
        let cluster = cluster.clone();
        move || {
            let key = "test:{echo}:pending";
            let dead = {
                let mut c = cluster.lock().unwrap();
                let dead = c.master_of(key);
                c.nodes[dead].stop();
                dead
            };
            std::thread::spawn(move || {
                let promoted =
                    cluster
                        .lock()
                        .unwrap()
                        .until_failed_over(key, dead, Duration::from_secs(60));
                eprintln!("cluster: node {promoted} serves the topic now");
                if durable {
                    cluster.lock().unwrap().nodes[dead].resume();
                }
            })
        }
    })
    .await
}

/// Jobs waiting or running in the topic, if Redis answers.
async fn left(queue: &hourglass::redis::Queue) -> Option<u64> {
    let s = queue.stats(&queue.keys("echo"), now_ms()).await.ok()?;
    Some(s.ready + s.scheduled + s.running)
}

/// Take in one event of the run: the attempts started per id, and the time
/// from the kill to the first ack of a job enqueued after it.
fn record(
    event: Event,
    started: &mut HashMap<String, Vec<u32>>,
    first_ack_after_kill: &mut Option<Duration>,
    killed_at: Option<Instant>,
    first_after_kill: usize,
) {
    match event.kind {
        EventKind::Started { .. } => started.entry(event.id).or_default().push(event.attempt),
        EventKind::Acked => {
            let index: usize = event.id["job-".len()..].parse().unwrap();
            if let Some(at) = killed_at
                && first_ack_after_kill.is_none()
                && index >= first_after_kill
            {
                *first_ack_after_kill = Some(at.elapsed());
            }
        }
        _ => {}
    }
}

/// Produce JOBS jobs by id and run them; call `kill` halfway (it returns a
/// thread that waits for the failover, and heals if it must).
async fn failover(project: &Project, kill: impl FnOnce() -> std::thread::JoinHandle<()>) -> Count {
    let config = project.config();
    let mut runner = Running::start(config.clone()).await;
    // the test's own look at Redis, following the failover like the others
    let probe = hourglass::redis::connect(&config).await.unwrap().0;
    let mut kill = Some(kill);
    let mut failed_over = None;

    // the producer: its own connection, as queues.toml says (durability included)
    let (queue, _) = hourglass::redis::connect(&config).await.unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let producer = tokio::spawn({
        let sent = sent.clone();
        async move {
            let keys = queue.keys("echo");
            let (mut answered, mut errors) = (HashSet::new(), 0);
            let ids: Vec<String> = (0..JOBS).map(|i| format!("job-{i}")).collect();
            for chunk in ids.chunks(20) {
                let jobs: Vec<NewJob> = chunk
                    .iter()
                    .map(|id| NewJob {
                        id: Some(id.clone()),
                        payload: b"{}".to_vec(),
                        due_at_ms: now_ms(),
                        max_attempts: 50,
                        // a retried enqueue must not add a job that already
                        // ran: the id stays taken for an hour, not only while live
                        unique_for_ms: 3_600_000,
                        ..Default::default()
                    })
                    .collect();
                // enqueue by id is idempotent: repeat until answered
                loop {
                    match queue.enqueue(&keys, &jobs, now_ms()).await {
                        Ok(answers) => {
                            for a in answers {
                                match a {
                                    Enqueued::New(id) | Enqueued::Duplicate(id) => {
                                        answered.insert(id)
                                    }
                                    other => panic!("unexpected answer {other:?}"),
                                };
                            }
                            break;
                        }
                        Err(e) => {
                            assert!(e.is_retryable(), "a failover error is retryable: {e}");
                            if errors == 0 || matches!(e, QueueError::NotReplicated { .. }) {
                                eprintln!("producer: {e}");
                            }
                            errors += 1;
                            // a producer's pause before it tries again, as a
                            // real one would: part of the scenario, not a wait
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
                sent.fetch_add(chunk.len(), Ordering::Relaxed);
            }
            (answered, errors)
        }
    });

    // the kill, once half the jobs are answered
    let mut started: HashMap<String, Vec<u32>> = HashMap::new();
    let mut first_ack_after_kill = None;
    let mut killed_at = None;
    // ids from this one on were enqueued after the kill, so on the new primary
    let mut first_after_kill = usize::MAX;
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut producer = Some(producer);
    let mut outcome = None;
    loop {
        if killed_at.is_none() && sent.load(Ordering::Relaxed) >= JOBS / 2 {
            failed_over = Some(kill.take().unwrap()());
            killed_at = Some(Instant::now());
            first_after_kill = sent.load(Ordering::Relaxed) + 20;
            eprintln!(
                "primary killed after {} jobs answered",
                sent.load(Ordering::Relaxed)
            );
        }
        if let Some(p) = &producer
            && p.is_finished()
        {
            outcome = Some(producer.take().unwrap().await.unwrap());
        }
        assert!(
            Instant::now() < deadline,
            "the failover run took over 240 s; left to run: {:?}",
            left(&probe).await
        );
        let mut take = |event| {
            record(
                event,
                &mut started,
                &mut first_ack_after_kill,
                killed_at,
                first_after_kill,
            )
        };
        match tokio::time::timeout(Duration::from_millis(50), runner.events.recv()).await {
            Ok(Ok(event)) => take(event),
            Ok(Err(e)) => panic!("events: {e}"),
            // no event for a moment: look at Redis (not once per event). Done
            // once the producer finished and nothing is left there to run: no
            // attempt starts after that, and each that started sent its
            // Started before its end left Redis, so an id answered and not
            // started once those are read never runs
            Err(_) => {
                if outcome.is_some() && left(&probe).await == Some(0) {
                    loop {
                        match runner.events.try_recv() {
                            Ok(event) => take(event),
                            Err(TryRecvError::Empty) => break,
                            Err(e) => panic!("events: {e}"),
                        }
                    }
                    break;
                }
            }
        }
    }
    let (answered, producer_errors) = outcome.expect("the producer finished");
    // lost: told it was enqueued, never started (an ack whose answer was lost
    // in the failover, found done by its retry, has no Acked event: it ran)
    let mut lost: Vec<String> = answered
        .iter()
        .filter(|id| !started.contains_key(*id))
        .cloned()
        .collect();
    lost.sort();
    // what Redis says of each: still there (not run in time) or gone
    let keys = probe.keys("echo");
    for id in lost.iter_mut() {
        let state = match probe.inspect(&keys, id, now_ms()).await {
            Ok(Some(view)) => format!("{:?}", view.state),
            Ok(None) => "gone".to_owned(),
            Err(e) => format!("unreadable: {e}"),
        };
        *id = format!("{id} ({state})");
    }
    let twice = started.values().filter(|n| n.len() > 1).count();
    let mut repeated: Vec<String> = started
        .iter()
        .filter(|(_, n)| n.len() > 1)
        .map(|(id, n)| format!("{id} {n:?}"))
        .collect();
    repeated.sort();
    if !repeated.is_empty() {
        eprintln!(
            "run more than once (attempts): {:?}",
            &repeated[..repeated.len().min(10)]
        );
    }
    failed_over
        .expect("the primary was killed")
        .join()
        .expect("the failover happened");
    runner.stop().await;
    Count {
        answered,
        lost,
        twice,
        producer_errors,
        recovery: first_ack_after_kill.expect("a job was acked after the kill"),
    }
}

impl Count {
    /// Say what the run counted; with `durable`, no job answered may be
    /// lost and only attempts in flight may repeat; without, the producer
    /// still got every answer and the loss stays within what lag explains.
    fn check(&self, what: &str, durable: bool) {
        println!(
            "{what}: {} ids answered, {} answered but never ran, {} run more than once, {} enqueue calls repeated, first ack {:.2}s after the kill",
            self.answered.len(),
            self.lost.len(),
            self.twice,
            self.producer_errors,
            self.recovery.as_secs_f64()
        );
        assert_eq!(
            self.answered.len(),
            JOBS,
            "the producer followed the failover"
        );
        if durable {
            assert!(
                self.lost.is_empty(),
                "ids answered new that never ran: {:?}",
                &self.lost[..self.lost.len().min(20)]
            );
            assert!(
                self.twice <= 2 * CONCURRENCY,
                "only attempts in flight at the kill may repeat: {} ran twice",
                self.twice
            );
        } else {
            // asynchronous replication may lose what the dead primary had not sent yet
            assert!(
                self.lost.len() < JOBS / 10,
                "lost {} of {JOBS}: more than the replication lag explains",
                self.lost.len()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durability_a_sentinel_failover_loses_no_job_answered_new() {
    on_sentinel(true)
        .await
        .check("failover with durability", true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_durability_a_sentinel_failover_is_followed_and_the_loss_reported() {
    on_sentinel(false)
        .await
        .check("failover without durability", false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durability_a_cluster_failover_loses_no_job_answered_new() {
    on_cluster(true)
        .await
        .check("cluster failover with durability", true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_durability_a_cluster_failover_is_followed_and_the_loss_reported() {
    on_cluster(false)
        .await
        .check("cluster failover without durability", false);
}

mod sentinel;
