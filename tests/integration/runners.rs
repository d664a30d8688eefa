//! Runners that say they are alive: listed while they run (with what they
//! serve), one killed with SIGKILL drops out within the heartbeat's time to
//! live, one stopped gracefully leaves at once.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::redis::{Queue, RunnerInfo};

use crate::util::{Project, RUNNER_LOG, RunnerProcess, Running, eventually, hash_of, hourglass};

/// Wait until `wanted` holds for the runners alive now.
async fn until_runners(
    queue: &Queue,
    within: Duration,
    wanted: impl Fn(&[RunnerInfo]) -> bool,
) -> Vec<RunnerInfo> {
    eventually(within, "the runners listed", || async {
        let runners = queue.runners().list(now_ms()).await.unwrap();
        match wanted(&runners) {
            true => Ok(runners),
            false => Err(format!("{runners:#?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_runners_are_listed_and_a_killed_one_drops_out() {
    let project = Project::new(
        "concurrency = 2",
        "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n",
    );
    let queue = project.queue().await;
    let here = Running::start(project.config()).await;
    let there = RunnerProcess::launch(&project, RUNNER_LOG);
    let runners = until_runners(&queue, Duration::from_secs(30), |r| r.len() == 2).await;
    let pids: Vec<u32> = runners.iter().map(|r| r.pid).collect();
    assert!(
        pids.contains(&std::process::id()) && pids.contains(&there.id()),
        "{runners:#?}"
    );
    let echo = hash_of(test_support::components::ECHO);
    for r in &runners {
        assert_eq!(r.topics, ["echo"]);
        assert_eq!(r.handlers.get("echo"), Some(&echo));
        assert_eq!(r.version, hourglass::VERSION);
    }

    // what they did is in their heartbeats: 10 jobs acked between them
    for i in 0..10 {
        crate::util::enqueue(&queue, "echo", &format!("n{i}"), 0, 0).await;
    }
    let runners = until_runners(&queue, Duration::from_secs(30), |r| {
        r.iter()
            .filter_map(|r| r.meters.get("echo"))
            .map(|m| m.done)
            .sum::<u64>()
            == 10
    })
    .await;
    assert!(
        runners
            .iter()
            .filter_map(|r| r.meters.get("echo"))
            .all(|m| m.failed == 0)
    );
    let out = hourglass(&project, &["stats", "--json"]);
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(stats["echo"]["late_p99_ms"].is_u64(), "{stats}");

    // SIGKILL: no goodbye; it drops out when its time to live runs out
    there.kill();
    // (its time to live is 6 s: well within the wait)
    let runners = until_runners(&queue, Duration::from_secs(15), |r| r.len() == 1).await;
    assert_eq!(runners[0].pid, std::process::id());

    // the command line lists the same
    let out = hourglass(&project, &["runners", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let listed: Vec<RunnerInfo> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), 1, "{stdout}");
    assert_eq!(listed[0].id, runners[0].id);

    // a graceful stop leaves at once
    here.stop().await;
    assert!(queue.runners().list(now_ms()).await.unwrap().is_empty());
}
