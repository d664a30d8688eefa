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

use crate::util::{Project, RunnerProcess, eventually};

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

mod route;
