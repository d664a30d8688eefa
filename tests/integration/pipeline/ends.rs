//! What an end leaves: nothing in the topic's hashes after an ack; follow-ups
//! delivered once and the outbox left empty.

use crate::util::RedisServer;
use hourglass::redis::{Done, NewJob, Parked, Queue, outbox_token};

use super::*;

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
