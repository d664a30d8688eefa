//! The time index (client/lua/index.lua) in Redis alone, with the clock in
//! the test's hands: its order and shape against a model, how bulk
//! enqueues land in its buckets, and how few calls a claim and an ack of a
//! plain topic make.

use hourglass::redis::{Enqueued, JobState, Queue, TopicKeys};

use crate::pipeline::{done, job};
use crate::util::RedisServer;

/// A fresh redis-server, topic `a` on it and a plain connection to read its keys.
async fn topic() -> (
    RedisServer,
    Queue,
    TopicKeys,
    redis::aio::MultiplexedConnection,
) {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let raw = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    (redis, q, k, raw)
}

/// A zset's members and scores, in order.
async fn zset(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<(String, u64)> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(conn)
        .await
        .unwrap()
}

/// The time index against a model: 40 rounds of random enqueues (some due
/// at one shared millisecond, some in the past), cancels, replaces, retries
/// and claims with the clock moving on. Every claim is due and in order,
/// nothing is lost or claimed twice, each claim says when the next job is
/// due, counts and `inspect` match the model,
/// and the buckets keep their shape: none empty, each inside its range, all
/// but the ones holding one due time many times small enough for Redis to
/// keep as a listpack, and each such one kept so.
#[tokio::test]
async fn the_time_index_keeps_order_and_small_buckets_through_random_changes() {
    use std::collections::HashMap;
    let (_redis, q, k, mut raw) = topic().await;
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut now = 1_000_000u64;
    let mut model: HashMap<String, u64> = HashMap::new();
    let mut next = 0;
    for round in 0..40 {
        // enqueue: spread over a minute, a shared due time, a few already due
        let shared = now + 1_000 * (1 + random(30));
        let mut batch = Vec::new();
        for i in 0..(50 + random(400)) {
            let due = match i % 10 {
                0 => shared,
                1 => now.saturating_sub(random(5_000)),
                _ => now + random(60_000),
            };
            next += 1;
            batch.push(job(Some(&format!("j{next}")), due));
        }
        for answer in q.enqueue(&k, &batch, now).await.unwrap() {
            assert!(matches!(answer, Enqueued::New(_)), "{answer:?}");
        }
        for j in &batch {
            model.insert(j.id.clone().unwrap(), j.due_at_ms);
        }
        // cancel and replace a few waiting ones
        let mut waiting: Vec<String> = model.keys().cloned().collect();
        waiting.sort();
        for _ in 0..5 {
            let id = waiting[random(waiting.len() as u64) as usize].clone();
            if model.remove(&id).is_some() {
                let was = q
                    .admin()
                    .cancel(&k, std::slice::from_ref(&id), now, None)
                    .await
                    .unwrap();
                assert!(was[0].is_some(), "{id} was waiting");
            }
        }
        for _ in 0..5 {
            let id = waiting[random(waiting.len() as u64) as usize].clone();
            if let Some(waits) = model.get_mut(&id) {
                let due = now + random(30_000);
                let mut j = job(Some(&id), due);
                j.replace = true;
                let answer = q.enqueue(&k, &[j], now).await.unwrap();
                assert!(matches!(answer[0], Enqueued::Replaced(_)), "{answer:?}");
                *waits = due;
            }
        }
        // a random waiting job reads back with its due time
        let id = &waiting[random(waiting.len() as u64) as usize];
        let view = q.inspect(&k, id, now).await.unwrap();
        match (model.get(id), view.map(|v| v.state)) {
            (Some(due), Some(JobState::Scheduled(d) | JobState::Ready(d))) => {
                assert_eq!(*due, d, "{id}")
            }
            (None, None) => {}
            other => panic!("{id}: {other:?}"),
        }
        // the clock moves on; everything due is claimed, in order, exactly once
        now += random(8_000);
        let stats = q.stats(&k, now).await.unwrap();
        let ready = model.values().filter(|d| **d <= now).count() as u64;
        assert_eq!(
            (stats.ready, stats.ready + stats.scheduled),
            (ready, model.len() as u64),
            "round {round}"
        );
        let mut last = 0;
        let mut retried = Vec::new();
        loop {
            let claimed = q.pipeline().claim(&k, now, now + 60_000, 64).await.unwrap();
            for c in &claimed.jobs {
                let due = model
                    .remove(&c.id)
                    .unwrap_or_else(|| panic!("{} claimed twice or never enqueued", c.id));
                assert_eq!(due, c.due_at_ms, "{}", c.id);
                assert!(
                    due <= now && due >= last,
                    "{} due {due}, now {now}, last {last}",
                    c.id
                );
                last = due;
            }
            // each claim says when the first job still waiting is due
            assert_eq!(
                claimed.next_due_ms,
                model.values().min().copied(),
                "round {round}: the next due time"
            );
            if claimed.jobs.is_empty() {
                break;
            }
            // one in eight fails and waits again
            let (again, finished): (Vec<_>, Vec<_>) =
                claimed.jobs.iter().partition(|_| random(8) == 0);
            q.pipeline()
                .ack(
                    &k,
                    &finished
                        .iter()
                        .map(|c| done(&c.id, c.attempt))
                        .collect::<Vec<_>>(),
                    now,
                    Default::default(),
                )
                .await
                .unwrap();
            for c in again {
                retried.push((c.id.clone(), c.attempt, now + 1 + random(20_000)));
            }
        }
        let failed: Vec<hourglass::redis::Retrying> = retried
            .iter()
            .map(|(id, attempt, due)| hourglass::redis::Retrying {
                logs: String::new(),
                id: id.clone(),
                attempt: *attempt,
                next_due_ms: *due,
                failure: hourglass::redis::Failure {
                    error: "again".into(),
                    handler: None,
                    at: now,
                    attempts: Vec::new(),
                },
            })
            .collect();
        assert!(
            q.pipeline()
                .retry(&k, &failed, Default::default())
                .await
                .unwrap()
                .is_empty()
        );
        for (id, _, due) in retried {
            model.insert(id, due);
        }
        // the buckets' shape
        let buckets = zset(&mut raw, &k.pending).await;
        let mut held = 0;
        for (i, (name, bound)) in buckets.iter().enumerate() {
            let key = format!("{}:{name}", k.pending);
            let entries = zset(&mut raw, &key).await;
            assert!(!entries.is_empty(), "round {round}: bucket {name} is empty");
            let (low, high) = (entries[0].1, entries[entries.len() - 1].1);
            assert!(
                low >= *bound,
                "round {round}: bucket {name} holds {low} below its bound {bound}"
            );
            if let Some((_, after)) = buckets.get(i + 1) {
                assert!(
                    high < *after,
                    "round {round}: bucket {name} holds {high}, the next starts at {after}"
                );
            }
            // Redis keeps a zset of up to 128 entries as a listpack, but once
            // one is a skiplist it stays one as it shrinks: a split rewrites
            // the piece it keeps
            let encoding: String = redis::cmd("OBJECT")
                .arg("ENCODING")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap();
            if entries.len() <= 128 {
                assert_eq!(
                    encoding,
                    "listpack",
                    "round {round}: bucket {name} of {} entries",
                    entries.len()
                );
            }
            if entries.len() > 128 {
                let mut runs: HashMap<u64, usize> = HashMap::new();
                for (_, d) in &entries {
                    *runs.entry(*d).or_default() += 1;
                }
                let most = runs.values().max().unwrap();
                assert!(
                    *most > 48,
                    "round {round}: bucket {name} has {} entries, at most {most} due at once",
                    entries.len()
                );
            }
            held += entries.len();
        }
        assert_eq!(
            held,
            model.len(),
            "round {round}: the index holds what waits"
        );
    }
    assert!(
        model.len() > 1_000,
        "the test kept a backlog: {}",
        model.len()
    );
}

/// Batches enqueued one after another, each due after everything before it
/// (a bulk load due now, call after call), each start a bucket of their own:
/// no bucket is read back and cut, so no job is moved twice (Redis counts no
/// ZREMRANGEBYRANK, the cut's removal, before the first claim). A batch
/// partly inside an earlier bucket's range adds that part to it; fewer than
/// a bucket's worth (48) due after all join the last bucket. Claims then take
/// every job once, in due order.
#[tokio::test]
async fn batches_due_one_after_another_each_start_a_bucket_and_move_no_job_twice() {
    let (_redis, q, k, mut raw) = topic().await;
    let batch = |name: &str, n: usize, due: u64| -> Vec<hourglass::redis::NewJob> {
        (0..n)
            .map(|i| job(Some(&format!("{name}-{i:04}")), due))
            .collect()
    };
    for (b, due) in [1_000, 2_000, 3_000, 4_000].into_iter().enumerate() {
        q.enqueue(&k, &batch(&format!("b{b}"), 500, due), 0)
            .await
            .unwrap();
    }
    // 30 inside the second bucket's range, 300 after all, then 20 after all
    let mut mixed = batch("in", 30, 2_500);
    mixed.extend(batch("after", 300, 5_000));
    q.enqueue(&k, &mixed, 0).await.unwrap();
    q.enqueue(&k, &batch("few", 20, 6_000), 0).await.unwrap();

    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .unwrap();
    let cuts = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_zremrangebyrank:"))
        .unwrap_or("none");
    assert_eq!(cuts, "none", "a bucket was read back and cut");
    let mut shape = Vec::new();
    for (name, bound) in zset(&mut raw, &k.pending).await {
        let entries = zset(&mut raw, &format!("{}:{name}", k.pending)).await;
        shape.push((bound, entries.len()));
    }
    assert_eq!(
        shape,
        [
            (1_000, 500),
            (2_000, 530),
            (3_000, 500),
            (4_000, 500),
            (5_000, 320)
        ]
    );

    let mut last = 0;
    let mut claimed = 0;
    loop {
        let got = q.pipeline().claim(&k, 10_000, 70_000, 64).await.unwrap();
        if got.jobs.is_empty() {
            break;
        }
        for c in &got.jobs {
            assert!(
                c.due_at_ms >= last,
                "{} due {} after {last}",
                c.id,
                c.due_at_ms
            );
            last = c.due_at_ms;
        }
        claimed += got.jobs.len();
        let finished: Vec<_> = got.jobs.iter().map(|c| done(&c.id, c.attempt)).collect();
        q.pipeline()
            .ack(&k, &finished, 10_000, Default::default())
            .await
            .unwrap();
    }
    assert_eq!(claimed, 4 * 500 + 30 + 300 + 20);
}

/// Redis's count of calls of each command since the last `CONFIG RESETSTAT`.
async fn calls(
    raw: &mut redis::aio::MultiplexedConnection,
) -> std::collections::HashMap<String, u64> {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await
        .unwrap();
    stats
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            Some((name.to_owned(), rest.split(',').next()?.parse().ok()?))
        })
        .collect()
}

/// A plain topic (no pause, deadlines, failures, accounts, journals,
/// priorities or tenant keys) pays for what it lacks with one EXISTS a claim
/// and one an ack, and a claim under a backlog makes eight calls in all: the
/// one extra job it reads tells it the bucket is not emptied and when the next
/// job is due. Each claim still says when that is.
#[tokio::test]
async fn a_plain_topic_claims_and_acks_in_a_few_calls_and_still_knows_what_is_next() {
    let (_redis, q, k, mut raw) = topic().await;
    let mut jobs: Vec<_> = (0..500)
        .map(|i| job(Some(&format!("j{i:03}")), 1_000))
        .collect();
    jobs.push(job(Some("later"), 5_000));
    q.enqueue(&k, &jobs, 0).await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw)
        .await
        .unwrap();

    let (mut claims, mut acks, mut nexts) = (0, 0, Vec::new());
    loop {
        let got = q.pipeline().claim(&k, 2_000, 70_000, 40).await.unwrap();
        claims += 1;
        nexts.push(got.next_due_ms);
        if got.jobs.is_empty() {
            break;
        }
        let finished: Vec<_> = got.jobs.iter().map(|c| done(&c.id, c.attempt)).collect();
        assert!(
            q.pipeline()
                .ack(&k, &finished, 2_000, Default::default())
                .await
                .unwrap()
                .is_empty()
        );
        acks += 1;
    }
    // 12 claims of 40 with more at 1000 left, one of the last 20, one of none
    let mut want = vec![Some(1_000); 12];
    want.extend([Some(5_000), Some(5_000)]);
    assert_eq!(nexts, want);

    let calls = calls(&mut raw).await;
    let all: u64 = calls
        .iter()
        .filter(|(name, _)| {
            !name.starts_with("eval") && !name.contains('|') && name.as_str() != "info"
        })
        .map(|(_, n)| n)
        .sum();
    // one EXISTS a script, and one more in each of the last two claims: the
    // bucket held no more due by now, but may hold later jobs (it does)
    assert_eq!(calls.get("exists"), Some(&(claims + acks + 2)), "{calls:?}");
    assert_eq!(calls.get("hsetnx"), None, "{calls:?}");
    // a claim of 40 from a bucket that keeps more: 8 calls; an ack: 5
    assert!(
        all <= 8 * claims + 5 * acks + 8,
        "{all} calls for {claims} claims and {acks} acks: {calls:?}"
    );
}
