//! The Redis state changes alone, with the clock in the test's hands.

use hourglass::config::DeadLetter;
use hourglass::redis::{Burial, DeadInfo, Done, NewJob, Queue, RateLimit, Refusal, Refused};
use std::time::Duration;

use crate::util::RedisServer;

pub(crate) fn job(id: Option<&str>, due: u64) -> NewJob {
    NewJob {
        id: id.map(str::to_owned),
        payload: b"p".to_vec(),
        due_at_ms: due,
        max_attempts: 0,
        ..Default::default()
    }
}

pub(crate) fn done(id: &str, attempt: u32) -> Done {
    Done {
        logs: String::new(),
        notice: None,
        end: None,
        id: id.into(),
        attempt,
        follow_ups: vec![],
        flows: Vec::new(),
    }
}

#[tokio::test]
async fn a_job_is_not_claimable_one_millisecond_before_it_is_due() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    q.enqueue(&k, &[job(Some("x"), 10_000)], 1_000)
        .await
        .unwrap();
    let early = q.pipeline().claim(&k, 9_999, 20_000, 10).await.unwrap();
    assert!(early.jobs.is_empty(), "claimed before due: {early:?}");
    assert_eq!(early.next_due_ms, Some(10_000));
    let due = q.pipeline().claim(&k, 10_000, 20_000, 10).await.unwrap();
    assert_eq!(due.jobs.len(), 1);
    assert_eq!(
        (
            due.jobs[0].id.as_str(),
            due.jobs[0].due_at_ms,
            due.jobs[0].attempt
        ),
        ("x", 10_000, 1)
    );
    assert_eq!(due.jobs[0].record.as_ref().unwrap().enqueued_at_ms, 1_000);
    assert_eq!(due.next_due_ms, None);
}

/// What a runner claims a few ms ahead (scheduler.rs: CLAIM_AHEAD): jobs due
/// by the horizon and not after, each with its due time to be held until;
/// under a rate limit, nothing ahead of now.
#[tokio::test]
async fn a_claim_ahead_takes_jobs_due_by_its_horizon_only_and_none_ahead_under_a_rate() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let jobs = [
        job(Some("now"), 10_000),
        job(Some("soon"), 10_004),
        job(Some("later"), 10_006),
    ];
    q.enqueue(&k, &jobs, 1_000).await.unwrap();
    let ahead = q
        .pipeline()
        .claim_ahead(&k, 10_000, 10_005, 20_000, 10, None, None)
        .await
        .unwrap();
    let got: Vec<(&str, u64)> = ahead
        .jobs
        .iter()
        .map(|j| (j.id.as_str(), j.due_at_ms))
        .collect();
    assert_eq!(got, [("now", 10_000), ("soon", 10_004)]);
    assert_eq!(ahead.next_due_ms, Some(10_006));

    let limited = q.keys("b");
    q.enqueue(&limited, &jobs, 1_000).await.unwrap();
    let rate = Some(RateLimit {
        interval_ms: 1.0,
        burst: 10,
    });
    let claimed = q
        .pipeline()
        .claim_ahead(&limited, 10_000, 10_005, 20_000, 10, rate, None)
        .await
        .unwrap();
    let ids: Vec<&str> = claimed.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["now"]);
}

#[tokio::test]
async fn claims_come_in_due_order_and_in_batches() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let jobs: Vec<NewJob> = (0..2500).rev().map(|i| job(None, 1_000 + i)).collect();
    let ids = q.enqueue(&k, &jobs, 0).await.unwrap();
    assert_eq!(ids.len(), 2500);
    let first = q.pipeline().claim(&k, 10_000, 20_000, 1000).await.unwrap();
    assert_eq!(first.jobs.len(), 1000);
    assert!(
        first
            .jobs
            .windows(2)
            .all(|w| w[0].due_at_ms <= w[1].due_at_ms)
    );
    assert_eq!(first.next_due_ms, Some(2_000));
}

#[tokio::test]
async fn an_expired_lease_returns_the_job_and_fences_the_old_attempt() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    q.enqueue(&k, &[job(Some("x"), 0)], 0).await.unwrap();
    assert_eq!(
        q.pipeline().claim(&k, 10, 100, 10).await.unwrap().jobs[0].attempt,
        1
    );
    assert_eq!(
        q.pipeline().requeue_expired(&k, 99, 100).await.unwrap(),
        0,
        "lease still valid"
    );
    assert_eq!(q.pipeline().requeue_expired(&k, 100, 100).await.unwrap(), 1);
    let second = q.pipeline().claim(&k, 101, 1_000, 10).await.unwrap();
    assert_eq!(second.jobs[0].attempt, 2);
    assert!(
        second.jobs[0]
            .last_failure
            .as_ref()
            .unwrap()
            .error
            .contains("lease expired")
    );
    let late_ack = q
        .pipeline()
        .ack(&k, &[done("x", 1)], 0, Default::default())
        .await
        .unwrap();
    assert_eq!(
        late_ack,
        [Refusal {
            id: "x".into(),
            why: Refused::Newer
        }],
        "the first runner's late ack must not count"
    );
    assert!(
        q.pipeline()
            .ack(&k, &[done("x", 2)], 0, Default::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        q.stats(&k, 200).await.unwrap(),
        Default::default(),
        "acked and gone"
    );
}

#[tokio::test]
async fn an_extension_lengthens_only_the_lease_its_attempt_holds_and_never_shortens_one() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let ids = [Some("x"), Some("y")].map(|id| job(id, 0));
    q.enqueue(&k, &ids, 0).await.unwrap();
    q.pipeline().claim(&k, 10, 100, 10).await.unwrap();
    let held = |id: &str, attempt: u32| (id.to_owned(), attempt);
    let extend = |jobs: Vec<(String, u32)>, until: u64| {
        let (q, k) = (q.clone(), k.clone());
        async move { q.pipeline().extend(&k, &jobs, until).await.unwrap() }
    };
    assert!(
        extend(vec![held("x", 1), held("y", 1)], 500)
            .await
            .is_empty()
    );
    assert_eq!(
        q.pipeline().requeue_expired(&k, 499, 100).await.unwrap(),
        0,
        "extended to 500"
    );
    // shorter: left as it is; another attempt's number, or no job: named, untouched
    assert!(extend(vec![held("x", 1)], 200).await.is_empty());
    assert_eq!(q.pipeline().requeue_expired(&k, 499, 100).await.unwrap(), 0);
    assert_eq!(
        extend(vec![held("y", 2), held("z", 1)], 900).await,
        ["y", "z"]
    );
    assert_eq!(q.pipeline().requeue_expired(&k, 500, 100).await.unwrap(), 2);
    // requeued: its lease is gone, nothing to extend; claimed again, only
    // the new attempt's number extends it
    assert_eq!(extend(vec![held("x", 1)], 900).await, ["x"]);
    let again = q.pipeline().claim(&k, 501, 600, 10).await.unwrap();
    assert_eq!(again.jobs.len(), 2);
    assert_eq!(extend(vec![held("x", 1)], 900).await, ["x"]);
    assert!(extend(vec![held("x", 2)], 900).await.is_empty());
    assert_eq!(q.pipeline().requeue_expired(&k, 600, 100).await.unwrap(), 1);
    q.pipeline()
        .ack(&k, &[done("x", 2)], 601, Default::default())
        .await
        .unwrap();
    assert_eq!(extend(vec![held("x", 2)], 1_000).await, ["x"], "acked");
}

#[tokio::test]
async fn dead_letters_keep_their_reason_and_are_bounded() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let jobs: Vec<NewJob> = (0..5).map(|i| job(Some(&format!("j{i}")), 0)).collect();
    q.enqueue(&k, &jobs, 0).await.unwrap();
    let claimed = q.pipeline().claim(&k, 1, 1_000, 10).await.unwrap();
    let retention = DeadLetter {
        keep: 3,
        max_age: Duration::from_secs(3600),
    };
    for (n, j) in claimed.jobs.iter().enumerate() {
        let info = DeadInfo {
            reason: format!("boom {n}"),
            attempts: 1,
            failed_at_ms: 10 + n as u64,
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
                    id: j.id.clone(),
                    attempt: j.attempt,
                    info,
                }],
                retention,
                10 + n as u64,
                Default::default(),
            )
            .await
            .unwrap();
    }
    let stats = q.stats(&k, 100).await.unwrap();
    assert_eq!((stats.dead, stats.running, stats.ready), (3, 0, 0));
    assert!(
        q.dead().info(&k, "j0").await.unwrap().is_none(),
        "the oldest is dropped"
    );
    assert_eq!(
        q.dead().info(&k, "j4").await.unwrap().unwrap().reason,
        "boom 4"
    );
}

/// The attempt hash and the lease zset hold only jobs in flight; kept as
/// listpacks, every lookup and change in them would be a linear scan. They
/// must become (and stay) a hash table and a skiplist from the first claim,
/// through acks that empty them, without a visible job: not in the running
/// count, not taken as an expired lease.
#[tokio::test]
async fn the_attempt_hash_and_the_lease_zset_stay_fast_and_show_no_extra_job() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let encodings = || {
        [&k.attempt, &k.lease].map(|key| {
            let out = std::process::Command::new("redis-cli")
                .args(["-p", &redis.port.to_string(), "object", "encoding", key])
                .output()
                .expect("redis-cli runs");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        })
    };
    q.enqueue(&k, &[job(Some("x"), 0), job(Some("y"), 0)], 0)
        .await
        .unwrap();
    let claimed = q.pipeline().claim(&k, 10, 20_000, 10).await.unwrap();
    assert_eq!(claimed.jobs.len(), 2);
    assert_eq!(encodings(), ["hashtable", "skiplist"]);
    let stats = q.stats(&k, 10).await.unwrap();
    assert_eq!(stats.running, 2, "{stats:?}");
    let stale = q
        .pipeline()
        .ack(&k, &[done("x", 1), done("y", 1)], 10, Default::default())
        .await
        .unwrap();
    assert!(stale.is_empty(), "{stale:?}");
    assert_eq!(encodings(), ["hashtable", "skiplist"]);
    let stats = q.stats(&k, 10).await.unwrap();
    assert_eq!((stats.scheduled, stats.ready, stats.running), (0, 0, 0));
    // no lease, however late: the member that keeps the zset a skiplist is no job
    let requeued = q
        .pipeline()
        .requeue_expired(&k, u64::MAX / 2, 100)
        .await
        .unwrap();
    assert_eq!(requeued, 0);
    q.enqueue(&k, &[job(Some("x"), 0)], 20).await.unwrap();
    let again = q.pipeline().claim(&k, 30, 20_000, 10).await.unwrap();
    assert_eq!(
        (again.jobs.len(), again.jobs[0].attempt),
        (1, 1),
        "a new job of the same id starts at attempt 1"
    );
}

mod ends;
mod ids;
