//! The Redis state changes alone, with the clock in the test's hands.

use hourglass::config::DeadLetter;
use hourglass::redis::{
    Burial, DeadInfo, Done, Enqueued, Held, NewJob, Parked, Queue, RateLimit, Refusal, Refused,
    outbox_token,
};
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
async fn a_live_caller_id_is_not_enqueued_twice_but_a_finished_one_can_return() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    assert_eq!(
        q.enqueue(&k, &[job(Some("order-1"), 5)], 0).await.unwrap(),
        [Enqueued::New("order-1".into())]
    );
    assert_eq!(
        q.enqueue(&k, &[job(Some("order-1"), 9)], 0).await.unwrap(),
        [Enqueued::Duplicate("order-1".into())]
    );
    let claimed = q.pipeline().claim(&k, 100, 1_000, 10).await.unwrap();
    assert_eq!(
        claimed.jobs.len(),
        1,
        "the duplicate must not have added a second job"
    );
    assert_eq!(
        claimed.jobs[0].due_at_ms, 5,
        "the duplicate must not have moved the first"
    );
    assert_eq!(
        q.enqueue(&k, &[job(Some("order-1"), 9)], 0).await.unwrap(),
        [Enqueued::Duplicate("order-1".into())]
    );
    assert!(
        q.pipeline()
            .ack(&k, &[done("order-1", 1)], 0, Default::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        q.enqueue(&k, &[job(Some("order-1"), 9)], 0).await.unwrap(),
        [Enqueued::New("order-1".into())]
    );
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

#[tokio::test]
async fn one_enqueue_call_handles_repeats_and_generated_ids_that_collide_with_callers() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let answer = q
        .enqueue(
            &k,
            &[
                job(Some("1"), 5),
                job(None, 5),
                job(Some("x"), 5),
                job(Some("x"), 6),
                job(None, 7),
            ],
            0,
        )
        .await
        .unwrap();
    assert_eq!(answer[0], Enqueued::New("1".into()));
    assert_eq!(answer[2], Enqueued::New("x".into()));
    assert_eq!(
        answer[3],
        Enqueued::Duplicate("x".into()),
        "a repeat in one call"
    );
    let generated = [answer[1].id(), answer[4].id()];
    assert!(
        matches!(answer[1], Enqueued::New(_)) && matches!(answer[4], Enqueued::New(_)),
        "{answer:?}"
    );
    assert!(
        generated[0] != generated[1] && !generated.contains(&"1") && !generated.contains(&"x"),
        "generated ids must not take a caller's: {answer:?}"
    );
    let claimed = q.pipeline().claim(&k, 100, 1_000, 10).await.unwrap();
    let mut ids: Vec<(&str, u64)> = claimed
        .jobs
        .iter()
        .map(|j| (j.id.as_str(), j.due_at_ms))
        .collect();
    ids.sort();
    let mut expected = vec![("1", 5), (generated[0], 5), (generated[1], 7), ("x", 5)];
    expected.sort();
    assert_eq!(ids, expected, "four jobs, the repeat not among them");
}

/// A repeat that replaces, in the same call: the last one counts (its payload
/// and due time), and the job is there once.
#[tokio::test]
async fn a_replacing_repeat_in_one_enqueue_call_is_the_one_kept() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let replacing = |due, payload: &[u8]| NewJob {
        payload: payload.to_vec(),
        replace: true,
        ..job(Some("x"), due)
    };
    let answer = q
        .enqueue(
            &k,
            &[
                job(Some("y"), 4),
                replacing(5, b"first"),
                replacing(6, b"second"),
                replacing(3, b"third"),
            ],
            0,
        )
        .await
        .unwrap();
    assert_eq!(
        answer[1..],
        [
            Enqueued::New("x".into()),
            Enqueued::Replaced("x".into()),
            Enqueued::Replaced("x".into())
        ]
    );
    let claimed = q.pipeline().claim(&k, 100, 1_000, 10).await.unwrap();
    let got: Vec<_> = claimed
        .jobs
        .iter()
        .map(|j| {
            let payload = j.record.as_ref().unwrap().payload.clone();
            (
                j.id.as_str(),
                j.due_at_ms,
                String::from_utf8(payload).unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [("x", 3, "third".into()), ("y", 4, "p".into())]);
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

/// Ack deletes what a job left in the topic's side hashes (its last error,
/// account and progress) while other jobs keep theirs; claim and ack skip
/// these hashes when they are absent (lua/prelude.lua: hmget_if, hdel_if),
/// so this is where a skipped delete would show.
#[tokio::test]
async fn an_acked_job_leaves_nothing_in_the_topics_hashes() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let hexists = |key: &str, field: &str| {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &redis.port.to_string(), "hexists", key, field])
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    };
    let tagged = |id: &str, due: u64| NewJob {
        account: Some("acme".into()),
        ..job(Some(id), due)
    };
    // "later" keeps an account entry, so the account hash is there throughout
    q.enqueue(&k, &[tagged("x", 0), tagged("later", 1_000_000)], 0)
        .await
        .unwrap();
    let first = q.pipeline().claim(&k, 10, 20_000, 10).await.unwrap();
    assert_eq!(first.jobs.len(), 1);
    let failed = hourglass::redis::Retrying {
        logs: String::new(),
        id: "x".into(),
        attempt: 1,
        next_due_ms: 20,
        failure: hourglass::redis::Failure {
            error: "once".into(),
            handler: None,
            at: 10,
            attempts: Vec::new(),
        },
    };
    assert!(
        q.pipeline()
            .retry(&k, &[failed], Default::default())
            .await
            .unwrap()
            .is_empty()
    );
    let second = q.pipeline().claim(&k, 30, 20_000, 10).await.unwrap();
    assert_eq!(second.jobs[0].attempt, 2);
    assert_eq!(second.jobs[0].last_failure.as_ref().unwrap().error, "once");
    assert_eq!(second.jobs[0].account.as_deref(), Some("acme"));
    let report = hourglass::redis::Report {
        id: "x".into(),
        progress: hourglass::redis::Progress {
            attempt: 2,
            percent: Some(50),
            detail: None,
            at_ms: 35,
        },
    };
    assert_eq!(q.pipeline().progress(&k, &[report]).await.unwrap(), 1);
    for key in [&k.error, &k.account, &k.progress] {
        assert!(hexists(key, "x"), "{key} holds x before the ack");
    }
    assert!(
        q.pipeline()
            .ack(&k, &[done("x", 2)], 40, Default::default())
            .await
            .unwrap()
            .is_empty()
    );
    for key in [&k.error, &k.account, &k.progress, &k.attempt, &k.job] {
        assert!(!hexists(key, "x"), "{key} still holds x after the ack");
    }
    assert!(
        hexists(&k.account, "later"),
        "the other job keeps its account"
    );
}

#[tokio::test]
async fn follow_ups_are_delivered_once_and_the_outbox_left_empty() {
    // ack.lua parks follow-ups under a token it builds; deliver() clears them
    // under redis::outbox_token: if the two ever disagree, the entry stays
    // and a sweep delivers it again. Acked in one call between two jobs
    // without follow-ups (an ack of only those sends fewer arguments a job)
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let (parent, child) = (q.keys("parent"), q.keys("child"));
    let jobs = [job(Some("a"), 0), job(Some("p"), 1), job(Some("z"), 2)];
    q.enqueue(&parent, &jobs, 0).await.unwrap();
    let claimed = q.pipeline().claim(&parent, 2, 60_000, 3).await.unwrap();
    let attempt = claimed.jobs[1].attempt;
    let follow_up = Parked {
        topic: "child".into(),
        job: job(Some("c"), 0),
    };
    let acked = Done {
        logs: String::new(),
        notice: None,
        end: None,
        id: "p".into(),
        attempt,
        follow_ups: vec![follow_up.clone()],
        flows: Vec::new(),
    };
    assert!(
        q.pipeline()
            .ack(
                &parent,
                &[done("a", 1), acked, done("z", 1)],
                3,
                Default::default()
            )
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(q.stats(&parent, 3).await.unwrap(), Default::default());
    let parked = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "hkeys", &parent.outbox])
        .output()
        .unwrap();
    let token = outbox_token(attempt, "p");
    assert_eq!(String::from_utf8_lossy(&parked.stdout).trim(), token);
    q.pipeline()
        .deliver(
            &parent,
            &[(
                outbox_token(attempt, "p"),
                hourglass::redis::Entry {
                    jobs: vec![follow_up],
                    notices: Vec::new(),
                    flows: Vec::new(),
                },
            )],
            2,
        )
        .await
        .unwrap();
    assert_eq!(q.stats(&child, 3).await.unwrap().ready, 1, "delivered");
    // long after the sweep time, nothing is left to deliver again
    let left = q
        .pipeline()
        .take_outbox(&parent, 10_000_000, 100)
        .await
        .unwrap();
    assert!(left.is_empty(), "the outbox kept {left:?}");
}

#[tokio::test]
async fn a_change_to_a_job_that_is_gone_says_gone_not_newer() {
    // what a runner sees when a job was cancelled while it ran, or when its
    // commit went through before Redis went away and is tried again
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    q.enqueue(&k, &[job(Some("x"), 0), job(Some("y"), 0)], 0)
        .await
        .unwrap();
    q.pipeline().claim(&k, 0, 60_000, 10).await.unwrap();
    assert!(
        q.pipeline()
            .ack(&k, &[done("x", 1)], 1, Default::default())
            .await
            .unwrap()
            .is_empty()
    );
    let again = q
        .pipeline()
        .ack(&k, &[done("x", 1)], 2, Default::default())
        .await
        .unwrap();
    assert_eq!(
        again,
        [Refusal {
            id: "x".into(),
            why: Refused::Gone
        }]
    );
    q.admin()
        .cancel(&k, &["y".to_owned()], 0, None)
        .await
        .unwrap();
    let held = Held {
        id: "y".to_owned(),
        attempt: 1,
    };
    let released = q.pipeline().release(&k, &[held], 3).await.unwrap();
    assert_eq!(
        released,
        [Refusal {
            id: "y".into(),
            why: Refused::Gone
        }]
    );
}
