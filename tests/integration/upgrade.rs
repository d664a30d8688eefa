//! The upgrade from the previous release (the newest row of
//! `docs/src/releases.md` with a commit), built from git like `layout`'s
//! old builds: two runners of that release fill a namespace with every
//! kind of state through its own CLI (delayed, pinned, retrying, dead,
//! kept results, suspended durable jobs, a flow waiting on a paused topic,
//! an open batch, tenant keys one of them paused, a canary mid-window, a
//! schedule's cursor, long jobs running); two runners of this build join
//! under load (a mixed fleet, with deadlines, priorities and follow-ups
//! with options, all known to the release); the old ones are stopped, one
//! with SIGTERM (its long jobs handed back) and one with SIGKILL; this
//! build's CLI then resumes, signals, seals and retries. Every job ends as
//! it would have: each ran once, but for the handed-back and the killed
//! runner's jobs in flight (at most twice), the retried ones (as many times
//! as they retried) and the dead letter retried on purpose. And a
//! namespace of layout 2 (the last layout-2 build's CLI) migrated by this
//! build's `hourglass migrate` and run by its runner.

use std::path::PathBuf;
use std::time::Duration;

use hourglass::clock::now_ms;
use test_support::{HttpServer, Reply};

use crate::layout::old_binary;
use crate::util::{Project, RedisServer, RunnerProcess, eventually, hash_of, hourglass, variant};

use fixtures::*;
use migrate::migrate_a_layout_2_namespace;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_release_upgrades_on_live_state_and_runs_beside_this_build() {
    let (release, commit) = previous_release();
    let old = tokio::task::spawn_blocking(move || old_binary(commit))
        .await
        .unwrap();

    migrate_a_layout_2_namespace().await;

    let data = tempfile::tempdir().unwrap();
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    // the long jobs' server: the first six requests never answer, then 200
    let mut script = vec![Reply::Hang; 6];
    script.push(Reply::status(200, "done"));
    let hold = HttpServer::start(script);
    let redis = RedisServer::start();
    let runner_lines = "concurrency = 8\nshutdown_grace = \"1s\"\nlease_margin = \"1s\"";
    let project = Project::with_redis(
        redis.url(),
        runner_lines,
        &topics(data.path(), &shop.url(), &hold.url()),
    );
    std::fs::copy(
        project.handler("probe.wasm"),
        project.handler("canary.wasm"),
    )
    .unwrap();
    let probe = hash_of(&project.handler("probe.wasm").display().to_string());
    // the old release: its own compile cache (its wasmtime may differ), and
    // runner A's API, in files of their own beside this build's queues.toml
    let base = std::fs::read_to_string(project.config_path()).unwrap();
    let old_config = |name: &str, http: bool| -> PathBuf {
        let text: String = base
            .lines()
            .map(|l| match l.starts_with("compile_cache = ") {
                true => "compile_cache = \".hourglass/old-cache\"\n".to_owned(),
                false => format!("{l}\n"),
            })
            .collect();
        let text = match http {
            true => format!(
                "{text}\n[http]\nlisten = \"127.0.0.1:{}\"\n",
                test_support::free_port()
            ),
            false => text,
        };
        let path = project.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let (old_a, old_b) = (
        old_config("old-a.toml", true),
        old_config("old-b.toml", false),
    );
    let queue = project.queue().await;

    // 1. the release alone: two runners, state of every kind from its CLI
    let mut a = RunnerProcess::launch_config(&old, &project, &old_a, LOG, &[]);
    let mut b = RunnerProcess::launch_config(&old, &project, &old_b, LOG, &[]);
    for r in [&mut a, &mut b] {
        r.logged("hourglass running", Duration::from_secs(180))
            .await;
    }
    let cli = |args: &[&str]| run(&old, &old_a, args);
    let version_out = cli(&["--version"]);
    let old_version = String::from_utf8_lossy(&version_out.stdout).into_owned();
    assert!(old_version.contains(&release), "{old_version}");
    state::fill(&cli, &probe, &shop.url(), &project, data.path());
    // the canary: a new file under the rollout policy, jobs flowing
    let canary_jobs = tokio::spawn({
        let queue = queue.clone();
        async move {
            let mut n = 0;
            let end = tokio::time::Instant::now() + Duration::from_secs(130);
            while tokio::time::Instant::now() < end {
                let batch = jobs(&format!("canary-{n}-"), 2, TOUCH, now_ms(), |_, _| {});
                queue
                    .enqueue(&queue.keys("canary"), &batch, now_ms())
                    .await
                    .unwrap();
                n += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            n * 2
        }
    });
    let keys = queue.keys("canary");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bytes = std::fs::read(project.handler("probe.wasm")).unwrap();
    crate::util::deploy(&project.handler("canary.wasm"), &variant(&bytes, "canary"));
    let canary = hash_of(&project.handler("canary.wasm").display().to_string());
    eventually(
        Duration::from_secs(60),
        "the release starts a canary",
        || async {
            match queue.rollouts().get(&keys).await.unwrap().canary {
                Some(c) if c.version == canary => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    // what the release leaves: dead letters, retries waiting, kept results,
    // a sleeper and a waiter, the schedule's cursor
    eventually(
        Duration::from_secs(60),
        "the release's first attempts ended",
        || {
            let logs = [a.log(), b.log()];
            let queue = queue.clone();
            async move {
                let dead = queue
                    .stats(&queue.keys("work"), now_ms())
                    .await
                    .unwrap()
                    .dead;
                let durable = queue
                    .stats(&queue.keys("durable"), now_ms())
                    .await
                    .unwrap()
                    .suspended;
                let failed = queue
                    .stats(&queue.keys("retrying"), now_ms())
                    .await
                    .unwrap()
                    .scheduled;
                let retried = starts(&logs)
                    .iter()
                    .filter(|s| s.0.starts_with("retry-"))
                    .count();
                match (dead, durable, failed, retried) {
                    (5, 2, 10, 10) => Ok(()),
                    seen => Err(format!(
                        "dead, suspended, retries waiting, retry attempts: {seen:?}"
                    )),
                }
            }
        },
    )
    .await;
    let ticks_before = starts(&[a.log(), b.log()])
        .iter()
        .filter(|s| s.0.starts_with("tick@"))
        .count();
    assert!(ticks_before >= 2, "the schedule fired under the release");

    // long jobs the release's runners hold when they stop (their requests hang)
    let long = queue.keys("long");
    let fetch = serde_json::json!({ "fetch": hold.url() }).to_string();
    queue
        .enqueue(
            &long,
            &jobs("long-", 6, &fetch, now_ms(), |_, _| {}),
            now_ms(),
        )
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "the release holds the long jobs",
        || async {
            match queue.stats(&long, now_ms()).await.unwrap().running {
                6 => Ok(()),
                n => Err(format!("{n} running")),
            }
        },
    )
    .await;

    // 2. a mixed fleet: two runners of this build join, under load
    let mut n1 = RunnerProcess::launch(&project, LOG);
    let mut n2 = RunnerProcess::launch(&project, LOG);
    for r in [&mut n1, &mut n2] {
        r.logged("hourglass running", Duration::from_secs(180))
            .await;
    }
    let mixed = tokio::spawn({
        let queue = queue.clone();
        async move {
            let mut sent = Vec::new();
            for round in 0..40 {
                let now = now_ms();
                // priorities, a deadline already past (expired whoever claims
                // it), and follow-ups with a priority and a key (outbox entry 7)
                let batch = jobs(&format!("mixed-{round}-"), 10, TOUCH, now, |i, job| {
                    job.priority = (i % 3) as u8;
                    if i == 9 {
                        job.due_at_ms = now - 1_000;
                        job.expires_at_ms = Some(now - 500);
                    }
                    if i == 8 {
                        job.payload = serde_json::json!({"touch": "/data", "follow_ups": [
                            {"topic": "work", "payload": TOUCH, "id": format!("follow-{round}"), "priority": 2, "expires_in_ms": 600_000}]})
                        .to_string()
                        .into_bytes();
                    }
                });
                sent.extend(batch.iter().map(|j| j.id.clone().unwrap()));
                queue
                    .enqueue(&queue.keys("work"), &batch, now)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            sent
        }
    });
    eventually(
        Duration::from_secs(60),
        "both builds run jobs side by side",
        || {
            let (old_logs, new_logs) = ([a.log(), b.log()], [n1.log(), n2.log()]);
            async move {
                let old = starts(&old_logs)
                    .iter()
                    .filter(|s| s.0.starts_with("mixed-"))
                    .count();
                let new = starts(&new_logs)
                    .iter()
                    .filter(|s| s.0.starts_with("mixed-"))
                    .count();
                match (old, new) {
                    (o, n) if o >= 10 && n >= 10 => Ok(()),
                    seen => Err(format!(
                        "mixed jobs started by the release, by this build: {seen:?}"
                    )),
                }
            }
        },
    )
    .await;
    let sent = mixed.await.unwrap();

    // 3. the release stops: A with SIGTERM (it hands back what it holds), B killed
    let stopped_at = now_ms();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(a.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let b_log = b.kill();
    let status = a.exit(Duration::from_secs(30)).await;
    assert!(
        status.success(),
        "the release's runner stops cleanly on SIGTERM: {status}"
    );
    // the killed runner held at most its concurrency of jobs (8)
    let in_flight_at_kill = 8;

    // 4. this build alone: everything the release left runs, nothing else waits
    // but the parked: the waiter, the flow on the paused topic, the open batch, globex
    let topics = ["work", "retrying", "held", "durable", "fair", "long"];
    until_quiet(
        &queue,
        Duration::from_secs(120),
        &topics,
        &[("durable", 1), ("held", 1), ("fair", 8)],
    )
    .await;
    let canary_sent = canary_jobs.await.unwrap();
    let new = |args: &[&str]| hourglass(&project, args);
    for args in [
        &["signal", "durable", "approval", "approved", "\"ops\""][..],
        &["resume", "held"],
        &["key", "resume", "fair", "globex"],
    ] {
        let out = new(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let more = project.dir.path().join("more.json");
    std::fs::write(&more, serde_json::json!({"jobs": [{"name": "two", "topic": "work", "payload": {"touch": "/data"}}]}).to_string()).unwrap();
    for args in [
        &["flow", "add", "batch-1", more.to_str().unwrap()][..],
        &["flow", "seal", "batch-1"],
        &["dead", "retry", "work", "dead-0"],
    ] {
        let out = new(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    until_quiet(
        &queue,
        Duration::from_secs(120),
        &[&topics[..], &["canary"]].concat(),
        &[],
    )
    .await;
    eventually(
        Duration::from_secs(90),
        "the canary's window ends under this build",
        || async {
            match queue.rollouts().get(&keys).await.unwrap().last {
                Some(v) if v.result == "promoted" => Ok(v),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let rollout = queue.rollouts().get(&keys).await.unwrap();
    let verdict = rollout.last.clone().unwrap();
    assert_eq!(
        (verdict.version.as_str(), rollout.stable.as_deref()),
        (canary.as_str(), Some(canary.as_str()))
    );
    assert!(
        verdict.at_ms > stopped_at,
        "promoted after the release stopped: {verdict:?}"
    );
    // the schedule goes on
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 5. the count
    let logs = [
        std::fs::read_to_string(project.dir.path().join("runner.log")).unwrap(),
        b_log,
        n1.log(),
        n2.log(),
    ];
    state::count(state::Ended {
        release: &release,
        commit,
        project: &project,
        queue: &queue,
        logs,
        data: data.path(),
        probe: &probe,
        sent: &sent,
        canary_sent,
        shop: &shop,
        hold: &hold,
        in_flight_at_kill,
    })
    .await;
    n1.kill();
    n2.kill();
}

mod fixtures;
mod migrate;
mod state;
