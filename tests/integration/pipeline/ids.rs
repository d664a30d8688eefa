//! Job ids: a live caller id not enqueued twice, repeats and collisions in one
//! enqueue call, a replacing repeat, a change to a job that is gone.

use crate::util::RedisServer;
use hourglass::redis::{Enqueued, Held, NewJob, Queue, Refusal, Refused};

use super::*;

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
