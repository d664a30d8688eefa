//! A rolling upgrade from a layout 2 build under load loses nothing.

use crate::util::{Project, RunnerProcess, eventually, hourglass};
use hourglass::clock::now_ms;
use std::collections::HashMap;
use std::time::Duration;

use super::*;

/// Job ids each runner's debug log says it started, with how often.
fn started(logs: &[String]) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for log in logs {
        for line in log.lines().filter(|l| l.contains(" started ")) {
            if let Some(at) = line.find("job_id=") {
                let id = line[at + "job_id=".len()..].split(' ').next().unwrap();
                *seen.entry(id.to_owned()).or_default() += 1;
            }
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_from_a_layout_2_build_under_load_loses_nothing() {
    rolling_upgrade(LAYOUT_2_COMMIT, 2).await;
}

/// Enqueue `jobs` through the API at `addr` (a bulk request).
async fn post(addr: &str, jobs: Vec<serde_json::Value>) {
    let answer = crate::util::Api(addr.to_owned())
        .post(
            "/api/topics/slow/jobs",
            &serde_json::Value::Array(jobs).to_string(),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}

/// A rolling upgrade from the `hourglass` of `commit` (layout `old`), under
/// load: its runner serves and its API takes jobs all along (10 every 40 ms,
/// and 300 delayed ones that wait through the migration); a runner of this
/// build waits for the namespace, `hourglass migrate` moves it while both
/// run, the new runner starts by itself, the old one (holding long jobs) is
/// stopped with SIGTERM, and the old build's `hourglass serve` adds a few
/// more after that. Every job runs exactly once; none is dead-lettered.
async fn rolling_upgrade(commit: &'static str, old: u32) {
    let binary = tokio::task::spawn_blocking(move || old_binary(commit))
        .await
        .unwrap();
    let redis = crate::util::RedisServer::start();
    let topics = "[[topic]]\nname = \"slow\"\nhandler = \"slow.wasm\"\n";
    // a project of the one topic with the API on `port`
    // (the old build compiles into its own cache: its wasmtime may carry
    // another patch under the same version number)
    let with_api = |port: u16| {
        Project::with_redis(
            redis.url(),
            "concurrency = 4\ncompile_cache = \".hourglass/cache\"",
            &format!(
                "{topics}\n[http]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{}\"\n",
                crate::util::TOKEN
            ),
        )
    };
    let port = test_support::free_port();
    let old_project = with_api(port);
    let new_project = Project::with_redis(redis.url(), "concurrency = 4", topics);
    let log = "info,hourglass=debug,wasmtime=warn,cranelift=warn";
    let mut before = RunnerProcess::launch_binary(&binary, &old_project, log);
    before
        .logged("hourglass running", Duration::from_secs(180))
        .await;
    let api = format!("127.0.0.1:{port}");
    // and an API of the old build on its own (`hourglass serve`)
    let serve_port = test_support::free_port();
    let serve_project = with_api(serve_port);
    let _serve = tokio::process::Command::new(&binary)
        .args(["serve", "--config"])
        .arg(serve_project.config_path())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let old_api = format!("127.0.0.1:{serve_port}");
    eventually(Duration::from_secs(60), "the old API listens", || {
        let addr = old_api.clone();
        async move {
            tokio::net::TcpStream::connect(&addr)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await;
    // waiting through the migration: due 5 to 10 s from now
    let mut ids: Vec<String> = Vec::new();
    let delayed: Vec<serde_json::Value> = (0..300)
        .map(|i| {
            ids.push(format!("later-{i}"));
            serde_json::json!({ "id": format!("later-{i}"), "payload": "{\"spin_ms\":2}", "delay": format!("{}ms", 5_000 + 17 * i) })
        })
        .collect();
    post(&api, delayed).await;
    // the producer: the old build's API, 10 jobs every 40 ms until told to stop
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let producer = tokio::spawn({
        let api = api.clone();
        async move {
            let mut n = 0;
            while stopped.try_recv().is_err() {
                let jobs = (n..n + 10)
                    .map(|i| serde_json::json!({ "id": format!("job-{i}"), "payload": "{\"spin_ms\":2}" }))
                    .collect();
                post(&api, jobs).await;
                n += 10;
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            n
        }
    });

    // a new runner arrives: it waits for the migration, and says why
    let mut after = RunnerProcess::launch(&new_project, log);
    after
        .logged(
            &format!("has layout {old}; this hourglass uses layout 3"),
            Duration::from_secs(180),
        )
        .await;
    // the old runner holds long jobs (eight: the new one has room for four)
    let holds = (0..8)
        .map(|i| serde_json::json!({ "id": format!("hold-{i}"), "payload": "{\"spin_ms\":1500}" }))
        .collect();
    post(&api, holds).await;
    ids.extend((0..8).map(|i| format!("hold-{i}")));
    eventually(
        Duration::from_secs(60),
        "the old runner holds a long job",
        || {
            let log = before.log();
            async move {
                if started(&[log]).keys().any(|id| id.starts_with("hold-")) {
                    Ok(())
                } else {
                    Err("not yet".to_owned())
                }
            }
        },
    )
    .await;
    // migrate online, the old runner serving and its API taking jobs
    let migrated = hourglass(&new_project, &["migrate"]);
    assert!(migrated.status.success(), "{}", stderr(&migrated));
    assert!(
        stdout(&migrated).contains(&format!("layout {old} -> 3")),
        "{}",
        stdout(&migrated)
    );
    after
        .logged("at layout 3 now; starting", Duration::from_secs(60))
        .await;
    // side by side: the new runner runs what the old build's API keeps adding
    eventually(
        Duration::from_secs(60),
        "the new runner runs jobs after the migration",
        || {
            let log = after.log();
            async move {
                match started(&[log]).len() {
                    n if n >= 50 => Ok(()),
                    n => Err(format!("the new runner ran {n}")),
                }
            }
        },
    )
    .await;
    let _ = stop.send(());
    let produced = producer.await.unwrap();
    ids.extend((0..produced).map(|i| format!("job-{i}")));
    let old_before_stop = started(&[before.log()]).len();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(before.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = before.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "the old runner stops cleanly: {status}");
    // an old producer outlives the old runners: what its API still adds (onto
    // layout 2's zset) is taken over by the new runner's claims
    let stragglers: Vec<serde_json::Value> = (0..20)
        .map(
            |i| serde_json::json!({ "id": format!("straggler-{i}"), "payload": "{\"spin_ms\":2}" }),
        )
        .collect();
    post(&old_api, stragglers).await;
    ids.extend((0..20).map(|i| format!("straggler-{i}")));
    let queue = new_project.queue().await;
    eventually(Duration::from_secs(120), "every job ran", || {
        let queue = queue.clone();
        async move {
            match queue.stats(&queue.keys("slow"), now_ms()).await {
                Ok(s) if s.scheduled + s.ready + s.running == 0 => {
                    assert_eq!(s.dead, 0, "nothing dead-lettered");
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    let logs = [
        std::fs::read_to_string(old_project.dir.path().join("runner.log")).unwrap(),
        after.log(),
    ];
    let runs = started(&logs);
    let missing: Vec<&String> = ids.iter().filter(|id| !runs.contains_key(*id)).collect();
    assert!(missing.is_empty(), "never ran: {missing:?}");
    let twice: Vec<(&String, &usize)> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ran more than once: {twice:?}");
    let new_ran = started(&logs[1..]).len();
    eprintln!(
        "rolling upgrade from layout {old}: {} jobs ({produced} through the old API while it \
         ran); the old runner ran {}, {old_before_stop} of them before it was stopped; the \
         layout-3 runner {new_ran}",
        runs.len(),
        runs.len() - new_ran
    );
    after.kill();
}
