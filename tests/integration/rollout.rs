//! Rolling out a handler version safely: a canary that fails every job is
//! rolled back before its window ends and costs no dead letter; a good one is
//! promoted when its window ends; two runner processes agree, and a runner
//! killed with SIGKILL mid-rollout resumes it; pins survive a restart and a
//! new file; dead letters replay on a chosen version; jobs pinned to a version.

use std::collections::HashMap;
use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::{Event, EventKind};
use hourglass::redis::{NewJob, Queue, Rollout, TopicKeys};

use crate::util::{Monitor, Project, eventually};

/// Acked by echo and flaky; order_cancel fails it for good (not its JSON:
/// "a typo in a field name"); probe acks it.
const JOB: &str = r#"{"fail_first":0}"#;
const WAIT: Duration = Duration::from_secs(60);

fn topic(rollout: &str) -> String {
    format!(
        "[[topic]]\nname = \"pay\"\nhandler = \"pay.wasm\"\nconcurrency = 8\nmax_attempts = 3\n\
         backoff = {{ base = \"20ms\", factor = 1.0, max = \"20ms\", jitter = 0.0 }}\n{rollout}\n"
    )
}

/// A steady load on `pay` (`per_tick` jobs every 10 ms) until the returned
/// flag is set: a verdict that needs a sample never waits for a producer
/// that already stopped (the machine may be slow). The task returns the ids.
fn produce_until_stopped(
    queue: &Queue,
    per_tick: usize,
) -> (
    tokio::task::JoinHandle<Vec<String>>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (queue, flag) = (queue.clone(), stop.clone());
    let task = tokio::spawn(async move {
        let keys = queue.keys("pay");
        let mut ids = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            tick.tick().await;
            let now = now_ms();
            let jobs: Vec<NewJob> = (ids.len()..ids.len() + per_tick)
                .map(|i| NewJob {
                    id: Some(format!("job-{i}")),
                    payload: JOB.as_bytes().to_vec(),
                    due_at_ms: now,
                    ..Default::default()
                })
                .collect();
            ids.extend(jobs.iter().filter_map(|j| j.id.clone()));
            queue.enqueue(&keys, &jobs, now).await.unwrap();
        }
        ids
    });
    (task, stop)
}

/// The rollout of `pay` once `wanted` holds.
async fn rollout_until(queue: &Queue, what: &str, wanted: impl Fn(&Rollout) -> bool) -> Rollout {
    eventually(WAIT, what, || async {
        let state = queue
            .rollouts()
            .get(&queue.keys("pay"))
            .await
            .map_err(|e| e.to_string())?;
        if wanted(&state) {
            Ok(state)
        } else {
            Err(format!("{state:?}"))
        }
    })
    .await
}

/// Wait until each of `runners` runners has sent `pay`'s rollout report
/// (`rollout_sync.lua`, every 250 ms while a rollout policy applies) `n`
/// times since `monitor` started. The first may have been on its way
/// already; the second was sent after the first was answered, so it counts
/// every attempt that ended before the monitor started, and the route the
/// first one asked for is in force by then.
async fn reports(monitor: &mut Monitor, keys: &TopicKeys, runners: usize, n: usize) {
    let mut by = HashMap::<String, usize>::new();
    let what = format!("{n} rollout reports from each of {runners} runners");
    monitor
        .call(WAIT, &what, |args| {
            // EVALSHA, its hash, 2 keys, then now, file, share, window, keep,
            // who, counts... (a verdict or a pin, rollout_set.lua, has 5 arguments)
            if let [cmd, _, nkeys, rollout, versions, _, _, _, _, _, who, ..] = args
                && cmd.eq_ignore_ascii_case("evalsha")
                && nkeys == "2"
                && *rollout == keys.rollout
                && *versions == keys.versions
            {
                *by.entry(who.clone()).or_default() += 1;
            }
            by.values().filter(|sent| **sent >= n).count() >= runners
        })
        .await;
}

/// The URL of the (one) redis-server `project` uses.
fn url_of(project: &Project) -> String {
    project.endpoint.urls()[0].clone()
}

/// Per job, the handler version of each attempt and how the job ended.
fn lives(events: &[Event]) -> HashMap<&str, (Vec<&str>, Vec<&EventKind>)> {
    let mut lives: HashMap<&str, (Vec<&str>, Vec<&EventKind>)> = HashMap::new();
    for e in events.iter().filter(|e| e.topic == "pay") {
        let life = lives.entry(&e.id).or_default();
        match &e.kind {
            EventKind::Started { handler, .. } => life.0.push(handler),
            EventKind::Ran { .. } => {}
            other => life.1.push(other),
        }
    }
    lives
}

mod pins;
mod verdicts;
