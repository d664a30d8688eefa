//! Pins and versions: a pin survives a restart, dead letters replay on the old
//! version, a runner without the canary's file, versions beyond `keep_versions`
//! forgotten, a bad canary and a pin on a Cluster.

use crate::util::{Monitor, Project, Running, deploy, enqueue, eventually, hash_of, hourglass};
use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::{NewJob, Queue};
use test_support::components::{ECHO, FLAKY, ORDER_CANCEL, PROBE};

use super::*;

/// Run `pay` jobs until one runs on `version` (a change reaching the runner).
async fn until_ran_on(runner: &mut Running, queue: &Queue, version: &str) {
    let runner = tokio::sync::Mutex::new(runner);
    eventually(WAIT, &format!("a job run on {version}"), || async {
        match ran_on(*runner.lock().await, queue).await {
            ran if ran == version => Ok(()),
            ran => Err(format!("run on {ran}")),
        }
    })
    .await;
}

/// Run one `pay` job; the version that ran it.
async fn ran_on(runner: &mut Running, queue: &Queue) -> String {
    let id = enqueue(queue, "pay", JOB, 0, 1).await;
    let events = runner.until_settled("pay", &id, WAIT).await;
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Started { handler, .. } if e.id == id => Some(handler.clone()),
            _ => None,
        })
        .expect("started")
}

fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_survives_a_restart_and_a_new_file_and_unpin_returns_to_the_file() {
    // no rollout policy: a new file replaces the old at once, as always
    let project = Project::new("concurrency = 4", &topic(""));
    let pay = project.handler("pay.wasm");
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    let (echo, flaky, probe) = (hash_of(ECHO), hash_of(FLAKY), hash_of(PROBE));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    assert_eq!(ran_on(&mut runner, &queue).await, echo);
    deploy(&pay, &std::fs::read(FLAKY).unwrap());
    until_ran_on(&mut runner, &queue, &flaky).await;

    let refused = hourglass(&project, &["pin", "pay", "0123456789abcdef"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("keeps no version 0123456789abcdef"));
    ok(hourglass(&project, &["pin", "pay", &echo]));
    until_ran_on(&mut runner, &queue, &echo).await;
    let listed: serde_json::Value =
        serde_json::from_str(&ok(hourglass(&project, &["versions", "pay", "--json"]))).unwrap();
    let role = |v: &str| {
        listed["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["version"] == v)
            .map(|x| x["role"].as_str().unwrap().to_owned())
    };
    assert_eq!(role(&echo).as_deref(), Some("pinned"), "{listed:#}");
    assert_eq!(role(&flaky).as_deref(), Some("stable"), "{listed:#}");

    // a restart and a new file: still pinned
    runner.stop().await;
    deploy(&pay, &std::fs::read(PROBE).unwrap());
    let mut runner = Running::start(project.config()).await;
    for _ in 0..5 {
        assert_eq!(
            ran_on(&mut runner, &queue).await,
            echo,
            "pinned across the restart"
        );
    }
    ok(hourglass(&project, &["unpin", "pay"]));
    until_ran_on(&mut runner, &queue, &probe).await;
    let again = hourglass(&project, &["unpin", "pay"]);
    assert_eq!(again.status.code(), Some(2), "not pinned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_of_a_bad_version_replay_on_the_old_one_and_pinned_jobs_run_on_theirs() {
    let project = Project::new("concurrency = 4", &topic(""));
    let pay = project.handler("pay.wasm");
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    let (echo, bad) = (hash_of(ECHO), hash_of(ORDER_CANCEL));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    assert_eq!(ran_on(&mut runner, &queue).await, echo);
    deploy(&pay, &std::fs::read(ORDER_CANCEL).unwrap());
    let mut dead = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while dead.len() < 5 {
        let id = enqueue(&queue, "pay", JOB, 0, 1).await;
        let events = runner.until_settled("pay", &id, WAIT).await;
        match crate::util::settled(&events, "pay", &id) {
            Err(reason) => {
                assert!(
                    reason.contains("payload is not the expected JSON"),
                    "{reason}"
                );
                assert!(events.iter().any(
                    |e| matches!(&e.kind, EventKind::Started { handler, .. } if *handler == bad)
                ));
                dead.push(id);
            }
            // still the old version: the swap had not reached it yet
            Ok(()) => assert!(
                tokio::time::Instant::now() < deadline,
                "the bad version never served"
            ),
        }
    }

    let out = ok(hourglass(
        &project,
        &["dead", "retry", "pay", "--all", "--version", &echo],
    ));
    assert!(out.contains(&format!("on version {echo}")), "{out}");
    let events = runner.after_drained(&queue, &["pay"], WAIT).await;
    let lives = lives(&events);
    let mut replayed = 0;
    for id in &dead {
        if let Some((versions, ends)) = lives.get(id.as_str()) {
            assert_eq!(versions, &vec![echo.as_str()], "{id} replayed on echo");
            assert_eq!(ends, &vec![&EventKind::Acked], "{id}");
            replayed += 1;
        }
    }
    assert!(replayed >= 5, "every dead letter replayed: {replayed}");

    // one job pinned at enqueue runs on its version; the file still says `bad`
    let out = ok(hourglass(
        &project,
        &[
            "enqueue",
            "pay",
            JOB,
            "--id",
            "pinned-1",
            "--version",
            &echo,
        ],
    ));
    assert!(out.contains("pinned-1"), "{out}");
    let events = runner.until_settled("pay", "pinned-1", WAIT).await;
    assert_eq!(crate::util::settled(&events, "pay", "pinned-1"), Ok(()));
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Started { handler, .. } if *handler == echo))
    );
    // a version nobody keeps: refused by the CLI, and a job pinned to it anyway fails clearly
    let refused = hourglass(
        &project,
        &["enqueue", "pay", JOB, "--version", "0123456789abcdef"],
    );
    assert_eq!(refused.status.code(), Some(2));
    let keys = queue.keys("pay");
    let orphan = NewJob {
        id: Some("orphan".into()),
        payload: JOB.as_bytes().to_vec(),
        due_at_ms: now_ms(),
        version: Some("0123456789abcdef".into()),
        ..Default::default()
    };
    queue.enqueue(&keys, &[orphan], now_ms()).await.unwrap();
    let events = runner.until_settled("pay", "orphan", WAIT).await;
    let reason = crate::util::settled(&events, "pay", "orphan").unwrap_err();
    assert!(
        reason.contains("pinned to handler version 0123456789abcdef"),
        "{reason}"
    );
    let shown = ok(hourglass(&project, &["inspect", "pay", "orphan"]));
    assert!(
        shown.contains("handler version 0123456789abcdef"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_without_the_canarys_file_serves_the_stable_version() {
    let project = Project::new(
        "concurrency = 4",
        &topic(r#"rollout = { canary = "50%", for = "1h", min_attempts = 1000 }"#),
    );
    deploy(&project.handler("pay.wasm"), &std::fs::read(ECHO).unwrap());
    let stable = hash_of(ECHO);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    rollout_until(&queue, "echo recorded as stable", |r| {
        r.stable.as_deref() == Some(&stable)
    })
    .await;
    // another runner (on another machine) reports a new file: a canary this one lacks
    let elsewhere = "0123456789abcdef";
    let policy = hourglass::redis::Policy {
        share: 0.5,
        window_ms: 3_600_000,
    };
    let keys = queue.keys("pay");
    let state = queue
        .rollouts()
        .sync(
            &keys,
            now_ms(),
            Some(elsewhere),
            Some(policy),
            5,
            "elsewhere",
            &[],
            &[],
        )
        .await
        .unwrap();
    assert_eq!(state.canary.map(|c| c.version).as_deref(), Some(elsewhere));
    // this runner has seen the canary in a report and routes by it
    let mut monitor = Monitor::start(&url_of(&project)).await;
    reports(&mut monitor, &keys, 1, 2).await;
    drop(monitor);
    for _ in 0..20 {
        assert_eq!(ran_on(&mut runner, &queue).await, stable);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_beyond_keep_versions_are_forgotten_on_disk_and_in_redis() {
    let project = Project::new("concurrency = 4\nkeep_versions = 2", &topic(""));
    let pay = project.handler("pay.wasm");
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    let (echo, flaky, probe) = (hash_of(ECHO), hash_of(FLAKY), hash_of(PROBE));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    assert_eq!(ran_on(&mut runner, &queue).await, echo);
    for (component, version) in [(FLAKY, &flaky), (PROBE, &probe)] {
        deploy(&pay, &std::fs::read(component).unwrap());
        until_ran_on(&mut runner, &queue, version).await;
    }
    let kept_files = |dir: &std::path::Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".wasm"))
            .collect();
        names.sort();
        names
    };
    let dir = project.dir.path().join(".hourglass/versions");
    let mut expected = vec![format!("{flaky}.wasm"), format!("{probe}.wasm")];
    expected.sort();
    // pruned once the kept versions are known to hold no job (a read of
    // Redis), so a moment after the newest one first runs
    eventually(
        WAIT,
        "the newest two on disk, outside handlers_dir",
        || async {
            match kept_files(&dir) {
                files if files == expected => Ok(()),
                files => Err(format!("{files:?}")),
            }
        },
    )
    .await;
    // the newest two, newest first
    let newest = vec![probe.clone(), flaky.clone()];
    eventually(WAIT, "the newest two versions in redis", || async {
        let (_, v) = queue
            .rollouts()
            .versions(&queue.keys("pay"))
            .await
            .map_err(|e| e.to_string())?;
        let v: Vec<String> = v.into_iter().map(|v| v.version).collect();
        if v == newest {
            Ok(())
        } else {
            Err(format!("{v:?}"))
        }
    })
    .await;
    let refused = hourglass(&project, &["pin", "pay", &echo]);
    assert_eq!(refused.status.code(), Some(2), "echo is no longer kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_bad_canary_is_rolled_back_and_a_pin_holds() {
    let cluster = test_support::RedisCluster::start();
    let project = Project::on_cluster(
        cluster.urls(),
        "concurrency = 8",
        &topic(
            r#"rollout = { canary = "20%", for = "1h", min_attempts = 10, max_failure_rate = 0.2 }"#,
        ),
    );
    let pay = project.handler("pay.wasm");
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    let (stable, bad) = (hash_of(ECHO), hash_of(ORDER_CANCEL));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    rollout_until(&queue, "echo recorded as stable", |r| {
        r.stable.as_deref() == Some(&stable)
    })
    .await;
    let (producer, stop) = produce_until_stopped(&queue, 3);
    deploy(&pay, &std::fs::read(ORDER_CANCEL).unwrap());
    let after = rollout_until(&queue, "the canary rolled back", |r| {
        r.last
            .as_ref()
            .is_some_and(|v| v.result == "rolled_back" && v.version == bad)
    })
    .await;
    assert_eq!(after.stable.as_deref(), Some(stable.as_str()));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let ids = producer.await.unwrap();
    let events = runner.after_drained(&queue, &["pay"], WAIT).await;
    let lives = lives(&events);
    for id in &ids {
        let (versions, ends) = &lives[id.as_str()];
        assert_eq!(ends.last(), Some(&&EventKind::Acked), "{id}: {ends:?}");
        assert_eq!(versions.last(), Some(&stable.as_str()), "{id}");
    }
    let listed = ok(hourglass(&project, &["versions", "pay", "--json"]));
    assert!(listed.contains(r#""role":"retired""#), "{listed}");
    ok(hourglass(&project, &["pin", "pay", &bad]));
    until_ran_on(&mut runner, &queue, &bad).await;
    ok(hourglass(&project, &["unpin", "pay"]));
    // the file still holds the retired version: the stable one serves again
    until_ran_on(&mut runner, &queue, &stable).await;
}
