//! Changing durable code while its jobs sleep (`hourglass upgrade`, the
//! replay check, `patched`, versions that hold jobs). The checkout saga
//! (Rust: `handlers/checkout` and its `_v2`..`_v4`; Python:
//! `tests/support/py-checkout` built once per version) calls a real local
//! HTTP server that counts every request: the checks must send none.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::{Enqueued, NewJob, Queue};
use serde_json::Value;
use test_support::{HttpServer, Reply};

use crate::util::{Project, Running, eventually, hash_of, hourglass, hourglass_within};

const WAIT: Duration = Duration::from_secs(120);
/// The jobs of each batch of the story.
const JOBS: usize = 200;

/// One language's four versions of the saga.
struct Saga {
    v: [&'static str; 4],
}

const RUST: Saga = Saga {
    v: [
        test_support::components::CHECKOUT,
        test_support::components::CHECKOUT_V2,
        test_support::components::CHECKOUT_V3,
        test_support::components::CHECKOUT_V4,
    ],
};

const PYTHON: Saga = Saga {
    v: [
        test_support::components::PY_CHECKOUT_V1,
        test_support::components::PY_CHECKOUT_V2,
        test_support::components::PY_CHECKOUT_V3,
        test_support::components::PY_CHECKOUT_V4,
    ],
};

fn topic(shop: &HttpServer, extra: &str) -> String {
    format!(
        "[[topic]]\nname = \"checkout\"\nhandler = \"checkout.wasm\"\nconcurrency = 16\n\
         timeout = \"20s\"\nmax_attempts = 3\nbackoff = {{ base = \"50ms\", max = \"50ms\", jitter = 0.0 }}\n\
         grants = {{ http = [\"{}\"] }}\n{extra}\n",
        shop.url()
    )
}

/// The shop's calls to `step`, all orders together.
fn calls(shop: &HttpServer, step: &str) -> usize {
    shop.received()
        .iter()
        .filter(|r| r.path.starts_with(&format!("/{step}?")))
        .count()
}

fn order(shop: &HttpServer, n: usize, extra: &str) -> String {
    format!(
        r#"{{"order": {n}, "shop": "{}", "sleep_ms": 3600000{extra}}}"#,
        shop.url()
    )
}

/// Enqueue `JOBS` jobs `<batch>-<n>`, on `version` if given; their ids.
async fn batch(
    queue: &Queue,
    shop: &HttpServer,
    batch: &str,
    version: Option<&str>,
    extra: &str,
) -> Vec<String> {
    let now = now_ms();
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|n| NewJob {
            id: Some(format!("{batch}-{n}")),
            payload: order(shop, n, extra).into_bytes(),
            due_at_ms: now,
            version: version.map(str::to_owned),
            ..Default::default()
        })
        .collect();
    let answers = queue
        .enqueue(&queue.keys("checkout"), &jobs, now)
        .await
        .unwrap();
    answers
        .into_iter()
        .map(|a| match a {
            Enqueued::New(id) => id,
            other => panic!("enqueue answered {other:?}"),
        })
        .collect()
}

/// Wait until `n` jobs of the topic are suspended.
async fn suspended(queue: &Queue, n: u64) {
    let keys = queue.keys("checkout");
    eventually(WAIT, "the jobs suspended", || async {
        let stats = queue
            .stats(&keys, now_ms())
            .await
            .map_err(|e| e.to_string())?;
        if stats.suspended == n && stats.running == 0 {
            Ok(())
        } else {
            Err(format!("{stats:?}"))
        }
    })
    .await;
}

/// Serve `component` from the topic's file and wait until the topic keeps it.
async fn deploy(project: &Project, queue: &Queue, component: &str) -> String {
    crate::util::deploy(
        &project.handler("checkout.wasm"),
        &std::fs::read(component).unwrap(),
    );
    let version = hash_of(component);
    let keys = queue.keys("checkout");
    eventually(WAIT, "the topic keeps the new version", || async {
        let kept = queue
            .rollouts()
            .kept_versions(&keys)
            .await
            .map_err(|e| e.to_string())?;
        if kept.contains(&version) {
            Ok(())
        } else {
            Err(format!("{kept:?}"))
        }
    })
    .await;
    version
}

/// `hourglass upgrade checkout --to VERSION ARGS --json`: the report.
async fn upgrade(project: &Project, to: &str, args: &[&str]) -> Value {
    let mut all = vec!["upgrade", "checkout", "--to", to, "--json"];
    all.extend_from_slice(args);
    let out = hourglass_within(project, &all, WAIT).await;
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// Forget the events so far.
fn drain(running: &mut Running) {
    while running.events.try_recv().is_ok() {}
}

/// Wake every job of `ids` and wait until each acked; the versions each
/// attempt after the wake started on, per job.
async fn wake_until_acked(
    running: &mut Running,
    queue: &Queue,
    ids: &[String],
) -> Vec<(String, Vec<String>)> {
    drain(running);
    let keys = queue.keys("checkout");
    for id in ids {
        queue.wake(&keys, id, now_ms()).await.unwrap();
    }
    until_acked(running, ids).await
}

/// Wait until each of `ids` acked; the versions its attempts since the
/// last [`drain`] started on, per job.
async fn until_acked(running: &mut Running, ids: &[String]) -> Vec<(String, Vec<String>)> {
    let events = running
        .until(WAIT, |seen| {
            ids.iter().all(|id| {
                seen.iter()
                    .any(|e| &e.id == id && e.kind == EventKind::Acked)
            })
        })
        .await;
    ids.iter()
        .map(|id| {
            let versions = events
                .iter()
                .filter(|e| &e.id == id)
                .filter_map(|e| match &e.kind {
                    EventKind::Started { handler, .. } => Some(handler.clone()),
                    EventKind::Dead { reason } => panic!("{id} died: {reason}"),
                    _ => None,
                })
                .collect();
            (id.clone(), versions)
        })
        .collect()
}

/// The story of the issue, in one language: 200 jobs asleep on v1 for each
/// of v2 (movable: a dry run says so and sends nothing, the upgrade moves
/// them, they finish on v2 and run its new step once), v3 (a renamed step:
/// none moves, each says which step, they finish on v1) and v4 (the rename
/// under `patched`: all move, old jobs keep the old step, new ones take the
/// new one, and `hourglass versions` counts both).
async fn story(saga: &Saga) {
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let project = Project::new("concurrency = 32", &topic(&shop, ""));
    crate::util::deploy(
        &project.handler("checkout.wasm"),
        &std::fs::read(saga.v[0]).unwrap(),
    );
    let v1 = hash_of(saga.v[0]);
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let a = batch(&queue, &shop, "a", None, "").await;
    suspended(&queue, JOBS as u64).await;
    assert_eq!(calls(&shop, "charge"), JOBS);

    // v2: a log line before the sleep, a new step after the email
    let v2 = deploy(&project, &queue, saga.v[1]).await;
    let before = shop.received().len();
    let dry = upgrade(&project, &v2, &["--all", "--dry-run"]).await;
    assert_eq!(shop.received().len(), before, "a check sends nothing");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["checked"], JOBS);
    assert_eq!(ids(&dry["moved"]), sorted(a.clone()), "{dry}");
    assert_eq!(dry["left"].as_array().unwrap().len(), 0, "{dry}");
    let first = &dry["moved"][0];
    assert!(
        first["logs"][0]
            .as_str()
            .unwrap()
            .contains("reserved; waiting"),
        "what the candidate logged is kept: {first}"
    );
    assert!(
        first["detail"]
            .as_str()
            .unwrap()
            .contains("where the job sleeps"),
        "{first}"
    );
    let keys = queue.keys("checkout");
    let pinned = queue
        .journal(&keys, &a[0])
        .await
        .unwrap()
        .0
        .unwrap()
        .version;
    assert_eq!(
        pinned.as_deref(),
        Some(v1.as_str()),
        "a dry run moves nothing"
    );
    let moved = upgrade(&project, &v2, &["--all"]).await;
    assert_eq!(ids(&moved["moved"]), sorted(a.clone()), "{moved}");
    assert_eq!(shop.received().len(), before, "nor does an upgrade");
    for (id, versions) in wake_until_acked(&mut running, &queue, &a).await {
        assert_eq!(versions, std::slice::from_ref(&v2), "{id} finished on v2");
    }
    assert_eq!(calls(&shop, "receipt"), JOBS, "v2's new step, once each");
    assert_eq!(calls(&shop, "charge"), JOBS, "nothing charged twice");

    // v3: a recorded step renamed
    let b = batch(&queue, &shop, "b", Some(&v1), "").await;
    suspended(&queue, JOBS as u64).await;
    let v3 = deploy(&project, &queue, saga.v[2]).await;
    let refused = upgrade(&project, &v3, &["--all"]).await;
    assert_eq!(refused["moved"].as_array().unwrap().len(), 0, "{refused}");
    assert_eq!(ids(&refused["left"]), sorted(b.clone()));
    let difference =
        format!("step 2: recorded \"reserve\", version {v3} asks for \"reserve-stock\"");
    for left in refused["left"].as_array().unwrap() {
        assert_eq!(left["reason"], difference.as_str(), "{left}");
        assert_eq!(left["version"], v1.as_str());
    }
    for (id, versions) in wake_until_acked(&mut running, &queue, &b).await {
        assert_eq!(versions, std::slice::from_ref(&v1), "{id} finished on v1");
    }
    assert_eq!(calls(&shop, "reserve-stock"), 0);

    // v4: the rename under `patched`; these jobs wait for an approval
    // after their sleep, so that they stay while the patch is counted
    let c = batch(&queue, &shop, "c", Some(&v1), r#", "approval_ms": 3600000"#).await;
    suspended(&queue, JOBS as u64).await;
    let v4 = deploy(&project, &queue, saga.v[3]).await;
    let moved = upgrade(&project, &v4, &["--all"]).await;
    assert_eq!(ids(&moved["moved"]), sorted(c.clone()), "{moved}");
    // new jobs take the new path, and sleep too
    let d = batch(&queue, &shop, "d", None, "").await;
    suspended(&queue, 2 * JOBS as u64).await;
    assert_eq!(
        calls(&shop, "reserve-stock"),
        JOBS,
        "new jobs: the new path"
    );
    let reserved = calls(&shop, "reserve");
    drain(&mut running);
    for id in &c {
        queue.wake(&keys, id, now_ms()).await.unwrap();
    }
    // woken, the moved jobs meet the patch (old path), then wait for approval
    let patches =
        serde_json::json!([{ "name": "reserve-stock", "old_path": JOBS, "new_path": JOBS }]);
    let versions = eventually(WAIT, "the moved jobs on the old path, waiting", || async {
        let out = hourglass(&project, &["versions", "checkout", "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        let stats = queue
            .stats(&keys, now_ms())
            .await
            .map_err(|e| e.to_string())?;
        if v["patches"] == patches && stats.running == 0 && stats.suspended == 2 * JOBS as u64 {
            Ok(v)
        } else {
            Err(format!("{v} {stats:?}"))
        }
    })
    .await;
    let held = |v: &str| {
        versions["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["version"] == v)
            .map(|k| k["live_jobs"].clone())
    };
    assert_eq!(held(&v4), Some(Value::from(2 * JOBS)), "{versions}");
    assert_eq!(held(&v1), Some(Value::from(0)), "{versions}");
    for id in &c {
        queue
            .signal(&keys, id, "approved", b"ops", now_ms())
            .await
            .unwrap();
    }
    for (id, versions) in until_acked(&mut running, &c).await {
        assert_eq!(versions, [v4.clone(), v4.clone()], "{id} finished on v4");
    }
    assert_eq!(
        calls(&shop, "reserve"),
        reserved,
        "old jobs kept the old (recorded) step"
    );
    assert_eq!(
        calls(&shop, "reserve-stock"),
        JOBS,
        "and did not take the new one"
    );
    for (id, versions) in wake_until_acked(&mut running, &queue, &d).await {
        assert_eq!(versions, std::slice::from_ref(&v4), "{id} ran on v4");
    }
    assert_eq!(calls(&shop, "receipt"), 3 * JOBS);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_jobs_asleep_on_v1_move_only_where_their_journal_replays() {
    story(&RUST).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_jobs_asleep_on_v1_move_only_where_their_journal_replays() {
    story(&PYTHON).await;
}

mod guards;
