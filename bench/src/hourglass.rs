//! The hourglass contender: the real runner, in this process, with the
//! default configuration a user gets and the no-op `echo` component.

use std::time::{Duration, Instant};

use anyhow::Context;
use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::Done;
use hourglass::redis::{Endpoint, NewJob, Queue, TopicKeys};
use hourglass::wasm::{JobInput, Runtime, Sandbox};
use hourglass::{Config, Runner};
use tokio::sync::oneshot;

use crate::server;

mod measure;

pub use measure::{instance, scrape, spread};

pub const TOPIC: &str = "bench";

/// A project folder with queues.toml (defaults only) and echo.wasm.
pub struct Project {
    dir: tempfile::TempDir,
    url: String,
}

impl Project {
    /// A project in `dir` on the server at `url`.
    pub fn from_dir(dir: tempfile::TempDir, url: &str) -> Project {
        Project {
            dir,
            url: url.to_owned(),
        }
    }

    /// Its folder.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn new(url: &str) -> anyhow::Result<Project> {
        let dir = echo_project(&format!(
            "[redis]\nurl = \"{url}\"\nnamespace = \"bench\"\n\n[[topic]]\nname = \"{TOPIC}\"\nhandler = \"echo.wasm\"\n"
        ))?;
        Ok(Project {
            dir,
            url: url.to_owned(),
        })
    }

    pub fn config(&self) -> anyhow::Result<Config> {
        Ok(Config::load(&self.dir.path().join("queues.toml"))?)
    }

    async fn queue(&self) -> anyhow::Result<(Queue, TopicKeys)> {
        let q = Queue::connect(&self.url, "bench").await?;
        let k = q.keys(TOPIC);
        Ok((q, k))
    }
}

/// A temporary project folder: `queues.toml` with this text, and the echo
/// component in `handlers/`.
fn echo_project(queues_toml: &str) -> anyhow::Result<tempfile::TempDir> {
    project_with(
        queues_toml,
        &[("echo.wasm", test_support::components::ECHO)],
    )
}

/// A temporary project folder: `queues.toml` with this text, and these
/// (name, path) components in `handlers/`.
pub fn project_with(
    queues_toml: &str,
    components: &[(&str, &str)],
) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("handlers"))?;
    for (name, path) in components {
        std::fs::copy(path, dir.path().join("handlers").join(name))?;
    }
    std::fs::write(dir.path().join("queues.toml"), queues_toml)?;
    Ok(dir)
}

/// A runner in the background.
pub struct Background {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Background {
    pub fn start(runner: Runner) -> Background {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(runner.run(async {
            let _ = stopped.await;
        }));
        Background { stop, task }
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await?
    }
}

pub fn jobs(n: usize, due_at_ms: impl Fn(usize) -> u64, payload: &[u8]) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob {
            id: None,
            payload: payload.to_vec(),
            due_at_ms: due_at_ms(i),
            max_attempts: 0,
            ..Default::default()
        })
        .collect()
}

pub async fn enqueue_all(q: &Queue, k: &TopicKeys, jobs: &[NewJob]) -> anyhow::Result<()> {
    for chunk in jobs.chunks(1000) {
        q.enqueue(k, chunk, now_ms()).await?;
    }
    Ok(())
}

fn cpu_micros() -> f64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 * 1e6 + tv.tv_usec() as f64;
    t(usage.user_time()) + t(usage.system_time())
}

/// n immediate no-op jobs enqueued in batches of 1000, then processed.
pub async fn throughput(p: &Project, n: usize) -> anyhow::Result<serde_json::Value> {
    drain(p, n, b"{}").await
}

/// n immediate jobs whose handler (the probe) makes one GET to a loopback
/// endpoint and acks: throughput with one outbound call per job.
pub async fn http_call(url: &str, n: usize) -> anyhow::Result<serde_json::Value> {
    let sink = crate::sink::Sink::start().await?;
    let dir = project_with(
        &format!(
            "[redis]\nurl = \"{url}\"\nnamespace = \"bench\"\n\n[[topic]]\nname = \"{TOPIC}\"\nhandler = \"probe.wasm\"\ngrants = {{ http = [\"{}\"] }}\n",
            sink.url()
        ),
        &[("probe.wasm", test_support::components::PROBE)],
    )?;
    let p = Project {
        dir,
        url: url.to_owned(),
    };
    let payload = format!(r#"{{"fetch":"{}/ping"}}"#, sink.url());
    let result = drain(&p, n, payload.as_bytes()).await?;
    let (q, k) = p.queue().await?;
    let dead = q.stats(&k, now_ms()).await?.dead;
    anyhow::ensure!(dead == 0, "{dead} outbound-call jobs failed");
    Ok(result)
}

/// Enqueue n immediate jobs with `payload` in batches of 1000, then run the
/// runner until they are all processed.
async fn drain(p: &Project, n: usize, payload: &[u8]) -> anyhow::Result<serde_json::Value> {
    let (q, k) = p.queue().await?;
    let all = jobs(n, |_| 0, payload);
    let t0 = Instant::now();
    enqueue_all(&q, &k, &all).await?;
    let enqueue_secs = t0.elapsed().as_secs_f64();
    let runner = Runner::start(p.config()?).await?;
    let (cpu0, t1) = (cpu_micros(), Instant::now());
    let bg = Background::start(runner);
    loop {
        let s = q.stats(&k, now_ms()).await?;
        if s.ready + s.scheduled + s.running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (secs, cpu) = (t1.elapsed().as_secs_f64(), cpu_micros() - cpu0);
    bg.stop().await?;
    Ok(serde_json::json!({
        "enqueue_per_sec": n as f64 / enqueue_secs,
        "processed_per_sec": n as f64 / secs,
        "runner_cpu_us_per_job": cpu / n as f64,
    }))
}

/// n delayed jobs due over `spread`, `lead` from now: handler start − due.
pub async fn lateness(
    p: &Project,
    n: usize,
    spread: Duration,
    lead: Duration,
) -> anyhow::Result<serde_json::Value> {
    let (q, k) = p.queue().await?;
    let runner = Runner::start(p.config()?).await?;
    let mut events = runner.subscribe();
    let bg = Background::start(runner);
    let base = now_ms() + lead.as_millis() as u64;
    let spread_ms = spread.as_millis() as u64;
    let all = jobs(n, |_| base + rand::random_range(0..spread_ms), b"{}");
    enqueue_all(&q, &k, &all).await?;
    let mut late = Vec::with_capacity(n);
    let mut early = 0u64;
    while late.len() < n {
        let e = events.recv().await.context("event stream")?;
        if let EventKind::Started {
            due_at_ms,
            started_at_ms,
            ..
        } = e.kind
        {
            if started_at_ms < due_at_ms {
                early += 1;
            }
            late.push(started_at_ms as f64 - due_at_ms as f64);
        }
    }
    bg.stop().await?;
    late.sort_by(f64::total_cmp);
    Ok(serde_json::json!({
        "p50_ms": crate::report::percentile(&late, 50.0),
        "p99_ms": crate::report::percentile(&late, 99.0),
        "max_ms": late.last().copied().unwrap_or(0.0),
        "early": early,
    }))
}

/// n jobs with a 100-byte payload scheduled an hour out: Redis memory per job.
pub async fn memory(p: &Project, n: usize) -> anyhow::Result<serde_json::Value> {
    let (q, k) = p.queue().await?;
    let before = server::info(&p.url, "memory", "used_memory").await?;
    let later = now_ms() + 3_600_000;
    enqueue_all(&q, &k, &jobs(n, |i| later + i as u64, &[b'x'; 100])).await?;
    let after = server::info(&p.url, "memory", "used_memory").await?;
    Ok(serde_json::json!({ "bytes_per_job": (after - before) / n as f64 }))
}

/// Add `count` jobs to `topic`, due a day from now (four producers at once).
pub async fn prefill(p: &Project, topic: &str, count: usize) -> anyhow::Result<()> {
    let (q, _) = p.queue().await?;
    let k = q.keys(topic);
    let later = now_ms() + 86_400_000;
    let mut tasks = tokio::task::JoinSet::new();
    for part in 0..4 {
        let (q, k) = (q.clone(), k.clone());
        tasks.spawn(async move {
            let mine = jobs(
                count / 4 + usize::from(part < count % 4),
                |i| later + (i * 4 + part) as u64,
                b"{}",
            );
            enqueue_all(&q, &k, &mine).await
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(())
}

/// Enqueue `n` jobs due now to `topic`, then claim and ack them all, 100 at
/// a time (the topic is left as it was): µs per job of each step.
pub async fn scaling_round(
    p: &Project,
    topic: &str,
    n: usize,
) -> anyhow::Result<serde_json::Value> {
    let (q, _) = p.queue().await?;
    let k = q.keys(topic);
    let due = now_ms();
    let fresh = jobs(n, |_| due, b"{}");
    let t0 = Instant::now();
    enqueue_all(&q, &k, &fresh).await?;
    let enqueue_us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
    let (mut claimed, mut claim_secs, mut ack_secs) = (0, 0.0, 0.0);
    while claimed < n {
        let t = Instant::now();
        let batch = q
            .pipeline()
            .claim(&k, now_ms(), now_ms() + 60_000, 100)
            .await?;
        claim_secs += t.elapsed().as_secs_f64();
        anyhow::ensure!(!batch.jobs.is_empty(), "claimed {claimed} of {n}");
        claimed += batch.jobs.len();
        let done: Vec<Done> = batch
            .jobs
            .into_iter()
            .map(|j| Done {
                logs: String::new(),
                notice: None,
                end: None,
                id: j.id,
                attempt: j.attempt,
                follow_ups: vec![],
                flows: Vec::new(),
            })
            .collect();
        let t = Instant::now();
        q.pipeline()
            .ack(&k, &done, now_ms(), Default::default())
            .await?;
        ack_secs += t.elapsed().as_secs_f64();
    }
    Ok(serde_json::json!({
        "enqueue_us_per_job": enqueue_us,
        "claim_us_per_job": claim_secs * 1e6 / n as f64,
        "ack_us_per_job": ack_secs * 1e6 / n as f64,
    }))
}
