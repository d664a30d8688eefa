//! Sentinel beyond a failover: auth on both sides, TLS, and durability that
//! refuses what no replica confirms.

use crate::util::{Project, Running, eventually};
use hourglass::clock::now_ms;
use hourglass::redis::{Enqueued, NewJob, QueueError};
use std::time::Duration;
use test_support::sentinel::{Passwords, Replicated};

use super::*;

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
