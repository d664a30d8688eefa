//! What the upgrade refuses: a changed request body on an effects journal, a
//! job that wakes during its check (the stale check), and each part of the
//! fence `upgrade.lua` holds a move to, changed alone.

use crate::util::{Project, Running, eventually, hash_of};
use hourglass::clock::now_ms;
use test_support::{HttpServer, Reply};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_effects_journal_a_changed_request_body_is_not_moved() {
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let project = Project::new("concurrency = 4", &topic(&shop, "journal = \"effects\""));
    crate::util::deploy(
        &project.handler("checkout.wasm"),
        &std::fs::read(RUST.v[0]).unwrap(),
    );
    let v1 = hash_of(RUST.v[0]);
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let keys = queue.keys("checkout");
    // `noticed` posts a notice (outside any step: recorded by the effects
    // journal) before it sleeps; `quiet` does not
    let noticed = crate::util::enqueue(
        &queue,
        "checkout",
        &order(&shop, 1, r#", "notice": true"#),
        0,
        0,
    )
    .await;
    let quiet = crate::util::enqueue(&queue, "checkout", &order(&shop, 2, ""), 0, 0).await;
    suspended(&queue, 2).await;
    assert_eq!(calls(&shop, "notice"), 1);
    let v2 = deploy(&project, &queue, RUST.v[1]).await;
    let report = upgrade(&project, &v2, &[&noticed, &quiet]).await;
    assert_eq!(
        ids(&report["moved"]),
        std::slice::from_ref(&quiet),
        "{report}"
    );
    let left = &report["left"][0];
    assert_eq!(left["id"], noticed.as_str());
    assert_eq!(
        left["reason"],
        format!(
            "journal divergence at effect 1: recorded POST {}/notice?order=1 with a body of 7 bytes, now the same request with a different body of 25 bytes",
            shop.url()
        )
        .as_str(),
        "{left}"
    );
    assert_eq!(calls(&shop, "notice"), 1, "the check sent nothing");
    let pinned = queue
        .journal(&keys, &noticed)
        .await
        .unwrap()
        .0
        .unwrap()
        .version;
    assert_eq!(pinned.as_deref(), Some(v1.as_str()));
    let finished = wake_until_acked(&mut running, &queue, &[noticed.clone(), quiet.clone()]).await;
    assert_eq!(
        finished[0].1,
        std::slice::from_ref(&v1),
        "the noticed job finished on v1"
    );
    assert_eq!(
        finished[1].1,
        std::slice::from_ref(&v2),
        "the quiet one on v2"
    );
    assert_eq!(
        calls(&shop, "notice"),
        1,
        "its notice replayed from the journal"
    );
    assert_eq!(
        calls(&shop, "receipt"),
        1,
        "v2's new step ran for the quiet job only"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_wakes_during_its_check_is_not_moved_by_the_stale_check() {
    use hourglass::upgrade::{Upgrader, Which};
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let project = Project::new("concurrency = 4", &topic(&shop, ""));
    crate::util::deploy(
        &project.handler("checkout.wasm"),
        &std::fs::read(RUST.v[0]).unwrap(),
    );
    let v1 = hash_of(RUST.v[0]);
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let keys = queue.keys("checkout");
    // it sleeps, then waits for an approval
    let id = crate::util::enqueue(
        &queue,
        "checkout",
        &order(&shop, 1, r#", "approval_ms": 3600000"#),
        0,
        0,
    )
    .await;
    suspended(&queue, 1).await;
    let v2 = deploy(&project, &queue, RUST.v[1]).await;
    let runtime = std::sync::Arc::new(
        hourglass::wasm::Runtime::new(4, Some(crate::util::shared_compile_cache())).unwrap(),
    );
    let candidate = runtime.load(std::path::Path::new(RUST.v[1])).unwrap();
    let upgrader = Upgrader::new(queue.clone(), runtime, hourglass::redis::DEFAULT_PAYLOAD);
    let config = project.config();
    let cfg = config.topic("checkout").unwrap();
    let plan = upgrader
        .check(cfg, &candidate, Which::Ids(vec![id.clone()]), false)
        .await
        .unwrap();
    assert_eq!(plan.report().checked, 1);
    assert!(plan.report().left.is_empty(), "{:?}", plan.report());
    // the job wakes, runs on v1 and suspends again (at the approval) before the move
    queue.wake(&keys, &id, now_ms()).await.unwrap();
    eventually(WAIT, "the job waits for its approval", || async {
        let (journal, waits) = queue.journal(&keys, &id).await.map_err(|e| e.to_string())?;
        match (journal, waits) {
            (Some(j), Some(w))
                if w.signal.as_deref() == Some("approved") && j.timers.len() == 2 =>
            {
                Ok(())
            }
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    let report = upgrader.apply(plan).await.unwrap();
    assert!(report.moved.is_empty(), "{report:?}");
    assert!(
        report.left[0]
            .reason
            .contains("a stale check moves nothing"),
        "{report:?}"
    );
    let pinned = queue.journal(&keys, &id).await.unwrap().0.unwrap().version;
    assert_eq!(pinned.as_deref(), Some(v1.as_str()), "not moved");
    // checked again as it is now, it moves
    let report = upgrader
        .run(cfg, &candidate, Which::Ids(vec![id.clone()]), false)
        .await
        .unwrap();
    assert_eq!(report.moved.len(), 1, "{report:?}");
    assert!(
        report.moved[0]
            .detail
            .contains("the wait for signal \"approved\", where the job waits"),
        "{report:?}"
    );
    drain(&mut running);
    queue
        .signal(&keys, &id, "approved", b"ops", now_ms())
        .await
        .unwrap();
    let finished = until_acked(&mut running, std::slice::from_ref(&id)).await;
    assert_eq!(finished[0].1, std::slice::from_ref(&v2));
    running.stop().await;
}

/// `upgrade.lua` moves a job only as the check read it: each part of the
/// fence (its attempt counter, its journal's field count, what it waits for,
/// its pin, not running, not dead), changed alone after the read, leaves it
/// where it is; put back, the same read moves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_part_of_the_moves_fence_changed_alone_leaves_the_job() {
    use hourglass::redis::Moved;
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let project = Project::new("concurrency = 4", &topic(&shop, ""));
    crate::util::deploy(
        &project.handler("checkout.wasm"),
        &std::fs::read(RUST.v[0]).unwrap(),
    );
    let queue = project.queue().await;
    let running = Running::start(project.config()).await;
    let keys = queue.keys("checkout");
    let id = crate::util::enqueue(&queue, "checkout", &order(&shop, 1, ""), 0, 0).await;
    suspended(&queue, 1).await;
    // nothing else touches it now
    running.stop().await;
    let read = queue.upgrades().read(&keys, &id).await.unwrap().unwrap();
    let to = hash_of(RUST.v[1]);
    let client = redis::Client::open(project.endpoint.urls()[0].as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let journal = keys.journal_of(&id);
    let hget = |key: &str, field: &str| redis::cmd("HGET").arg(key).arg(field).clone();
    let attempts: Option<String> = hget(&keys.attempt, &id)
        .query_async(&mut conn)
        .await
        .unwrap();
    let waits: String = hget(&keys.suspended, &id)
        .query_async(&mut conn)
        .await
        .unwrap();
    let pin: String = hget(&journal, "v").query_async(&mut conn).await.unwrap();
    let set = |key: &str, field: &str, value: &str| {
        redis::cmd("HSET").arg(key).arg(field).arg(value).clone()
    };
    let put_attempts = match &attempts {
        Some(a) => set(&keys.attempt, &id, a),
        None => redis::cmd("HDEL").arg(&keys.attempt).arg(&id).clone(),
    };
    let cases: Vec<(&str, redis::Cmd, redis::Cmd, Moved)> = vec![
        (
            "its attempt counter",
            set(&keys.attempt, &id, "7"),
            put_attempts,
            Moved::Changed,
        ),
        (
            "its journal's field count",
            set(&journal, "zz-extra", "x"),
            redis::cmd("HDEL").arg(&journal).arg("zz-extra").clone(),
            Moved::Changed,
        ),
        (
            "what it waits for",
            set(&keys.suspended, &id, "other"),
            set(&keys.suspended, &id, &waits),
            Moved::Changed,
        ),
        (
            "its pin",
            set(&journal, "v", "0123456789abcdef"),
            set(&journal, "v", &pin),
            Moved::Changed,
        ),
        (
            "running",
            redis::cmd("ZADD").arg(&keys.lease).arg(1).arg(&id).clone(),
            redis::cmd("ZREM").arg(&keys.lease).arg(&id).clone(),
            Moved::Running,
        ),
        (
            "dead",
            redis::cmd("ZADD").arg(&keys.dead).arg(1).arg(&id).clone(),
            redis::cmd("ZREM").arg(&keys.dead).arg(&id).clone(),
            Moved::Dead,
        ),
    ];
    for (what, change, undo, answer) in cases {
        let _: redis::Value = change.query_async(&mut conn).await.unwrap();
        let moved = queue.upgrades().apply(&keys, &to, &[&read]).await.unwrap();
        assert_eq!(moved, [answer], "{what} changed alone");
        let now: String = hget(&journal, "v").query_async(&mut conn).await.unwrap();
        let expected = if what == "its pin" {
            "0123456789abcdef"
        } else {
            pin.as_str()
        };
        assert_eq!(now, expected, "{what}: the pin is as it was");
        let _: redis::Value = undo.query_async(&mut conn).await.unwrap();
    }
    let moved = queue.upgrades().apply(&keys, &to, &[&read]).await.unwrap();
    assert_eq!(
        moved,
        [Moved::Moved],
        "all put back, the same read moves it"
    );
    let now: String = hget(&journal, "v").query_async(&mut conn).await.unwrap();
    assert_eq!(now, to);
}
