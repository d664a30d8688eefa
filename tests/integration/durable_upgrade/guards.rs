//! What the upgrade refuses: a changed request body on an effects journal, and
//! a job that wakes during its check (the stale check).

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
