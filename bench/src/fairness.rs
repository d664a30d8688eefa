//! The `fairness` section: what fair claiming costs Redis. The same jobs
//! (due, a no-op payload) claimed and acked through the client crate in
//! batches of 256, as a runner does, on a topic without fairness and on one
//! whose jobs are spread over 10, 1,000 and 100,000 tenant keys (taking
//! turns by jobs; then by CPU, whose keys tag 32 jobs at a time, and by jobs
//! with per-key limits that do not bind, whose claims count each key's
//! running jobs and rate); per job, Redis's CPU (the server process's, from /proc)
//! for the whole claim-and-ack cycle, and Redis's memory while the jobs wait
//! (used_memory after the enqueue, less the same jobs without fairness, per
//! key). Cases rotate per repeat; ratios are to the topic without fairness
//! of the same repeat.

use ::hourglass::clock::now_ms;
use ::hourglass::redis::{Done, Fairness, NewJob, Queue, RateLimit, Share};
use serde_json::{Value, json};

use crate::server;

/// The key counts measured (0: the topic without fairness).
pub const KEYS: [usize; 4] = [0, 10, 1_000, 100_000];

/// The ways of fair claiming measured: by jobs, by CPU, by jobs with limits
/// (256 at once per key, 100,000 starts a second: the claims take the
/// limits' path, which never holds a key here).
pub const WAYS: [(&str, Fairness); 3] = [
    (
        "jobs",
        Fairness {
            share: Share::Jobs,
            key_concurrency: 0,
            key_rate: None,
        },
    ),
    (
        "cpu",
        Fairness {
            share: Share::Cpu,
            key_concurrency: 0,
            key_rate: None,
        },
    ),
    (
        "limits",
        Fairness {
            share: Share::Jobs,
            key_concurrency: 256,
            key_rate: Some(RateLimit {
                interval_ms: 0.01,
                burst: 1_000,
            }),
        },
    ),
];

/// One case: `jobs` jobs over `keys` keys (0: no fairness), claimed and
/// acked the way `fair` says.
pub async fn case(
    url: &str,
    pid: Option<u32>,
    jobs: usize,
    keys: usize,
    fair: &Fairness,
) -> anyhow::Result<Value> {
    server::flush(url).await?;
    let q = Queue::connect(url, "bench").await?;
    let k = q.keys("fair");
    let fair = (keys > 0).then_some(fair);
    let claim = |now| {
        q.pipeline()
            .claim_ahead(&k, now, now, now + 600_000, 256, None, fair)
    };
    // a first claim marks the topic as claiming fairly (as a runner's does)
    claim(now_ms()).await?;
    let memory_before = server::info(url, "memory", "used_memory").await?;
    let now = now_ms();
    let batch: Vec<NewJob> = (0..jobs)
        .map(|i| NewJob {
            id: Some(format!("j{i}")),
            payload: b"{}".to_vec(),
            due_at_ms: now,
            key: (keys > 0).then(|| format!("tenant-{}", i % keys)),
            ..Default::default()
        })
        .collect();
    for chunk in batch.chunks(10_000) {
        q.enqueue(&k, chunk, now).await?;
    }
    let memory = server::info(url, "memory", "used_memory").await? - memory_before;
    let cpu_before = pid.map(server::cpu_micros);
    let (calls_before, usec_before) = (
        server::commandstats(url).await?,
        server::script_usec(url).await?,
    );
    let started = std::time::Instant::now();
    let mut done = 0;
    let mut claim_usec = 0.0;
    while done < jobs {
        let before = server::script_usec(url).await?;
        let claimed = claim(now_ms()).await?;
        claim_usec += server::script_usec(url).await? - before;
        anyhow::ensure!(
            !claimed.jobs.is_empty(),
            "claims ran dry at {done} of {jobs}"
        );
        let acks: Vec<Done> = claimed
            .jobs
            .iter()
            .map(|j| Done {
                logs: String::new(),
                notice: None,
                end: None,
                id: j.id.clone(),
                attempt: j.attempt,
                follow_ups: Vec::new(),
                flows: Vec::new(),
            })
            .collect();
        q.pipeline()
            .ack(&k, &acks, now_ms(), Default::default())
            .await?;
        done += acks.len();
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu = pid.map(|p| (server::cpu_micros(p) - cpu_before.unwrap_or(0.0)) / jobs as f64);
    let calls = server::commandstats(url).await?;
    let usec = server::script_usec(url).await?;
    Ok(json!({
        "redis_cpu_us_per_job": cpu,
        "script_us_per_job": (usec - usec_before) / jobs as f64,
        "claim_us_per_job": claim_usec / jobs as f64,
        "commands_per_job": (calls.0 - calls_before.0 - (calls.1 - calls_before.1)) / jobs as f64,
        "per_sec": jobs as f64 / secs,
        "memory_bytes": memory,
    }))
}

impl crate::Bench {
    /// Each key count in turn (the order rotating per repeat), recorded as
    /// Redis CPU per job, its ratio to no fairness, and bytes per key.
    pub(crate) async fn fairness(&mut self) -> anyhow::Result<()> {
        let jobs = self.sizes.throughput;
        let pid = self.redis.pid();
        for r in 0..self.args.repeats {
            eprintln!("== fairness {}/{}", r + 1, self.args.repeats);
            let mut got = std::collections::BTreeMap::new();
            let cases: Vec<(usize, usize)> = (0..KEYS.len())
                .flat_map(|i| {
                    let keys = KEYS[(i + r) % KEYS.len()].min(jobs);
                    let ways = if keys == 0 { 1 } else { WAYS.len() };
                    (0..ways).map(move |w| (keys, (w + r) % ways))
                })
                .collect();
            for (keys, w) in cases {
                let (way, fair) = &WAYS[w];
                eprintln!("   fairness {way} @{keys} keys");
                got.insert((keys, w), case(&self.url, pid, jobs, keys, fair).await?);
            }
            self.fairness_report(&got);
        }
        Ok(())
    }

    /// One repeat's figures (`got`: per key count and way), each against
    /// the topic without fairness of the same repeat.
    fn fairness_report(&mut self, got: &std::collections::BTreeMap<(usize, usize), Value>) {
        {
            let plain = &got[&(0, 0)];
            let cpu = |v: &Value| v["redis_cpu_us_per_job"].as_f64();
            let script = |v: &Value| v["script_us_per_job"].as_f64();
            let report = &mut self.report;
            report.record("fairness none script_us_per_job", "µs", script(plain), None);
            report.record(
                "fairness none claim_us_per_job",
                "µs",
                plain["claim_us_per_job"].as_f64(),
                None,
            );
            report.record("fairness none redis_cpu_us_per_job", "µs", cpu(plain), None);
            for ((keys, w), v) in got.iter().filter(|((k, _), _)| *k > 0) {
                let keys_n = *keys;
                let label = match WAYS[*w].0 {
                    "jobs" => format!("fairness @{keys} keys"),
                    way => format!("fairness {way} @{keys} keys"),
                };
                report.record(&format!("{label} redis_cpu_us_per_job"), "µs", cpu(v), None);
                report.record(
                    &format!("{label} cpu_ratio_to_none"),
                    "×",
                    cpu(v).zip(cpu(plain)).map(|(a, b)| a / b),
                    None,
                );
                report.record(&format!("{label} script_us_per_job"), "µs", script(v), None);
                report.record(
                    &format!("{label} script_ratio_to_none"),
                    "×",
                    script(v).zip(script(plain)).map(|(a, b)| a / b),
                    None,
                );
                report.record(
                    &format!("{label} claim_us_per_job"),
                    "µs",
                    v["claim_us_per_job"].as_f64(),
                    None,
                );
                report.record(
                    &format!("{label} commands_per_job"),
                    "calls",
                    v["commands_per_job"].as_f64(),
                    None,
                );
                report.record(
                    &format!("{label} per_sec"),
                    "jobs/s",
                    v["per_sec"].as_f64(),
                    None,
                );
                let extra = v["memory_bytes"]
                    .as_f64()
                    .zip(plain["memory_bytes"].as_f64());
                report.record(
                    &format!("{label} bytes_per_key"),
                    "bytes",
                    extra.map(|(a, b)| (a - b) / keys_n as f64),
                    None,
                );
            }
        }
    }
}
