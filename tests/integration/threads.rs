//! Where `hourglass run` runs attempts: a light handler's (its recent
//! attempts under `[runner] light_cpu` of CPU each) on the runner's own
//! thread, the one that claims and commits; a heavy one's on the pool of
//! `--threads`. Read
//! twice: from `/metrics` (`hourglass_attempts_started_total` by thread) and
//! from the threads' own CPU clocks (`/proc/<pid>/task/*/schedstat`), named
//! `hourglass` and `hourglass-pool`.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::redis::NewJob;

use crate::util::{Api, Project, RunnerProcess, TOKEN, eventually, metric};

/// The CPU time of each live thread of process `pid`: (thread id, name, ns).
fn threads(pid: u32) -> Vec<(u32, String, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let tid = dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
        // a thread may end between the listing and the reads
        let (Ok(name), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("schedstat")),
        ) else {
            continue;
        };
        let ns = stat.split_whitespace().next().unwrap().parse().unwrap();
        out.push((tid, name.trim().to_owned(), ns));
    }
    out
}

/// The CPU the threads named `hourglass` (the main thread, the runner's
/// worker, its blocking threads) and `hourglass-pool` used between two
/// [`threads`] readings, ns; a thread that ended meanwhile is not counted.
fn used(before: &[(u32, String, u64)], after: &[(u32, String, u64)]) -> (u64, u64) {
    let (mut own, mut pool) = (0, 0);
    for (tid, name, ns) in after {
        let was = before.iter().find(|t| t.0 == *tid).map_or(0, |t| t.2);
        match name.as_str() {
            "hourglass" => own += ns - was,
            "hourglass-pool" => pool += ns - was,
            _ => {}
        }
    }
    (own, pool)
}

/// Put `n` jobs with `payload` into `topic` and wait until its acks total `total`.
async fn drain(project: &Project, api: &Api, topic: &str, payload: &str, n: usize, total: u64) {
    let queue = project.queue().await;
    let jobs: Vec<NewJob> = (0..n)
        .map(|_| NewJob {
            payload: payload.as_bytes().to_vec(),
            due_at_ms: now_ms(),
            ..Default::default()
        })
        .collect();
    for chunk in jobs.chunks(1_000) {
        queue
            .enqueue(&queue.keys(topic), chunk, now_ms())
            .await
            .unwrap();
    }
    let label = topic_label(topic);
    eventually(Duration::from_secs(120), "the jobs acked", || async {
        let text = api.get("/metrics").await.body;
        match metric(
            &text,
            "hourglass_attempts_total",
            &[&label, "outcome=\"ack\""],
        ) as u64
        {
            acked if acked >= total => Ok(()),
            acked => Err(format!("{acked} of {total} acked")),
        }
    })
    .await;
}

/// `topic="<topic>"`.
fn topic_label(topic: &str) -> String {
    format!("topic=\"{topic}\"")
}

/// The CPU `topic`'s attempts used so far, µs.
async fn cpu_us(api: &Api, topic: &str) -> f64 {
    let text = api.get("/metrics").await.body;
    metric(&text, "hourglass_cpu_seconds_total", &[&topic_label(topic)]) * 1e6
}

/// The mean CPU of `topic`'s attempts so far, µs (for failure messages).
async fn mean_cpu_us(api: &Api, topic: &str) -> f64 {
    let text = api.get("/metrics").await.body;
    let label = topic_label(topic);
    metric(&text, "hourglass_cpu_seconds_total", &[&label]) * 1e6
        / metric(&text, "hourglass_attempt_cpu_seconds_count", &[&label]).max(1.0)
}

/// Attempts of `topic` started on the runner's thread and on the pool.
async fn started(api: &Api, topic: &str) -> (u64, u64) {
    let text = api.get("/metrics").await.body;
    let label = topic_label(topic);
    let on = |thread: &str| {
        let thread = format!("thread=\"{thread}\"");
        metric(
            &text,
            "hourglass_attempts_started_total",
            &[&label, &thread],
        ) as u64
    };
    (on("runner"), on("pool"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_light_handler_runs_on_the_runners_thread_and_a_heavy_one_on_the_pool() {
    let port = test_support::free_port();
    // the tests' build is unoptimized and the machine busy: a no-op's attempt
    // reads some 50 to 500 µs, the probe's 100 ms spin at least a tenth of it
    let project = Project::new(
        "concurrency = 16\nlight_cpu = \"2ms\"",
        &format!(
            "[[topic]]\nname = \"light\"\nhandler = \"noop.wasm\"\n\n\
             [[topic]]\nname = \"heavy\"\nhandler = \"probe.wasm\"\n\n\
             [http]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{TOKEN}\"\n"
        ),
    );
    let runner = RunnerProcess::launch_with(
        crate::util::hourglass_bin(),
        &project,
        crate::util::RUNNER_LOG,
        &["--threads", "2"],
    );
    runner.wait_for("hourglass running", Duration::from_secs(180));
    let api = Api(format!("127.0.0.1:{port}"));
    // a version's first attempts, before any has been measured, go to the
    // pool; the heavy ones spin long enough to read heavy even with a tenth
    // of a core (with 20 ms each, under the whole suite, they once averaged
    // under the 2 ms and the next claim's 16 went to the runner's thread)
    drain(&project, &api, "light", "{}", 20, 20).await;
    drain(&project, &api, "heavy", r#"{"spin_ms": 100}"#, 4, 4).await;
    let (light_before, heavy_before) = (started(&api, "light").await, started(&api, "heavy").await);

    let cpu = threads(runner.id());
    drain(&project, &api, "light", "{}", 2_000, 2_020).await;
    let after_light = threads(runner.id());
    let light = started(&api, "light").await;
    let (on_runner, on_pool) = (light.0 - light_before.0, light.1 - light_before.1);
    // a no-op's attempt preempted twice in a row reads heavy for a few attempts
    assert!(
        on_runner + on_pool == 2_000 && on_pool <= 20,
        "measured light, the later attempts run on the runner's thread: {on_runner} did, {on_pool} on the pool ({:.0} µs of CPU each)",
        mean_cpu_us(&api, "light").await
    );
    let (own, pool) = used(&cpu, &after_light);
    // the pool also answers the API and writes the per-minute history
    assert!(
        own > 3 * pool,
        "light jobs: the runner's thread used {own} ns, the pool {pool} (the API's answers)"
    );

    let spun = cpu_us(&api, "heavy").await;
    drain(&project, &api, "heavy", r#"{"spin_ms": 100}"#, 20, 24).await;
    let after_heavy = threads(runner.id());
    let spun = cpu_us(&api, "heavy").await - spun;
    let heavy = started(&api, "heavy").await;
    assert_eq!(
        (heavy.0 - heavy_before.0, heavy.1 - heavy_before.1),
        (0, 20),
        "heavy ({spun:.0} µs of CPU for 20), every attempt ran on the pool"
    );
    let (own, pool) = used(&after_light, &after_heavy);
    // each spins 100 ms by the wall clock, and gets what CPU the busy
    // machine gives it: the pool's threads used at least half of what the
    // attempts measured (their own CPU meter; the pool also answered the
    // API). The meter times an attempt by the wall clock until its first
    // epoch tick (usage.rs), so on a busy machine each attempt reads a few
    // ms more than it used; with 20 ms spins that was more than half (161
    // ms read against 74 used, in a loaded .ci/run), with 100 ms it is not
    assert!(
        pool as f64 >= spun * 1_000.0 / 2.0 && pool > 4 * own,
        "20 attempts that measured {spun:.0} µs of CPU: the pool used {pool} ns, the runner's thread {own}"
    );
    runner.kill();
}
