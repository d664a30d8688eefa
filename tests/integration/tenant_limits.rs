//! Per-key limits in Redis alone, the clock in the test's hands: one job at
//! a time per key (ack, release, an expired lease), a key's rate, the
//! topic's own rate with fairness, pausing a key; a key kept through retry,
//! the dead-letter set and `dead retry`.

use hourglass::redis::{Fairness, Held, NewJob, RateLimit};

use crate::tenants::{JOBS, claim, done, ids, keyed, keys_of, open};

/// `key_concurrency = 1`: one job of a key at a time, the next in due order
/// once the first acks (or is released, or retried); other keys go on.
#[tokio::test]
async fn one_at_a_time_per_key_and_other_keys_go_on() {
    let (_redis, q, k) = open().await;
    let serial = Fairness {
        key_concurrency: 1,
        ..JOBS
    };
    let jobs: Vec<NewJob> = (0..3)
        .flat_map(|i| {
            [
                keyed(&format!("a{i}"), "a", 1_000 + i),
                keyed(&format!("b{i}"), "b", 1_000 + i),
            ]
        })
        .collect();
    q.enqueue(&k, &jobs, 0).await.unwrap();
    let first = claim(&q, &k, 2_000, 10, &serial).await;
    let mut started = ids(&first);
    started.sort();
    assert_eq!(started, ["a0", "b0"], "one per key");
    assert!(
        claim(&q, &k, 2_000, 10, &serial).await.is_empty(),
        "both keys at their limit"
    );
    // a's job acks: a's next starts, b stays held
    let a0 = first.iter().find(|j| j.id == "a0").unwrap();
    q.pipeline()
        .ack(&k, &[done(a0)], 2_000, Default::default())
        .await
        .unwrap();
    let next = claim(&q, &k, 2_000, 10, &serial).await;
    assert_eq!(ids(&next), ["a1"]);
    // b's job is released (a runner shutting down): b's first job again
    let b0 = first.iter().find(|j| j.id == "b0").unwrap();
    q.pipeline()
        .release(
            &k,
            &[Held {
                id: b0.id.clone(),
                attempt: b0.attempt,
            }],
            2_000,
        )
        .await
        .unwrap();
    let again = claim(&q, &k, 2_001, 10, &serial).await;
    assert_eq!(ids(&again), ["b0"]);
}

/// `key_rate`: a key's starts are spaced by its rate; another key is not
/// held by it; the claim says when the held key may start again.
#[tokio::test]
async fn a_key_rate_spaces_that_keys_starts_only() {
    let (_redis, q, k) = open().await;
    let (limited, jobs) = ten_a_second(5);
    q.enqueue(&k, &jobs, 0).await.unwrap();
    let first = q
        .pipeline()
        .claim_ahead(&k, 1_000, 1_000, 60_000, 10, None, Some(&limited))
        .await
        .unwrap();
    let mut keys = keys_of(&first.jobs);
    keys.sort();
    assert_eq!(keys, ["a", "b"], "one start per key now");
    assert_eq!(
        first.next_due_ms,
        Some(1_100),
        "the next start the rates allow"
    );
    assert!(claim(&q, &k, 1_099, 10, &limited).await.is_empty());
    assert_eq!(claim(&q, &k, 1_100, 10, &limited).await.len(), 2);
}

/// A paused key's jobs wait while the others run; resumed, it starts again.
#[tokio::test]
async fn a_paused_key_waits_and_the_others_run() {
    let (_redis, q, k) = open().await;
    q.enqueue(
        &k,
        &[
            keyed("x1", "x", 1_000),
            keyed("x2", "x", 1_000),
            keyed("y1", "y", 1_000),
        ],
        0,
    )
    .await
    .unwrap();
    assert!(q.tenants().pause(&k, "x", true).await.unwrap());
    assert!(
        !q.tenants().pause(&k, "x", true).await.unwrap(),
        "already paused"
    );
    assert_eq!(keys_of(&claim(&q, &k, 1_000, 10, &JOBS).await), ["y"]);
    assert!(claim(&q, &k, 1_000, 10, &JOBS).await.is_empty());
    let stats = q.tenants().stats(&k, 1_000, 10).await.unwrap();
    let x = stats.top.iter().find(|s| s.key == "x").expect("x listed");
    assert_eq!((x.queued, x.paused), (2, true), "{stats:?}");
    assert!(q.tenants().pause(&k, "x", false).await.unwrap());
    assert_eq!(keys_of(&claim(&q, &k, 1_000, 10, &JOBS).await), ["x", "x"]);
}

/// A job keeps its key through a retry, the dead-letter set and `dead
/// retry`; with `key_concurrency = 1`, a lease that expires (its runner
/// died) frees the key for its next job.
#[tokio::test]
async fn a_key_survives_retry_and_dead_retry_and_an_expired_lease_frees_it() {
    let (_redis, q, k) = open().await;
    let serial = Fairness {
        key_concurrency: 1,
        ..JOBS
    };
    assert!(claim(&q, &k, 0, 1, &serial).await.is_empty());
    q.enqueue(
        &k,
        &[keyed("x", "acme", 1_000), keyed("y", "acme", 1_001)],
        1_000,
    )
    .await
    .unwrap();
    let first = claim(&q, &k, 1_000, 10, &serial).await;
    assert_eq!(ids(&first), ["x"]);
    // the runner holding x dies: once its lease ends, acme may start y
    assert!(claim(&q, &k, 1_000, 10, &serial).await.is_empty());
    assert_eq!(
        q.pipeline().requeue_expired(&k, 70_000, 10).await.unwrap(),
        1
    );
    let next = claim(&q, &k, 70_000, 10, &serial).await;
    assert_eq!(
        ids(&next),
        ["x"],
        "the expired lease freed the key, and x keeps its place before y"
    );
    let j = &next[0];
    // retried, then dead-lettered, then retried by an operator: still acme's
    let failure = hourglass::redis::Failure {
        error: "once".into(),
        handler: None,
        at: 70_000,
        attempts: Vec::new(),
    };
    q.pipeline()
        .retry(
            &k,
            &[hourglass::redis::Retrying {
                logs: String::new(),
                id: j.id.clone(),
                attempt: j.attempt,
                next_due_ms: 71_000,
                failure,
            }],
            Default::default(),
        )
        .await
        .unwrap();
    // y (due earlier than the retry) runs first, then the retried job
    let y = claim(&q, &k, 71_000, 10, &serial).await;
    assert_eq!(ids(&y), ["y"]);
    q.pipeline()
        .ack(&k, &[done(&y[0])], 71_000, Default::default())
        .await
        .unwrap();
    let again = claim(&q, &k, 71_000, 10, &serial).await;
    let j = &again[0];
    assert_eq!((j.id.as_str(), j.key.as_deref()), ("x", Some("acme")));
    let info = hourglass::redis::DeadInfo {
        reason: "boom".into(),
        attempts: j.attempt,
        failed_at_ms: 71_000,
        handler: None,
        costs: Vec::new(),
        expires_at_ms: None,
    };
    let retention = hourglass::config::DeadLetter {
        keep: 10,
        max_age: std::time::Duration::from_secs(3600),
    };
    q.pipeline()
        .bury(
            &k,
            &[hourglass::redis::Burial {
                logs: String::new(),
                id: j.id.clone(),
                attempt: j.attempt,
                info,
                end: None,
                notice: None,
                expired: None,
            }],
            retention,
            71_000,
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        q.dead()
            .retry(&k, std::slice::from_ref(&j.id), 72_000)
            .await
            .unwrap()
            .len(),
        1
    );
    let view = q
        .inspect(&k, &j.id, 72_000)
        .await
        .unwrap()
        .expect("requeued");
    assert_eq!(view.key.as_deref(), Some("acme"));
}

/// The topic's own `rate` holds on a topic with fairness, either way of
/// queueing: one start per interval, and the claim says when the next may be.
#[tokio::test]
async fn the_topics_own_rate_holds_with_fairness() {
    let (_redis, q, _) = open().await;
    let serial = Fairness {
        key_concurrency: 1,
        ..JOBS
    };
    for (topic, fair) in [("tagged", JOBS), ("queues", serial)] {
        let k = q.keys(topic);
        let rate = Some(RateLimit {
            interval_ms: 100.0,
            burst: 0,
        });
        let jobs: Vec<NewJob> = (0..4)
            .map(|i| keyed(&format!("j{i}"), &format!("k{i}"), 1_000))
            .collect();
        q.enqueue(&k, &jobs, 1_000).await.unwrap();
        let first = q
            .pipeline()
            .claim_ahead(&k, 1_000, 1_000, 60_000, 10, rate, Some(&fair))
            .await
            .unwrap();
        assert_eq!(first.jobs.len(), 1, "{topic}: one start now");
        assert_eq!(first.next_due_ms, Some(1_100), "{topic}");
        let early = q
            .pipeline()
            .claim_ahead(&k, 1_050, 1_050, 60_000, 10, rate, Some(&fair))
            .await
            .unwrap();
        assert!(early.jobs.is_empty(), "{topic}: none before the interval");
        let next = q
            .pipeline()
            .claim_ahead(&k, 1_100, 1_100, 60_000, 10, rate, Some(&fair))
            .await
            .unwrap();
        assert_eq!(next.jobs.len(), 1, "{topic}");
    }
}

/// A key held by its rate drains its whole backlog, one start per interval,
/// under claims that come often (every 7 ms) and take ahead.
#[tokio::test]
async fn a_rate_held_key_drains_its_whole_backlog() {
    let (_redis, q, k) = open().await;
    let (limited, jobs) = ten_a_second(8);
    q.enqueue(&k, &jobs, 1_000).await.unwrap();
    let mut starts: Vec<(String, u64)> = Vec::new();
    let mut t = 1_000;
    while t < 3_000 {
        let c = q
            .pipeline()
            .claim_ahead(&k, t, t + 5, 60_000, 8, None, Some(&limited))
            .await
            .unwrap();
        for j in &c.jobs {
            q.pipeline()
                .ack(&k, &[done(j)], t, Default::default())
                .await
                .unwrap();
            starts.push((j.id.clone(), t));
        }
        t += 7;
    }
    assert_eq!(starts.len(), 16, "every job started: {starts:?}");
    for key in ["a", "b"] {
        let at: Vec<(&str, u64)> = starts
            .iter()
            .filter(|(id, _)| id.starts_with(key))
            .map(|(id, t)| (id.as_str(), *t))
            .collect();
        let order: Vec<&str> = at.iter().map(|(id, _)| *id).collect();
        let want: Vec<String> = (0..8).map(|i| format!("{key}{i}")).collect();
        assert_eq!(order, want, "due order within {key}");
        assert!(at.windows(2).all(|w| w[1].1 >= w[0].1 + 100), "{at:?}");
    }
}

/// `key_rate = "10/s"` without a burst, and `n` jobs of key a then `n` of
/// key b (`a0`, `a1`, ..., `b0`, ...), all due at 1,000.
fn ten_a_second(n: usize) -> (Fairness, Vec<NewJob>) {
    let limited = Fairness {
        key_rate: Some(RateLimit {
            interval_ms: 100.0,
            burst: 0,
        }),
        ..JOBS
    };
    let jobs = ["a", "b"]
        .iter()
        .flat_map(|key| (0..n).map(move |i| keyed(&format!("{key}{i}"), key, 1_000)))
        .collect();
    (limited, jobs)
}

/// A job given back after it started is marked to go first when tagged
/// again; cancelled before that, it leaves no mark behind.
#[tokio::test]
async fn a_job_given_back_then_cancelled_leaves_no_mark() {
    let (redis, q, k) = open().await;
    let serial = Fairness {
        key_concurrency: 1,
        ..JOBS
    };
    q.enqueue(&k, &[keyed("x", "acme", 1_000)], 1_000)
        .await
        .unwrap();
    let x = claim(&q, &k, 1_000, 10, &serial).await;
    q.pipeline()
        .release(
            &k,
            &[Held {
                id: "x".into(),
                attempt: x[0].attempt,
            }],
            1_000,
        )
        .await
        .unwrap();
    let mut conn = ::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let front = format!("{}:front", k.fair);
    let marked: bool = ::redis::cmd("HEXISTS")
        .arg(&front)
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(marked, "released: marked to go first");
    q.admin()
        .cancel(&k, &["x".to_owned()], 1_001, None)
        .await
        .unwrap();
    let left: u64 = ::redis::cmd("EXISTS")
        .arg(&front)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0, "the cancelled job's mark is gone");
}

/// A key's rate time, once past, is pruned: `:tat` holds the keys started
/// lately, not every key ever seen; a key whose time is still ahead stays
/// held.
#[tokio::test]
async fn rate_times_past_are_pruned_and_times_ahead_kept() {
    let (redis, q, k) = open().await;
    let (limited, _) = ten_a_second(0);
    let many: Vec<NewJob> = (0..1_000)
        .map(|i| keyed(&format!("j{i}"), &format!("tenant-{i}"), 1_000))
        .collect();
    q.enqueue(&k, &many, 1_000).await.unwrap();
    let mut started = 0;
    while started < 1_000 {
        let got = claim(&q, &k, 1_000, 256, &limited).await;
        assert!(!got.is_empty(), "each key starts once at 1,000");
        started += got.len();
    }
    let mut conn = ::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let tat = format!("{}:tat", k.fair);
    let len = |mut conn: ::redis::aio::MultiplexedConnection| {
        let tat = tat.clone();
        async move {
            ::redis::cmd("HLEN")
                .arg(&tat)
                .query_async::<u64>(&mut conn)
                .await
                .unwrap()
        }
    };
    assert!(len(conn.clone()).await > 900, "times ahead are kept");
    // later: z starts once (its time is then ahead), and claims prune the rest
    q.enqueue(
        &k,
        &[keyed("z0", "z", 2_000), keyed("z1", "z", 2_000)],
        2_000,
    )
    .await
    .unwrap();
    assert_eq!(ids(&claim(&q, &k, 2_000, 10, &limited).await), ["z0"]);
    let mut claims = 0;
    while len(conn.clone()).await > 2 {
        claims += 1;
        assert!(claims <= 100, "1,000 past times pruned within 100 claims");
        assert!(
            claim(&q, &k, 2_050, 10, &limited).await.is_empty(),
            "z's rate still holds z1"
        );
    }
    let kept: Option<String> = ::redis::cmd("HGET")
        .arg(&tat)
        .arg("z")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(kept.is_some(), "z's time ahead stays");
    assert_eq!(ids(&claim(&q, &k, 2_100, 10, &limited).await), ["z1"]);
}
