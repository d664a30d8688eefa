//! The Redis state changes alone, with the clock in the test's hands.

use hourglass::config::DeadLetter;
use hourglass::redis::{
    Burial, DeadInfo, Done, Enqueued, Held, NewJob, Parked, Queue, Refusal, Refused, outbox_token,
};
use std::time::Duration;

use crate::util::RedisServer;

fn job(id: Option<&str>, due: u64) -> NewJob {
    NewJob {
        id: id.map(str::to_owned),
        payload: b"p".to_vec(),
        due_at_ms: due,
        max_attempts: 0,
        ..Default::default()
    }
}

fn done(id: &str, attempt: u32) -> Done {
    Done {
        end: None,
        id: id.into(),
        attempt,
        follow_ups: vec![],
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
    let early = q.claim(&k, 9_999, 20_000, 10).await.unwrap();
    assert!(early.jobs.is_empty(), "claimed before due: {early:?}");
    assert_eq!(early.next_due_ms, Some(10_000));
    let due = q.claim(&k, 10_000, 20_000, 10).await.unwrap();
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

#[tokio::test]
async fn claims_come_in_due_order_and_in_batches() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let jobs: Vec<NewJob> = (0..2500).rev().map(|i| job(None, 1_000 + i)).collect();
    let ids = q.enqueue(&k, &jobs, 0).await.unwrap();
    assert_eq!(ids.len(), 2500);
    let first = q.claim(&k, 10_000, 20_000, 1000).await.unwrap();
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
    let claimed = q.claim(&k, 100, 1_000, 10).await.unwrap();
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
        q.ack(&k, &[done("order-1", 1)], 0, None)
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
    assert_eq!(q.claim(&k, 10, 100, 10).await.unwrap().jobs[0].attempt, 1);
    assert_eq!(
        q.requeue_expired(&k, 99, 100).await.unwrap(),
        0,
        "lease still valid"
    );
    assert_eq!(q.requeue_expired(&k, 100, 100).await.unwrap(), 1);
    let second = q.claim(&k, 101, 1_000, 10).await.unwrap();
    assert_eq!(second.jobs[0].attempt, 2);
    assert!(
        second.jobs[0]
            .last_failure
            .as_ref()
            .unwrap()
            .error
            .contains("lease expired")
    );
    let late_ack = q.ack(&k, &[done("x", 1)], 0, None).await.unwrap();
    assert_eq!(
        late_ack,
        [Refusal {
            id: "x".into(),
            why: Refused::Newer
        }],
        "the first runner's late ack must not count"
    );
    assert!(
        q.ack(&k, &[done("x", 2)], 0, None)
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
    let claimed = q.claim(&k, 1, 1_000, 10).await.unwrap();
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
        };
        q.bury(
            &k,
            &[Burial {
                end: None,
                id: j.id.clone(),
                attempt: j.attempt,
                info,
            }],
            retention,
            10 + n as u64,
            None,
        )
        .await
        .unwrap();
    }
    let stats = q.stats(&k, 100).await.unwrap();
    assert_eq!((stats.dead, stats.running, stats.ready), (3, 0, 0));
    assert!(
        q.dead_info(&k, "j0").await.unwrap().is_none(),
        "the oldest is dropped"
    );
    assert_eq!(
        q.dead_info(&k, "j4").await.unwrap().unwrap().reason,
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
    let claimed = q.claim(&k, 100, 1_000, 10).await.unwrap();
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

/// The attempt hash holds only jobs in flight; kept as a listpack, every
/// lookup in it would be a linear scan. It must become (and stay) a hash table
/// from the first claim, through acks that empty it, without a visible field.
#[tokio::test]
async fn the_attempt_hash_stays_a_hash_table_and_shows_no_extra_job() {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let encoding = || {
        let out = std::process::Command::new("redis-cli")
            .args([
                "-p",
                &redis.port.to_string(),
                "object",
                "encoding",
                &k.attempt,
            ])
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    q.enqueue(&k, &[job(Some("x"), 0), job(Some("y"), 0)], 0)
        .await
        .unwrap();
    let claimed = q.claim(&k, 10, 20_000, 10).await.unwrap();
    assert_eq!(claimed.jobs.len(), 2);
    assert_eq!(encoding(), "hashtable");
    let stale = q
        .ack(&k, &[done("x", 1), done("y", 1)], 10, None)
        .await
        .unwrap();
    assert!(stale.is_empty(), "{stale:?}");
    assert_eq!(encoding(), "hashtable");
    let stats = q.stats(&k, 10).await.unwrap();
    assert_eq!((stats.scheduled, stats.ready, stats.running), (0, 0, 0));
    q.enqueue(&k, &[job(Some("x"), 0)], 20).await.unwrap();
    let again = q.claim(&k, 30, 20_000, 10).await.unwrap();
    assert_eq!(
        (again.jobs.len(), again.jobs[0].attempt),
        (1, 1),
        "a new job of the same id starts at attempt 1"
    );
}

#[tokio::test]
async fn follow_ups_are_delivered_once_and_the_outbox_left_empty() {
    // ack.lua parks follow-ups under a token it builds; deliver() clears them
    // under redis::outbox_token: if the two ever disagree, the entry stays
    // and a sweep delivers it again
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let (parent, child) = (q.keys("parent"), q.keys("child"));
    q.enqueue(&parent, &[job(Some("p"), 0)], 0).await.unwrap();
    let claimed = q.claim(&parent, 0, 60_000, 1).await.unwrap();
    let attempt = claimed.jobs[0].attempt;
    let follow_up = Parked {
        topic: "child".into(),
        job: job(Some("c"), 0),
    };
    let acked = Done {
        end: None,
        id: "p".into(),
        attempt,
        follow_ups: vec![follow_up.clone()],
    };
    assert!(q.ack(&parent, &[acked], 1, None).await.unwrap().is_empty());
    q.deliver(&parent, &[(outbox_token(attempt, "p"), vec![follow_up])], 2)
        .await
        .unwrap();
    assert_eq!(q.stats(&child, 3).await.unwrap().ready, 1, "delivered");
    // long after the sweep time, nothing is left to deliver again
    let left = q.take_outbox(&parent, 10_000_000, 100).await.unwrap();
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
    q.claim(&k, 0, 60_000, 10).await.unwrap();
    assert!(
        q.ack(&k, &[done("x", 1)], 1, None)
            .await
            .unwrap()
            .is_empty()
    );
    let again = q.ack(&k, &[done("x", 1)], 2, None).await.unwrap();
    assert_eq!(
        again,
        [Refusal {
            id: "x".into(),
            why: Refused::Gone
        }]
    );
    q.cancel(&k, &["y".to_owned()], 0, None).await.unwrap();
    let held = Held {
        id: "y".to_owned(),
        attempt: 1,
    };
    let released = q.release(&k, &[held], 3).await.unwrap();
    assert_eq!(
        released,
        [Refusal {
            id: "y".into(),
            why: Refused::Gone
        }]
    );
}
