//! Flows under a lost runner: two runner processes complete the children
//! of one flow side by side (the last ones end on either, at nearly the
//! same instant), one is SIGKILLed while they do, and the parent still runs
//! exactly once, seeing every child's result.

use std::time::{Duration, Instant};

use hourglass::redis::Standing;
use serde_json::json;

use crate::util::{Project, RunnerProcess, assert_fan_in_result, fan_in, until_flow_ended};

const CHILDREN: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_while_children_complete_leaves_the_parent_running_once() {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir(data.path().join("race")).unwrap();
    let topic = |name: &str| {
        format!(
            "[[topic]]\nname = \"{name}\"\nhandler = \"probe.wasm\"\nmax_attempts = 3\n\
             results = {{ keep = \"1h\", max = \"1MiB\" }}\n\
             grants = {{ dirs = [{{ host = \"{}\", guest = \"/data\", write = true }}] }}\n\n",
            data.path().display()
        )
    };
    let toml = topic("child") + &topic("parent");
    let project = Project::new("concurrency = 8\nlease_margin = \"500ms\"", &toml);
    let queue = project.queue().await;
    let doomed = RunnerProcess::start(&project);
    let _survivor = RunnerProcess::start(&project);
    let child = |i| json!({"touch": "/data", "spin_ms": 5, "result": i});
    let parent = json!({"touch": "/data", "echo_deps": true});
    fan_in(&queue, "race", CHILDREN, child, parent).await;
    // kill one runner once a third of the children have ended
    until_flow_ended(&queue, "race", CHILDREN / 3, Duration::from_secs(120)).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    doomed.kill(); // SIGKILL
    let end = loop {
        if let Standing::Ended(end) = queue
            .standing(&queue.keys("parent"), "race/p")
            .await
            .unwrap()
        {
            break end;
        }
        assert!(Instant::now() < deadline, "the parent did not run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_fan_in_result(&end, CHILDREN);
    // one execution of the parent; every child ran (one killed mid-attempt
    // runs again, as attempt 2)
    let runs: Vec<String> = std::fs::read_dir(data.path().join("race"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let parent: Vec<&String> = runs.iter().filter(|f| f.starts_with("p.")).collect();
    assert_eq!(parent, ["p.1"], "the parent ran more than once");
    for i in 0..CHILDREN {
        assert!(
            runs.iter().any(|f| f.starts_with(&format!("c{i}."))),
            "c{i} never ran"
        );
    }
    crate::util::flow_done(&queue, "race").await;
}
