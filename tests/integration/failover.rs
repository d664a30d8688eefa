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
use test_support::sentinel::{Passwords, Replicated};
use tokio::sync::broadcast::error::TryRecvError;

use crate::util::{Project, Running, eventually};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_with_auth_on_both_sides() {
    let passwords = Passwords {
        redis: "primary-secret",
        sentinel: "sentinel-secret",
    };
    let redis = tokio::task::spawn_blocking(move || Replicated::start(Some(passwords)))
        .await
        .unwrap();
    let project =
        Project::on_sentinel(redis.sentinel_urls(), Some(passwords.redis), "", "", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = crate::util::enqueue(&queue, "echo", "{}", 0, 0).await;
    runner
        .until_settled("echo", &id, Duration::from_secs(20))
        .await;

    // a wrong sentinel password is a clear error, not a hang
    let mut wrong = redis.sentinel_urls();
    for url in &mut wrong {
        *url = url.replace(passwords.sentinel, "wrong");
    }
    let bad = Project::on_sentinel(wrong, Some(passwords.redis), "", "", TOPICS);
    let err = hourglass::redis::connect(&bad.config())
        .await
        .err()
        .expect("a wrong sentinel password is refused");
    let text = format!("{err:#}");
    assert!(
        text.contains("sentinel") && !text.contains("wrong"),
        "names the sentinels, hides the password: {text}"
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls_finds_the_primary_and_follows_a_failover() {
    let certs = tempfile::tempdir().unwrap();
    test_support::tls::write_certificates(certs.path());
    let dir = certs.path().to_owned();
    let mut redis = tokio::task::spawn_blocking(move || Replicated::start_tls(&dir))
        .await
        .unwrap();
    let ca = format!("tls_ca = \"{}\"\n", certs.path().join("ca.crt").display());
    let project = Project::on_sentinel(redis.sentinel_urls(), None, &ca, "", TOPICS);
    // a client that cannot reach the primary keeps retrying: bounded here
    let within = Duration::from_secs(30);
    let mut runner = tokio::time::timeout(within, Running::start(project.config()))
        .await
        .expect("the runner started through the sentinels over TLS");
    let (queue, _) = tokio::time::timeout(within, hourglass::redis::connect(&project.config()))
        .await
        .expect("a producer connected through the sentinels over TLS")
        .unwrap();
    let id = tokio::time::timeout(within, crate::util::enqueue(&queue, "echo", "{}", 0, 0))
        .await
        .expect("an enqueue on the primary over TLS");
    runner
        .until_settled("echo", &id, Duration::from_secs(20))
        .await;

    // the primary dies: runner and producer find the promoted replica
    // through the sentinels, over TLS again
    let promoted = tokio::task::block_in_place(|| {
        redis.kill_primary();
        redis.until_promoted(Duration::from_secs(60))
    });
    assert_ne!(promoted, redis.primary.port);
    let id = eventually(
        Duration::from_secs(60),
        "an enqueue after the failover",
        || async {
            queue
                .enqueue(&queue.keys("echo"), &[NewJob::default()], now_ms())
                .await
                .map(|answers| answers[0].id().to_owned())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    runner
        .until_settled("echo", &id, Duration::from_secs(60))
        .await;
    runner.stop().await;

    // rediss:// sentinels without the CA that signed them: a clear error
    let untrusted = Project::on_sentinel(redis.sentinel_urls(), None, "", "", TOPICS);
    let err = hourglass::redis::connect(&untrusted.config())
        .await
        .err()
        .expect("sentinels whose certificate is not trusted are refused");
    let text = format!("{err:#}");
    assert!(
        text.contains("sentinel") && text.to_lowercase().contains("certificate"),
        "names the sentinels and the certificate: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durability_refuses_what_no_replica_confirms_and_the_runner_waits() {
    let server = test_support::RedisServer::start();
    let project = Project::with_redis_lines(
        &server.url(),
        "durability = { replicas = 1, timeout = \"100ms\" }",
        "",
        TOPICS,
    );
    let (queue, _) = hourglass::redis::connect(&project.config()).await.unwrap();
    let keys = queue.keys("echo");
    let job = || NewJob {
        id: Some("order-1".into()),
        payload: br#"{"n":1}"#.to_vec(),
        // due in an hour: the runner below leaves it alone
        due_at_ms: now_ms() + 3_600_000,
        ..Default::default()
    };

    // no replica: the producer is told, clearly, and may retry
    let err = queue.enqueue(&keys, &[job()], now_ms()).await.unwrap_err();
    assert!(
        matches!(
            err,
            QueueError::NotReplicated {
                wanted: 1,
                confirmed: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());
    let text = err.to_string();
    assert!(
        text.contains("only 0 of 1 replicas confirmed") && text.contains("retry"),
        "{text}"
    );
    // nothing half-written: the job is whole on the primary (record and schedule)
    let view = queue
        .inspect(&keys, "order-1", now_ms())
        .await
        .unwrap()
        .expect("the unconfirmed job is on the primary, whole");
    let record = view.record.expect("a record").expect("a readable record");
    assert_eq!(record.payload, br#"{"n":1}"#);

    // the CLI says the same and exits non-zero
    let cli = crate::util::hourglass(&project, &["enqueue", "echo", "{}", "--id", "order-2"]);
    let stderr = String::from_utf8_lossy(&cli.stderr);
    assert!(
        !cli.status.success() && stderr.contains("replicas confirmed"),
        "{stderr}"
    );

    // a runner does not run what it cannot lease durably: it says why and waits
    let mut runner = crate::util::RunnerProcess::start(&project);
    runner
        .logged(
            "claiming failed: only 0 of 1 replicas confirmed",
            Duration::from_secs(30),
        )
        .await;

    // a replica arrives: the retry answers duplicate (the job was kept), the due job runs
    let port = server.port.to_string();
    let _replica = test_support::RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let answers =
        crate::util::eventually(Duration::from_secs(30), "a replica confirms", || async {
            queue
                .enqueue(&keys, &[job()], now_ms())
                .await
                .map_err(|e| e.to_string())
        })
        .await;
    assert_eq!(answers, vec![Enqueued::Duplicate("order-1".into())]);
    crate::util::eventually(Duration::from_secs(30), "the due job ran", || async {
        let s = queue.stats(&keys, now_ms()).await.unwrap();
        if (s.ready, s.scheduled, s.running) == (0, 1, 0) {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    // the unconfirmed leases were given back uncounted: its first attempt ran
    let log = runner.log();
    assert!(
        log.contains("echo order-2 attempt 1/"),
        "order-2 ran as attempt 1:\n{log}"
    );
    runner.kill();
}
