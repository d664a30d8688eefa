//! Flows under a lost runner: two runner processes complete the children
//! of one flow side by side (the last ones end on either, at nearly the
//! same instant), one is SIGKILLed while they do, and the parent still runs
//! exactly once, seeing every child's result.

use std::time::{Duration, Instant};

use hourglass::clock::now_ms;
use hourglass::redis::Standing;
use hourglass::redis::flow::{Dep, FlowJob, FlowSpec, Policy};
use serde_json::{Value, json};

use crate::util::{Project, RunnerProcess};

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
    let mut jobs: Vec<FlowJob> = (0..CHILDREN)
        .map(|i| FlowJob {
            name: format!("c{i}"),
            topic: "child".into(),
            payload: json!({"touch": "/data", "spin_ms": 5, "result": i})
                .to_string()
                .into_bytes(),
            ..Default::default()
        })
        .collect();
    jobs.push(FlowJob {
        name: "p".into(),
        topic: "parent".into(),
        payload: json!({"touch": "/data", "echo_deps": true})
            .to_string()
            .into_bytes(),
        after: (0..CHILDREN)
            .map(|i| Dep {
                name: format!("c{i}"),
                policy: Policy::Require,
            })
            .collect(),
        max_attempts: 0,
    });
    let plan = FlowSpec {
        id: Some("race".into()),
        jobs,
        fail_fast: false,
    }
    .plan(|| unreachable!())
    .unwrap();
    queue.flows().create(&plan, now_ms()).await.unwrap();
    // kill one runner once a third of the children have ended
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let flow = queue.flows().show("race").await.unwrap().unwrap();
        if flow.jobs.iter().filter(|j| j.ended.is_some()).count() >= CHILDREN / 3 {
            break;
        }
        assert!(Instant::now() < deadline, "the children did not run");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    let result = end.result.as_deref().unwrap_or_else(|| panic!("{end:?}"));
    let result: Value = serde_json::from_slice(result).unwrap();
    let deps = result["deps"].as_array().unwrap();
    assert_eq!(deps.len(), CHILDREN);
    for (i, d) in deps.iter().enumerate() {
        assert_eq!(
            (&d["ended"], &d["result"]),
            (&json!("acked"), &json!(i)),
            "{d}"
        );
    }
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
    let flow = queue.flows().show("race").await.unwrap().unwrap();
    assert!(flow.done_ms.is_some(), "{flow:?}");
}
