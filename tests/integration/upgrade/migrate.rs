//! A layout 2 namespace migrated by this build.

use std::time::Duration;

use hourglass::clock::now_ms;

use crate::layout::{LAYOUT_2_COMMIT, old_binary};
use crate::util::{Project, RunnerProcess, eventually, hourglass};

use super::fixtures::*;

/// A namespace written by the last layout-2 build's CLI (delayed and due
/// jobs), migrated online by this build's `hourglass migrate`, then run by
/// this build's runner: each job once.
pub(super) async fn migrate_a_layout_2_namespace() {
    let old = tokio::task::spawn_blocking(|| old_binary(LAYOUT_2_COMMIT))
        .await
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let topics = format!(
        "[[topic]]\nname = \"work\"\nhandler = \"probe.wasm\"\ngrants = {{ dirs = [{{ host = \"{}\", guest = \"/data\", write = true }}] }}\n",
        data.path().display()
    );
    let project = Project::new(
        "concurrency = 4\ncompile_cache = \".hourglass/old-cache\"",
        &topics,
    );
    let config = project.config_path();
    for i in 0..20 {
        let delay = if i % 2 == 0 { "0s" } else { "2s" };
        run(
            &old,
            &config,
            &[
                "enqueue",
                "work",
                TOUCH,
                "--id",
                &format!("old-{i}"),
                "--delay",
                delay,
            ],
        );
    }
    let refused = hourglass(&project, &["stats"]);
    assert!(
        !refused.status.success(),
        "this build refuses layout 2 until migrated"
    );
    let migrated = hourglass(&project, &["migrate"]);
    assert!(
        migrated.status.success()
            && String::from_utf8_lossy(&migrated.stdout).contains("layout 2 -> 3"),
        "{}{}",
        String::from_utf8_lossy(&migrated.stdout),
        String::from_utf8_lossy(&migrated.stderr)
    );
    let runner = RunnerProcess::start(&project);
    let queue = project.queue().await;
    eventually(Duration::from_secs(60), "the migrated jobs ran", || async {
        match queue.stats(&queue.keys("work"), now_ms()).await.unwrap() {
            s if s.scheduled + s.ready + s.running == 0 && s.dead == 0 => Ok(()),
            s => Err(format!("{s:?}")),
        }
    })
    .await;
    let runs = touched(data.path());
    assert_eq!(runs.len(), 20, "{runs:?}");
    assert!(runs.values().all(|a| a == &[1]), "{runs:?}");
    println!("layout 2 migrated by this build: 20 jobs of the old CLI, each run once");
    runner.kill();
}
