//! What autoscalers read: `scale.lua` against a model with the clock in the
//! test's hands (ready, the oldest ready job, due within the horizon, across
//! priorities, split buckets, one big bucket and claims); `GET /api/scale`,
//! `/api/topics/{topic}/scale` and the `hourglass_scale_*` gauges of a
//! runner-less `hourglass serve` saying what Redis holds, a fair topic's
//! backlog per key, and the suggested runners following a runner's measured
//! attempt time; and a runner started after its jobs came due (scaled from
//! zero) running them all, with how long that took printed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hourglass::clock::now_ms;
use hourglass::redis::scale::{Capacity, HORIZON_MS, suggest};
use hourglass::redis::{Load, NewJob};
use serde_json::Value;

use crate::util::{Api, Project, RunnerProcess, TOKEN, eventually, hourglass, metric};

/// A xorshift: the same jobs every run.
fn random(seed: &mut u64, n: u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed % n
}

/// What the model says of the waiting jobs (id -> due) at `t`.
fn model(waiting: &BTreeMap<String, u64>, running: u64, t: u64) -> Load {
    let ready = waiting.values().filter(|d| **d <= t).count() as u64;
    let soon = waiting
        .values()
        .filter(|d| **d > t && **d <= t + HORIZON_MS)
        .count() as u64;
    let oldest = waiting.values().copied().filter(|d| *d <= t).min();
    Load {
        ready,
        oldest_ready_age_ms: oldest.map(|d| t - d),
        running,
        suspended: 0,
        due_soon: soon,
        paused: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_read_counts_what_a_model_of_the_waiting_jobs_says() {
    let project = Project::new("", "[[topic]]\nname = \"t\"\nhandler = \"echo.wasm\"\n");
    let queue = project.queue().await;
    let keys = queue.keys("t");
    let start = 1_900_000_000_000u64;
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut waiting: BTreeMap<String, u64> = BTreeMap::new();
    let mut running = 0u64;
    let mut n = 0;
    for round in 0..12u64 {
        let now = start + round * 20_000;
        // random dues from 30 s ago to 3 min ahead, priorities 0 to 2, and
        // every third round a bulk due at one time (one bucket, never split)
        let mut jobs = Vec::new();
        let shared = now + random(&mut seed, 90_000);
        for _ in 0..(100 + random(&mut seed, 400)) {
            n += 1;
            let due = match round % 3 {
                0 => shared,
                _ => (now + random(&mut seed, 210_000)).saturating_sub(30_000),
            };
            waiting.insert(format!("j{n}"), due);
            jobs.push(NewJob {
                id: Some(format!("j{n}")),
                payload: b"{}".to_vec(),
                due_at_ms: due,
                priority: random(&mut seed, 3) as u8,
                ..Default::default()
            });
        }
        queue.enqueue(&keys, &jobs, now).await.unwrap();
        // the read at several instants: now, within and past the horizon
        for dt in [0, 1, 17_000, 59_999, 60_000, 61_000, 150_000] {
            let t = now + dt;
            let read = queue.load(&keys, t, HORIZON_MS).await.unwrap();
            assert_eq!(
                read,
                model(&waiting, running, t),
                "round {round}, t = now + {dt} ms"
            );
        }
        // a claim takes some of what is due (leased: running, no longer waiting)
        let claimed = queue
            .pipeline()
            .claim(
                &keys,
                now,
                now + 600_000,
                1 + random(&mut seed, 60) as usize,
            )
            .await
            .unwrap();
        for job in &claimed.jobs {
            assert!(waiting.remove(&job.id).is_some_and(|due| due <= now));
            running += 1;
        }
    }
    assert!(running > 0, "claims took jobs");
    let read = queue.load(&keys, start, HORIZON_MS).await.unwrap();
    println!(
        "scale read against the model: {n} jobs, {running} claimed, {} waiting ({} ready at the start)",
        waiting.len(),
        read.ready
    );
}

/// `hourglass serve` (no runner) with `[http]` on a port of its own.
struct Serve {
    _child: tokio::process::Child,
    api: Api,
}

/// `[http]` on a free port appended to a copy of the project's queues.toml
/// named `name` (in the same folder): the file and the API's address.
fn with_http(project: &Project, name: &str) -> (std::path::PathBuf, String) {
    let port = test_support::free_port();
    let text = std::fs::read_to_string(project.config_path()).unwrap();
    let path = project.dir.path().join(name);
    std::fs::write(
        &path,
        format!("{text}\n[http]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{TOKEN}\"\n"),
    )
    .unwrap();
    (path, format!("127.0.0.1:{port}"))
}

async fn serve(project: &Project) -> Serve {
    let (config, addr) = with_http(project, "serve.toml");
    let child = tokio::process::Command::new(crate::util::hourglass_bin())
        .args(["serve", "--config"])
        .arg(config)
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(60), "hourglass serve listens", || {
        let addr = addr.clone();
        async move {
            tokio::net::TcpStream::connect(&addr)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await;
    let api = Api(addr);
    Serve { _child: child, api }
}

fn jobs(prefix: &str, n: usize, due: u64, payload: &str, key: Option<&str>) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob {
            id: Some(format!("{prefix}{i}")),
            payload: payload.as_bytes().to_vec(),
            due_at_ms: due,
            key: key.map(str::to_owned),
            ..Default::default()
        })
        .collect()
}

fn topic<'a>(view: &'a Value, name: &str) -> &'a Value {
    view["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == name)
        .unwrap_or_else(|| panic!("no topic {name} in {view:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_route_and_gauges_say_what_redis_holds_and_follow_the_attempt_time() {
    let topics = r#"
[[topic]]
name = "work"
handler = "probe.wasm"
concurrency = 1

[[topic]]
name = "fair"
handler = "probe.wasm"
fairness = { by = "key" }
key_concurrency = 1
"#;
    let project = Project::new("concurrency = 8", topics);
    let queue = project.queue().await;
    let now = now_ms();
    let spin = r#"{"spin_ms":100}"#;
    let work = queue.keys("work");
    // due 10 s ago, due now, in 30 s, in 5 minutes
    queue
        .enqueue(&work, &jobs("old", 5, now - 10_000, spin, None), now)
        .await
        .unwrap();
    queue
        .enqueue(&work, &jobs("now", 25, now, spin, None), now)
        .await
        .unwrap();
    queue
        .enqueue(&work, &jobs("soon", 20, now + 30_000, spin, None), now)
        .await
        .unwrap();
    queue
        .enqueue(&work, &jobs("later", 10, now + 300_000, spin, None), now)
        .await
        .unwrap();
    let fair = queue.keys("fair");
    queue
        .enqueue(
            &fair,
            &jobs("a", 5, now, r#"{"spin_ms":1500}"#, Some("acme")),
            now,
        )
        .await
        .unwrap();
    queue
        .enqueue(
            &fair,
            &jobs("b", 3, now, r#"{"spin_ms":1500}"#, Some("globex")),
            now,
        )
        .await
        .unwrap();

    let server = serve(&project).await;
    let view = server.api.get("/api/scale").await;
    assert_eq!(view.status, 200, "{}", view.body);
    let view = view.json();
    let w = topic(&view, "work");
    assert_eq!(w["ready"], 30, "{w:#}");
    assert_eq!(w["due_soon"], 20, "{w:#}");
    assert_eq!(w["running"], 0, "{w:#}");
    assert_eq!(w["concurrency"], 1, "{w:#}");
    assert!(
        w["oldest_ready_age_ms"].as_u64().unwrap() >= 10_000,
        "{w:#}"
    );
    assert_eq!(w["attempt_us"], Value::Null, "no runner has run it");
    assert_eq!(
        w["suggested_runners"], 1,
        "unmeasured work asks for one runner"
    );
    let f = topic(&view, "fair");
    assert_eq!(f["ready"], 8, "{f:#}");
    // due jobs reach their key's queue at a claim: no runner, no backlog per key yet
    assert_eq!(f["keys"]["keys_with_jobs"], 0, "{f:#}");
    assert_eq!(view["suggested_runners"], 1, "{view:#}");
    assert_eq!(view["runners"], 0);
    let one = server.api.get("/api/topics/work/scale").await.json();
    assert_eq!(one["ready"], 30, "{one:#}");
    assert_eq!(
        server.api.get("/api/topics/nope/scale").await.status,
        404,
        "an unknown topic"
    );
    let text = server.api.get("/metrics").await.body;
    assert_eq!(
        metric(
            &text,
            "hourglass_scale_due_next_minute",
            &["topic=\"work\""]
        ),
        20.0
    );
    assert_eq!(
        metric(
            &text,
            "hourglass_scale_suggested_runners",
            &["topic=\"work\""]
        ),
        1.0
    );
    assert_eq!(metric(&text, "hourglass_scale_fleet_runners", &[]), 1.0);
    assert!(
        metric(
            &text,
            "hourglass_scale_oldest_ready_age_seconds",
            &["topic=\"work\""]
        ) >= 10.0
    );

    // a runner runs the 100 ms jobs one at a time: its heartbeats carry the
    // attempt time, and the suggestion follows it
    queue
        .enqueue(&work, &jobs("more", 3000, now, spin, None), now)
        .await
        .unwrap();
    // the runner's own API (queues.toml), beside the one of `serve`
    let (runner_config, runner_addr) = with_http(&project, "runner.toml");
    std::fs::rename(&runner_config, project.config_path()).unwrap();
    let runner = RunnerProcess::start(&project);
    // claimed into their keys' queues, one at a time per key: the backlog per key
    let f = server
        .api
        .until("/api/topics/fair/scale", |t| {
            let sums: Vec<u64> = t["keys"]["top"]
                .as_array()
                .map(|top| {
                    top.iter()
                        .map(|k| {
                            k["queued"].as_u64().unwrap_or(0) + k["running"].as_u64().unwrap_or(0)
                        })
                        .collect()
                })
                .unwrap_or_default();
            sums == [5, 3]
        })
        .await;
    let top: Vec<(String, u64)> = f["keys"]["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let n = |f: &str| k[f].as_u64().unwrap();
            (
                k["key"].as_str().unwrap().to_owned(),
                n("queued") + n("running"),
            )
        })
        .collect();
    assert_eq!(
        top,
        [("acme".to_owned(), 5), ("globex".to_owned(), 3)],
        "{f:#}"
    );
    assert_eq!(
        (
            f["keys"]["other"].as_u64(),
            f["keys"]["keys_with_jobs"].as_u64()
        ),
        (Some(0), Some(2)),
        "{f:#}"
    );
    let measured = server
        .api
        .until("/api/topics/work/scale", |t| {
            t["attempt_us"].is_u64() && t["running"] == 1
        })
        .await;
    let attempt_us = measured["attempt_us"].as_u64().unwrap();
    assert!(
        attempt_us >= 100_000,
        "an attempt spins 100 ms of wall time: {attempt_us} us"
    );
    // an independent measure: the runner's own histogram of attempt times
    let text = Api(runner_addr).get("/metrics").await.body;
    let sum = metric(
        &text,
        "hourglass_attempt_duration_seconds_sum",
        &["topic=\"work\""],
    );
    let count = metric(
        &text,
        "hourglass_attempt_duration_seconds_count",
        &["topic=\"work\""],
    );
    let mean_us = sum / count * 1e6;
    assert!(
        count > 0.0 && (0.5..2.0).contains(&(attempt_us as f64 / mean_us)),
        "heartbeat {attempt_us} us against the histogram's mean {mean_us:.0} us over {count} attempts"
    );
    let load: Load = Load {
        ready: measured["ready"].as_u64().unwrap(),
        oldest_ready_age_ms: measured["oldest_ready_age_ms"].as_u64(),
        running: measured["running"].as_u64().unwrap(),
        suspended: measured["suspended"].as_u64().unwrap(),
        due_soon: measured["due_soon"].as_u64().unwrap(),
        paused: false,
    };
    let expected = suggest(
        &load,
        Capacity {
            concurrency: 1,
            rate_per_s: None,
        },
        Some(attempt_us),
        HORIZON_MS,
    );
    assert_eq!(measured["suggested_runners"], expected, "{measured:#}");
    assert!(
        expected >= 4,
        "about 3,000 jobs of 100 ms through one slot need several runners in a minute: {measured:#}"
    );
    // paused, its ready jobs need no runner: what runs is all that counts
    let paused = hourglass(&project, &["pause", "work"]);
    assert!(paused.status.success());
    let quiet = server
        .api
        .until("/api/topics/work/scale", |t| {
            t["paused"] == true && t["running"] == 0
        })
        .await;
    assert_eq!(quiet["suggested_runners"], 0, "{quiet:#}");
    runner.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_started_after_its_jobs_came_due_runs_them_all() {
    let project = Project::new(
        "concurrency = 16",
        "[[topic]]\nname = \"later\"\nhandler = \"echo.wasm\"\n",
    );
    let queue = project.queue().await;
    let keys = queue.keys("later");
    let n = 500;
    let due = now_ms() + 1_500;
    queue
        .enqueue(&keys, &jobs("z", n, due, "{}", None), now_ms())
        .await
        .unwrap();
    // scaled to zero: nobody runs them; the read says they are due and want a runner
    let load = eventually(Duration::from_secs(30), "the jobs came due", || async {
        match queue.load(&keys, now_ms(), HORIZON_MS).await.unwrap() {
            l if l.ready == n as u64 => Ok(l),
            l => Err(format!("{l:?}")),
        }
    })
    .await;
    let capacity = Capacity {
        concurrency: 16,
        rate_per_s: None,
    };
    assert_eq!(suggest(&load, capacity, None, HORIZON_MS), 1);
    let started = Instant::now();
    let runner = RunnerProcess::start(&project);
    let up = started.elapsed();
    eventually(Duration::from_secs(120), "every job ran", || async {
        match queue.stats(&keys, now_ms()).await.unwrap() {
            s if s.scheduled + s.ready + s.running == 0 => {
                assert_eq!(s.dead, 0);
                Ok(())
            }
            s => Err(format!("{s:?}")),
        }
    })
    .await;
    let all = started.elapsed();
    println!(
        "scaled from zero: {n} jobs due while no runner ran; the runner said it was running {} ms \
         after it was started and had run them all {} ms after it",
        up.as_millis(),
        all.as_millis()
    );
    runner.kill();
}
