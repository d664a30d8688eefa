//! Tenant keys in Redis alone, the clock in the test's hands: keys taking
//! turns in due order (both ways: `claim_tagged.lua`, `claim_fair.lua`),
//! weights, a key with only delayed jobs, no saved credit, cancelling and
//! replacing a queued job, fairness switched off or changed, bad keys.
//! Per-key limits: `tenant_limits.rs`.

use hourglass::redis::{Cancelled, ClaimedJob, Done, Fairness, NewJob, Queue, Share, TopicKeys};

use crate::util::RedisServer;

pub(crate) fn keyed(id: &str, key: &str, due: u64) -> NewJob {
    NewJob {
        id: Some(id.to_owned()),
        payload: b"p".to_vec(),
        due_at_ms: due,
        key: (!key.is_empty()).then(|| key.to_owned()),
        ..Default::default()
    }
}

pub(crate) fn done(job: &ClaimedJob) -> Done {
    Done {
        logs: String::new(),
        notice: None,
        end: None,
        id: job.id.clone(),
        attempt: job.attempt,
        follow_ups: vec![],
        flows: Vec::new(),
    }
}

pub(crate) const JOBS: Fairness = Fairness {
    share: Share::Jobs,
    key_concurrency: 0,
    key_rate: None,
};

pub(crate) async fn claim(
    q: &Queue,
    k: &TopicKeys,
    now: u64,
    most: usize,
    fair: &Fairness,
) -> Vec<ClaimedJob> {
    q.pipeline()
        .claim_ahead(k, now, now, now + 60_000, most, None, Some(fair))
        .await
        .unwrap()
        .jobs
}

pub(crate) fn keys_of(jobs: &[ClaimedJob]) -> Vec<&str> {
    jobs.iter().map(|j| j.key.as_deref().unwrap()).collect()
}

/// A server of the test's own and the keys of topic `exports` on it.
pub(crate) async fn open() -> (RedisServer, Queue, TopicKeys) {
    let redis = RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("exports");
    (redis, q, k)
}

/// The ids of claimed jobs, in claim order.
pub(crate) fn ids(jobs: &[ClaimedJob]) -> Vec<&str> {
    jobs.iter().map(|j| j.id.as_str()).collect()
}

/// One heavy key enqueued first with 1,000 jobs, then three light keys with
/// 10 each, all due when enqueued: claims take the keys in turn (never two of the
/// heavy key while a light one waits), and within a key in due order.
#[tokio::test]
async fn keys_take_turns_and_each_keeps_due_order() {
    let (_redis, q, k) = open().await;
    let mut jobs: Vec<NewJob> = (0..1000)
        .map(|i| keyed(&format!("h{i}"), "heavy", 1_000 + i))
        .collect();
    for light in ["a", "b", "c"] {
        jobs.extend((0..10).map(|i| keyed(&format!("{light}{i}"), light, 2_000 + i)));
    }
    // a first claim marks the topic as claiming fairly: jobs enqueued due
    // from then on go straight to their keys' queues
    assert!(claim(&q, &k, 0, 50, &JOBS).await.is_empty());
    q.enqueue(&k, &jobs, 3_000).await.unwrap();
    let mut order = Vec::new();
    let mut ids = Vec::new();
    while order.len() < 80 {
        let got = claim(&q, &k, 5_000, 8, &JOBS).await;
        assert!(!got.is_empty(), "claims ran dry after {}", order.len());
        order.extend(keys_of(&got).into_iter().map(str::to_owned));
        // each job answered with the due time it was enqueued with
        for j in &got {
            let n: u64 = j.id[1..].parse().unwrap();
            let due = if j.id.starts_with('h') { 1_000 } else { 2_000 } + n;
            assert_eq!(j.due_at_ms, due, "{}", j.id);
        }
        ids.extend(got.into_iter().map(|j| j.id));
    }
    // the first 40 claims: 10 of each light key, 10 of the heavy one
    let first: Vec<&String> = order.iter().take(40).collect();
    for key in ["heavy", "a", "b", "c"] {
        assert_eq!(
            first.iter().filter(|k| **k == key).count(),
            10,
            "{key} in {first:?}"
        );
    }
    // then only the heavy key is left
    assert!(order[40..].iter().all(|k| k == "heavy"), "{order:?}");
    // due order within each key
    for prefix in ["h", "a", "b", "c"] {
        let seq: Vec<u64> = ids
            .iter()
            .filter(|id| id.starts_with(prefix))
            .map(|id| id[1..].parse().unwrap())
            .collect();
        assert!(seq.windows(2).all(|w| w[0] < w[1]), "{prefix}: {seq:?}");
    }
    let stats = q.stats(&k, 5_000).await.unwrap();
    assert_eq!(
        stats.ready,
        1030 - 80,
        "queued jobs count as ready: {stats:?}"
    );
}

/// A key of weight 3 gets three starts for each of a key of weight 1.
#[tokio::test]
async fn a_weight_multiplies_a_keys_share() {
    let (_redis, q, k) = open().await;
    let mut jobs: Vec<NewJob> = (0..100)
        .map(|i| keyed(&format!("p{i}"), "paid", 1_000))
        .collect();
    jobs.extend((0..100).map(|i| keyed(&format!("f{i}"), "free", 1_000)));
    q.enqueue(&k, &jobs, 0).await.unwrap();
    q.tenants().set_weight(&k, "paid", 3).await.unwrap();
    let got = claim(&q, &k, 1_000, 80, &JOBS).await;
    let paid = keys_of(&got).iter().filter(|k| **k == "paid").count();
    assert_eq!((paid, got.len() - paid), (60, 20), "{:?}", keys_of(&got));
    for bad in [0, hourglass::redis::MAX_WEIGHT + 1] {
        let e = q.tenants().set_weight(&k, "paid", bad).await.unwrap_err();
        assert!(e.to_string().contains("weight"), "{e}");
    }
}

/// A key with only jobs due later is not ready: another key's due job is
/// claimed, the delayed key's job not before its time.
#[tokio::test]
async fn a_key_with_only_delayed_jobs_does_not_count_as_ready() {
    let (_redis, q, k) = open().await;
    q.enqueue(
        &k,
        &[keyed("later", "x", 9_000), keyed("now", "y", 1_000)],
        0,
    )
    .await
    .unwrap();
    let claimed = q
        .pipeline()
        .claim_ahead(&k, 1_000, 1_000, 60_000, 10, None, Some(&JOBS))
        .await
        .unwrap();
    assert_eq!(keys_of(&claimed.jobs), ["y"]);
    assert_eq!(
        claimed.next_due_ms,
        Some(9_000),
        "next: the delayed job's due time"
    );
    assert!(claim(&q, &k, 8_999, 10, &JOBS).await.is_empty());
    assert_eq!(keys_of(&claim(&q, &k, 9_000, 10, &JOBS).await), ["x"]);
}

/// A queued job (due, waiting its key's turn) can be cancelled and replaced
/// like any waiting job; switching fairness off puts queued jobs back in
/// due order for the plain claim.
#[tokio::test]
async fn queued_jobs_cancel_replace_and_go_back_when_fairness_is_off() {
    let (_redis, q, k) = open().await;
    let jobs: Vec<NewJob> = (0..4)
        .map(|i| keyed(&format!("j{i}"), "a", 1_000 + i))
        .collect();
    q.enqueue(&k, &jobs, 0).await.unwrap();
    // one claim tags every due job
    assert_eq!(claim(&q, &k, 2_000, 1, &JOBS).await[0].id, "j0");
    let cancelled = q
        .admin()
        .cancel(&k, &["j1".to_owned()], 2_000, None)
        .await
        .unwrap();
    assert_eq!(cancelled, [Some(Cancelled::Pending)]);
    let mut again = keyed("j2", "a", 5_000);
    again.replace = true;
    let replaced = q.enqueue(&k, &[again], 2_000).await.unwrap();
    assert!(
        matches!(replaced[0], hourglass::redis::Enqueued::Replaced(_)),
        "{replaced:?}"
    );
    q.tenants().fairness_off(&k).await.unwrap();
    let plain = q.pipeline().claim(&k, 4_000, 60_000, 10).await.unwrap();
    assert_eq!(ids(&plain.jobs), ["j3"]);
    let plain = q.pipeline().claim(&k, 5_000, 60_000, 10).await.unwrap();
    assert_eq!(ids(&plain.jobs), ["j2"]);
}

/// Bad keys are refused with a clear error, nothing stored.
#[tokio::test]
async fn bad_keys_are_refused() {
    let (_redis, q, k) = open().await;
    for (key, says) in [
        ("", "empty"),
        (&"k".repeat(129)[..], "over 128"),
        ("a b", "' '"),
    ] {
        let mut job = keyed("x", "", 0);
        job.key = Some(key.to_owned());
        let e = q.enqueue(&k, &[job], 0).await.unwrap_err();
        assert!(e.to_string().contains(says), "{key:?}: {e}");
    }
    assert_eq!(q.stats(&k, 0).await.unwrap().ready, 0);
}

/// A key that arrives while another has run alone for a while starts level
/// with it (the virtual clock), not with credit for the time it was away:
/// the two alternate instead of the newcomer taking every start.
#[tokio::test]
async fn a_key_that_comes_later_saves_no_credit() {
    let (_redis, q, k) = open().await;
    assert!(claim(&q, &k, 0, 1, &JOBS).await.is_empty());
    let early: Vec<NewJob> = (0..100)
        .map(|i| keyed(&format!("a{i}"), "a", 1_000))
        .collect();
    q.enqueue(&k, &early, 1_000).await.unwrap();
    assert_eq!(claim(&q, &k, 1_000, 50, &JOBS).await.len(), 50);
    let late: Vec<NewJob> = (0..50)
        .map(|i| keyed(&format!("b{i}"), "b", 2_000))
        .collect();
    q.enqueue(&k, &late, 2_000).await.unwrap();
    let next = claim(&q, &k, 2_000, 20, &JOBS).await;
    let b = keys_of(&next).iter().filter(|k| **k == "b").count();
    assert!(
        (9..=11).contains(&b),
        "the late key took {b} of 20: {:?}",
        keys_of(&next)
    );
}

/// Changing a topic's fairness settings (its share, a limit) sends the
/// queued jobs back to be tagged again under the new ones: none is lost,
/// none runs twice.
#[tokio::test]
async fn changing_the_share_or_a_limit_loses_nothing() {
    let (_redis, q, k) = open().await;
    let serial = Fairness {
        key_concurrency: 1,
        ..JOBS
    };
    assert!(claim(&q, &k, 0, 1, &JOBS).await.is_empty());
    let jobs: Vec<NewJob> = (0..6)
        .flat_map(|i| {
            [
                keyed(&format!("a{i}"), "a", 1_000 + i),
                keyed(&format!("b{i}"), "b", 1_000 + i),
            ]
        })
        .collect();
    q.enqueue(&k, &jobs, 2_000).await.unwrap();
    let mut seen: Vec<String> = claim(&q, &k, 2_000, 2, &JOBS)
        .await
        .into_iter()
        .map(|j| j.id)
        .collect();
    // a limit: the claim that finds jobs tagged without one moves them back first
    for _ in 0..3 {
        let got = claim(&q, &k, 2_000, 10, &serial).await;
        assert!(got.len() <= 2, "one per key at most: {:?}", keys_of(&got));
        for j in &got {
            q.pipeline()
                .ack(&k, &[done(j)], 2_000, Default::default())
                .await
                .unwrap();
        }
        seen.extend(got.into_iter().map(|j| j.id));
    }
    assert!(seen.len() >= 6, "served with the limit too: {seen:?}");
    // by CPU, one claim; then by jobs again
    let cpu = Fairness {
        share: Share::Cpu,
        ..JOBS
    };
    for fair in [&cpu, &cpu, &JOBS, &JOBS] {
        let got = claim(&q, &k, 2_000, 2, fair).await;
        seen.extend(got.into_iter().map(|j| j.id));
    }
    for _ in 0..3 {
        let got = claim(&q, &k, 2_000, 10, &JOBS).await;
        seen.extend(got.into_iter().map(|j| j.id));
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!((seen.len(), sorted.len()), (12, 12), "{seen:?}");
    assert_eq!(q.stats(&k, 2_000).await.unwrap().ready, 0);
}

/// Under share "cpu" a claim counts each key's queued jobs down by what it
/// took (`<fair>:len`): a key with one left reads 1, an emptied key is gone.
#[tokio::test]
async fn by_cpu_a_claim_counts_each_keys_queue_down_by_what_it_took() {
    let (redis, q, k) = open().await;
    let cpu = Fairness {
        share: Share::Cpu,
        ..JOBS
    };
    claim(&q, &k, 1_000, 1, &cpu).await;
    let jobs = [
        keyed("a1", "a", 1_000),
        keyed("a2", "a", 1_000),
        keyed("b1", "b", 1_000),
    ];
    q.enqueue(&k, &jobs, 1_000).await.unwrap();
    let got = claim(&q, &k, 1_000, 2, &cpu).await;
    assert_eq!(got.len(), 2, "{:?}", ids(&got));
    let mut conn = ::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lens: std::collections::BTreeMap<String, i64> = ::redis::cmd("HGETALL")
        .arg(format!("{}:len", k.fair))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        lens,
        [("a".to_owned(), 1)].into(),
        "one of a's left, b emptied"
    );
    let last = claim(&q, &k, 1_000, 2, &cpu).await;
    assert_eq!(ids(&last), ["a2"]);
}
