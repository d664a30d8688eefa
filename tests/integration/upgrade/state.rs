//! The state the release leaves: what its CLI puts in, and the count of
//! what ran once both builds are done.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

use hourglass::clock::now_ms;
use hourglass::redis::Queue;
use test_support::HttpServer;

use crate::util::{Project, hourglass};

use super::fixtures::*;

/// State of every kind, put in through the release's own CLI (`cli`):
/// delayed and pinned jobs, kept results, retries, dead letters, two durable
/// orders, a flow waiting on a paused topic, an open batch, tenant keys with
/// one paused.
pub(super) fn fill(
    cli: &dyn Fn(&[&str]) -> Output,
    probe: &str,
    shop: &str,
    project: &Project,
    data: &Path,
) {
    for i in 0..20 {
        let payload = format!(r#"{{"touch":"/data","result":{{"i":{i}}}}}"#);
        cli(&[
            "enqueue",
            "work",
            &payload,
            "--id",
            &format!("delayed-{i}"),
            "--delay",
            "25s",
        ]);
    }
    for i in 0..10 {
        cli(&[
            "enqueue",
            "work",
            TOUCH,
            "--id",
            &format!("pinned-{i}"),
            "--delay",
            "25s",
            "--version",
            probe,
        ]);
        cli(&[
            "enqueue",
            "work",
            r#"{"result":{"kept":true}}"#,
            "--id",
            &format!("result-{i}"),
        ]);
        cli(&[
            "enqueue",
            "retrying",
            r#"{"fail_first":1}"#,
            "--id",
            &format!("retry-{i}"),
        ]);
    }
    for i in 0..5 {
        cli(&[
            "enqueue",
            "work",
            r#"{"then":"fail"}"#,
            "--id",
            &format!("dead-{i}"),
        ]);
    }
    let order = |n: u32, extra: &str| format!(r#"{{"order":{n},"shop":"{}"{extra}}}"#, shop);
    cli(&[
        "enqueue",
        "durable",
        &order(1, r#","sleep_ms":20000"#),
        "--id",
        "sleeper",
    ]);
    cli(&[
        "enqueue",
        "durable",
        &order(2, r#","approval_ms":600000"#),
        "--id",
        "approval",
    ]);
    // a flow waiting on a paused topic, and an open batch (their jobs' files
    // go in folders named after them)
    cli(&["pause", "held"]);
    for folder in ["flow-1", "batch-1"] {
        std::fs::create_dir(data.join(folder)).unwrap();
    }
    let flow = project.dir.path().join("flow.json");
    std::fs::write(&flow, serde_json::json!({"id": "flow-1", "jobs": [
        {"name": "first", "topic": "held", "payload": {"touch": "/data", "result": {"first": true}}},
        {"name": "then", "topic": "work", "payload": {"touch": "/data", "echo_deps": true}, "after": ["first"]}]}).to_string()).unwrap();
    cli(&["flow", "enqueue", flow.to_str().unwrap()]);
    let batch = project.dir.path().join("batch.json");
    std::fs::write(
        &batch,
        serde_json::json!({"id": "batch-1", "open": true,
        "jobs": [{"name": "one", "topic": "work", "payload": {"touch": "/data"}}],
        "on_complete": {"topic": "work", "payload": {"touch": "/data", "echo_deps": true}}})
        .to_string(),
    )
    .unwrap();
    cli(&["flow", "enqueue", batch.to_str().unwrap()]);
    // tenant keys, one paused
    cli(&["key", "pause", "fair", "globex"]);
    for i in 0..8 {
        cli(&[
            "enqueue",
            "fair",
            TOUCH,
            "--id",
            &format!("acme-{i}"),
            "--key",
            "acme",
        ]);
        cli(&[
            "enqueue",
            "fair",
            TOUCH,
            "--id",
            &format!("globex-{i}"),
            "--key",
            "globex",
        ]);
    }
}

/// What the runs of both builds add up to, once everything has ended.
pub(super) struct Ended<'a> {
    pub release: &'a str,
    pub commit: &'a str,
    pub project: &'a Project,
    pub queue: &'a Queue,
    /// This build's runner log, the killed runner's, the two new runners'.
    pub logs: [String; 4],
    pub data: &'a Path,
    pub probe: &'a str,
    /// The mixed fleet's jobs.
    pub sent: &'a [String],
    pub canary_sent: usize,
    pub shop: &'a HttpServer,
    pub hold: &'a HttpServer,
    /// The most jobs the killed runner can have held (its concurrency).
    pub in_flight_at_kill: usize,
}

/// Every job ended as it would have: once, but for what the guarantees allow.
pub(super) async fn count(e: Ended<'_>) {
    let Ended {
        release,
        commit,
        project,
        queue,
        logs,
        data,
        probe,
        sent,
        canary_sent,
        shop,
        hold,
        in_flight_at_kill,
    } = e;
    let work = queue.keys("work");
    let keys = queue.keys("canary");
    let new = |args: &[&str]| hourglass(project, args);
    let all = starts(&logs);
    let runs = touched(data);
    let once = |id: &str| -> Result<(), String> {
        match runs.get(id).map(Vec::as_slice) {
            Some([_]) => Ok(()),
            other => Err(format!("{id}: {other:?}")),
        }
    };
    let mut wrong: Vec<String> = Vec::new();
    for i in 0..20 {
        wrong.extend(once(&format!("delayed-{i}")).err());
    }
    for i in 0..10 {
        wrong.extend(once(&format!("pinned-{i}")).err());
        let versions: BTreeSet<&str> = all
            .iter()
            .filter(|s| s.0 == format!("pinned-{i}"))
            .map(|s| s.2.as_str())
            .collect();
        assert_eq!(
            versions,
            BTreeSet::from([probe]),
            "pinned-{i} ran on its version"
        );
        let retries: Vec<u32> = all
            .iter()
            .filter(|s| s.0 == format!("retry-{i}"))
            .map(|s| s.1)
            .collect();
        assert_eq!(
            retries,
            [1, 2],
            "retry-{i}: attempt 1 failed under the release, 2 acked"
        );
        // a result the release kept, read by this build
        let waited = new(&["wait", "work", &format!("result-{i}")]);
        assert!(
            waited.status.success() && String::from_utf8_lossy(&waited.stdout).contains("kept"),
            "result-{i}: {}{}",
            String::from_utf8_lossy(&waited.stdout),
            String::from_utf8_lossy(&waited.stderr)
        );
    }
    for i in 0..8 {
        wrong.extend(once(&format!("acme-{i}")).err());
        wrong.extend(once(&format!("globex-{i}")).err());
    }
    let globex_by_old = all
        .iter()
        .filter(|s| s.0.starts_with("globex-") && s.3 < 2)
        .count();
    assert_eq!(
        globex_by_old, 0,
        "the paused key's jobs ran only after this build resumed it"
    );
    for id in [
        "flow-1/first",
        "flow-1/then",
        "batch-1/one",
        "batch-1/two",
        "batch-1/on_complete",
    ] {
        wrong.extend(once(id).err());
    }
    // the dead letters stay dead; the one retried ran once more and died again
    let dead = queue.dead().list(&work, 0, 100).await.unwrap();
    let dead_ids: BTreeSet<String> = dead.iter().map(|d| d.0.clone()).collect();
    let mut wanted: BTreeSet<String> = (0..5).map(|i| format!("dead-{i}")).collect();
    let expired: Vec<&String> = sent.iter().filter(|id| id.ends_with("-9")).collect();
    wanted.extend(expired.iter().map(|id| (*id).clone()));
    assert_eq!(
        dead_ids, wanted,
        "dead letters: the release's five and the expired"
    );
    for (id, info) in &dead {
        if id.starts_with("mixed-") {
            assert!(info.reason.contains("expired"), "{id}: {info:?}");
            assert!(!all.iter().any(|s| &s.0 == id), "{id} expired unrun");
        }
    }
    assert_eq!(
        all.iter().filter(|s| s.0 == "dead-0").count(),
        2,
        "dead-0 retried once by this build"
    );
    // the durable jobs: every step once, the sleeper woken by this build
    let received = shop.received();
    for step in ["charge", "reserve", "email"] {
        for order in [1, 2] {
            let n = received
                .iter()
                .filter(|r| r.path == format!("/{step}?order={order}"))
                .count();
            assert_eq!(n, 1, "{step} of order {order}");
        }
    }
    assert_eq!(
        received
            .iter()
            .filter(|r| r.path.starts_with("/approved?"))
            .count(),
        1
    );
    // the mixed fleet's jobs: once, but for the killed runner's in flight
    let mut twice = Vec::new();
    for id in sent.iter().filter(|id| !id.ends_with("-9")) {
        match runs.get(id).map(Vec::len) {
            Some(1) => {}
            Some(2) => twice.push(id.clone()),
            other => wrong.push(format!("{id}: {other:?}")),
        }
    }
    for id in (0..40).map(|r| format!("follow-{r}")) {
        wrong.extend(once(&id).err());
    }
    // the long jobs: cut at the release's stop, asked again and ended by this build
    assert_eq!(
        hold.received().len(),
        12,
        "each long job's request: once hung, once answered"
    );
    // the canary topic's jobs: each once, none dead
    let canary_runs = runs.keys().filter(|id| id.starts_with("canary-")).count();
    assert_eq!(canary_runs, canary_sent, "every canary job ran");
    assert!(
        runs.iter()
            .filter(|(id, _)| id.starts_with("canary-"))
            .all(|(_, a)| a.len() <= 2)
    );
    assert_eq!(queue.stats(&keys, now_ms()).await.unwrap().dead, 0);
    // the schedule: every fire time once, none skipped across the upgrade
    let mut fires: Vec<u64> = all
        .iter()
        .filter_map(|s| s.0.strip_prefix("tick@").map(|ms| ms.parse().unwrap()))
        .collect();
    let count = fires.len();
    fires.sort_unstable();
    fires.dedup();
    // a fire time is enqueued once; it runs again only if the killed runner held it
    twice.extend((0..count - fires.len()).map(|_| "a fire time".to_owned()));
    let gaps: Vec<u64> = fires
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| *d != 1000)
        .collect();
    assert!(gaps.is_empty(), "fire times skipped: gaps {gaps:?}");
    assert!(
        wrong.is_empty(),
        "jobs that did not run exactly once: {wrong:?}"
    );
    assert!(
        twice.len() <= in_flight_at_kill,
        "{} mixed jobs ran twice, but the killed runner had {in_flight_at_kill} in flight: {twice:?}",
        twice.len()
    );
    let by_new = all.iter().filter(|s| s.3 >= 2).count();
    let handed_back = (0..6)
        .filter(|i| {
            let id = format!("long-{i}");
            all.iter().any(|s| s.0 == id && s.3 < 2) && all.iter().any(|s| s.0 == id && s.3 >= 2)
        })
        .count();
    assert_eq!(
        handed_back, 6,
        "the release held every long job and this build ended it"
    );
    println!(
        "upgrade from {release} ({}): {} attempts started ({} by the release's two runners, {by_new} by \
         this build's two), {} executions touched; mixed fleet: {} jobs, {} ran twice (the killed runner \
         had {in_flight_at_kill} in flight), {} expired unrun; {} fire times in a row; canary promoted \
         after the upgrade with {canary_sent} jobs; {handed_back} long jobs handed back or killed and ended by this build",
        &commit[..12],
        all.len(),
        all.len() - by_new,
        runs.values().map(Vec::len).sum::<usize>(),
        sent.len(),
        twice.len(),
        expired.len(),
        fires.len(),
    );
}
