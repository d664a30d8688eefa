//! The process mode: the shipped `hourglass run` binary as a child process,
//! the way a user runs it (default settings and log level, `[http]` serving
//! the API, dashboard and metrics), fed through the client crate, serving
//! the `noop` component (it acks and logs nothing; `echo`'s line per job
//! would be formatted and written at the default level). The in-process
//! rows measure the runner; these measure what users get. Its log goes to a
//! file outside the project folder (which the runner watches).
//!
//! One run: start the process, pause the topic, enqueue n no-op jobs, then
//! resume it and time until Redis holds none, reading the child's CPU from
//! `/proc` around the drain.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::Context;

use hourglass::clock::now_ms;
use hourglass::redis::{Queue, TraceContext};

use crate::hourglass::{enqueue_all, jobs, project_with};
use crate::server;

const TOPIC: &str = "bench";

/// What a process-mode run adds to the default project.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// Extra `queues.toml` text (e.g. a `[telemetry]` section).
    pub toml: String,
    /// Enqueue every job with this producer's `traceparent`.
    pub traceparent: Option<String>,
    /// Run this `hourglass` binary instead of this checkout's (another
    /// build's, for `--against`).
    pub bin: Option<PathBuf>,
}

/// A running `hourglass run`; killed on drop.
struct Process {
    child: Child,
    /// Where its API and metrics answer (host:port).
    http: String,
    _dir: tempfile::TempDir,
    _logs: tempfile::TempDir,
}

impl Process {
    async fn start(url: &str, setup: &Setup) -> anyhow::Result<Process> {
        let port = test_support::free_port();
        let toml = format!(
            "[redis]\nurl = \"{url}\"\nnamespace = \"bench\"\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n\n{}\n\n\
             [[topic]]\nname = \"{TOPIC}\"\nhandler = \"noop.wasm\"\n",
            setup.toml
        );
        let dir = project_with(&toml, &[("noop.wasm", test_support::components::NOOP)])?;
        let logs = tempfile::tempdir()?;
        let log = logs.path().join("runner.log");
        let bin = match &setup.bin {
            Some(bin) => bin.clone(),
            None => crate::languages::hourglass_bin()?,
        };
        let child = Command::new(&bin)
            .args(["run", "--config"])
            .arg(dir.path().join("queues.toml"))
            .env_remove("RUST_LOG")
            .stdout(std::fs::File::create(logs.path().join("runner.out"))?)
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut process = Process {
            child,
            http: format!("127.0.0.1:{port}"),
            _dir: dir,
            _logs: logs,
        };
        let started = Instant::now();
        while !std::fs::read_to_string(&log)?.contains("hourglass running") {
            if let Some(status) = process.child.try_wait()? {
                anyhow::bail!(
                    "{} run exited ({status}) before it said \"hourglass running\": {}",
                    bin.display(),
                    std::fs::read_to_string(&log)?
                );
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(60),
                "hourglass run did not start: {}",
                std::fs::read_to_string(&log)?
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(process)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A counter's value from its `/metrics`.
    async fn counter(&self, name: &str) -> f64 {
        let metrics =
            test_support::http_client::call(&self.http, "GET", "/metrics", None, None).await;
        metrics
            .body
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// Stop it with SIGTERM, as a deploy does, and wait for it to exit.
    async fn stop(mut self) -> anyhow::Result<()> {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait()?.is_none() {
            anyhow::ensure!(Instant::now() < deadline, "hourglass run did not stop");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// n immediate no-op jobs through a paused topic, drained by an `hourglass
/// run` process once resumed: jobs/s and the process's CPU per job.
pub async fn throughput(url: &str, n: usize, setup: &Setup) -> anyhow::Result<serde_json::Value> {
    let process = Process::start(url, setup).await?;
    let q = Queue::connect(url, "bench").await?;
    let k = q.keys(TOPIC);
    q.set_paused(&k, true).await?;
    let mut all = jobs(n, |_| 0, b"{}");
    if let Some(tp) = &setup.traceparent {
        let trace = TraceContext::parse(tp, None).map_err(anyhow::Error::msg)?;
        for job in &mut all {
            job.trace = Some(trace.clone());
        }
    }
    enqueue_all(&q, &k, &all).await?;
    let (cpu0, t0) = (server::cpu_micros(process.pid()), Instant::now());
    q.set_paused(&k, false).await?;
    loop {
        let s = q.stats(&k, now_ms()).await?;
        if s.ready + s.scheduled + s.running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (secs, cpu) = (
        t0.elapsed().as_secs_f64(),
        server::cpu_micros(process.pid()) - cpu0,
    );
    let dead = q.stats(&k, now_ms()).await?.dead;
    anyhow::ensure!(dead == 0, "{dead} no-op jobs failed");
    let dropped = process
        .counter("hourglass_telemetry_spans_dropped_total")
        .await;
    // a graceful stop exports the spans still queued
    process.stop().await?;
    Ok(serde_json::json!({
        "processed_per_sec": n as f64 / secs,
        "runner_cpu_us_per_job": cpu / n as f64,
        "spans_dropped": dropped,
    }))
}
