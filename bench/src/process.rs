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
//! [`throughput_api`] does the same through the process's own HTTP API
//! instead of the client crate, for `--against`, whose other build may keep
//! another Redis layout.

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
    /// Serve this component instead of the no-op (a path from
    /// `test_support::components`).
    pub handler: Option<&'static str>,
    /// Every job's payload instead of `{}`.
    pub payload: Option<Vec<u8>>,
    /// redis-server's pid: [`throughput`] then also reads Redis's CPU over
    /// the drain and the bytes it holds per job after it (`used_memory`).
    pub redis_pid: Option<u32>,
}

/// A running `hourglass run`; killed on drop.
struct Process {
    child: Child,
    /// Where its API and metrics answer (host:port).
    http: String,
    /// Its stderr: the log.
    log: PathBuf,
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
        let handler = setup.handler.unwrap_or(test_support::components::NOOP);
        let dir = project_with(&toml, &[("noop.wasm", handler)])?;
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
            log: log.clone(),
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

    /// The last lines of its log, to show with an error.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n  | ");
        format!("the runner's log ends:\n  | {tail}")
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
    q.admin().set_paused(&k, true).await?;
    let mut all = jobs(n, |_| 0, setup.payload.as_deref().unwrap_or(b"{}"));
    if let Some(tp) = &setup.traceparent {
        let trace = TraceContext::parse(tp, None).map_err(anyhow::Error::msg)?;
        for job in &mut all {
            job.trace = Some(trace.clone());
        }
    }
    let memory0 = match setup.redis_pid {
        Some(_) => Some(server::info(url, "memory", "used_memory").await?),
        None => None,
    };
    enqueue_all(&q, &k, &all).await?;
    let redis0 = setup.redis_pid.map(server::cpu_micros);
    let (cpu0, t0) = (server::cpu_micros(process.pid()), Instant::now());
    q.admin().set_paused(&k, false).await?;
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
    let redis_cpu = setup
        .redis_pid
        .zip(redis0)
        .map(|(pid, before)| (server::cpu_micros(pid) - before) / n as f64);
    let dead = q.stats(&k, now_ms()).await?.dead;
    anyhow::ensure!(dead == 0, "{dead} no-op jobs failed");
    // what Redis still holds of the jobs (their kept ends, stories and logs)
    let kept = match memory0 {
        Some(before) => {
            Some((server::info(url, "memory", "used_memory").await? - before) / n as f64)
        }
        None => None,
    };
    let dropped = process
        .counter("hourglass_telemetry_spans_dropped_total")
        .await;
    // a graceful stop exports the spans still queued
    process.stop().await?;
    Ok(serde_json::json!({
        "processed_per_sec": n as f64 / secs,
        "runner_cpu_us_per_job": cpu / n as f64,
        "spans_dropped": dropped,
        "redis_cpu_us_per_job": redis_cpu,
        "redis_bytes_per_job": kept,
    }))
}

/// What `--against` needs of a build's HTTP API, and since when it has it.
const API_NEEDS: &str = "the process mode feeds a build through its HTTP API: `[http] listen`, \
     GET /api/topics/{topic}, POST /api/topics/{topic}/pause and /resume, and bulk \
     POST /api/topics/{topic}/jobs (an array of up to 10,000), there since 972ac79";

/// Jobs per bulk call (the API's most).
const BULK: usize = 10_000;

/// n immediate no-op jobs put in through the process's own HTTP API while
/// the topic is paused (pause, bulk enqueues of 10,000, resume: what any
/// producer can do), so that builds with different Redis layouts are fed
/// and measured alike (`--against`). The drain's end is seen in Redis, on
/// the key that held the n jobs once they were in (the job hash in every
/// layout so far), polled every 5 ms as the client-fed run polls its
/// counts, so the runner is not asked (which would add to its CPU); when no
/// key holds exactly n, the API's counts are polled instead, every 20 ms,
/// and the result says so (`drain_watch`). Jobs/s and the runner's CPU per
/// job are over the drain, as in [`throughput`]; Redis's CPU per job from
/// the first enqueue to the drain's end (what a job costs it in all, as
/// BullMQ's figure counts) and over the drain alone.
pub async fn throughput_api(
    url: &str,
    redis_pid: Option<u32>,
    n: usize,
    setup: &Setup,
) -> anyhow::Result<serde_json::Value> {
    let process = Process::start(url, setup).await?;
    let api = process.http.clone();
    let topic_path = format!("/api/topics/{TOPIC}");
    let counts = |v: &serde_json::Value| -> anyhow::Result<(u64, u64)> {
        let field = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| anyhow::anyhow!("GET {topic_path} answered without {k:?}: {v}"))
        };
        Ok((
            field("ready")? + field("scheduled")? + field("running")?,
            field("dead")?,
        ))
    };
    let topic = call_json(&api, "GET", &topic_path, "").await?;
    counts(&topic)?;
    call_json(&api, "POST", &format!("{topic_path}/pause"), "").await?;

    let redis_cpu = || redis_pid.map(server::cpu_micros);
    let (cpu_e, redis_e, stats_e) = (
        server::cpu_micros(process.pid()),
        redis_cpu(),
        server::commandstats(url).await?,
    );
    let te = Instant::now();
    let jobs_path = format!("{topic_path}/jobs");
    let mut left = n;
    while left > 0 {
        let k = left.min(BULK);
        let body = format!("[{}]", vec![r#"{"payload":{}}"#; k].join(","));
        // {"new": k, "duplicate": 0, "jobs": [{"id", "status"}...]}
        let answer = call_json(&api, "POST", &jobs_path, &body).await?;
        let new = answer.get("new").and_then(serde_json::Value::as_u64);
        anyhow::ensure!(
            new == Some(k as u64),
            "POST {jobs_path} of {k} jobs answered {:.300} ({API_NEEDS})",
            answer.to_string()
        );
        left -= k;
    }
    let (enqueue_secs, enqueue_cpu) = (
        te.elapsed().as_secs_f64(),
        server::cpu_micros(process.pid()) - cpu_e,
    );

    let watched =
        server::key_holding(url, &format!("bench:{{{TOPIC}}}:job"), "bench:*", n as u64).await?;
    let mut conn = server::conn(url).await?;
    let (cpu0, redis0, stats0) = (
        server::cpu_micros(process.pid()),
        redis_cpu(),
        server::commandstats(url).await?,
    );
    let t0 = Instant::now();
    call_json(&api, "POST", &format!("{topic_path}/resume"), "").await?;
    let (mut last, mut moved) = (u64::MAX, Instant::now());
    loop {
        let left = match &watched {
            Some((key, command)) => server::count(&mut conn, command, key).await?,
            None => counts(&call_json(&api, "GET", &topic_path, "").await?)?.0,
        };
        if left == 0 {
            break;
        }
        if left != last {
            (last, moved) = (left, Instant::now());
        }
        anyhow::ensure!(
            moved.elapsed() < Duration::from_secs(60),
            "the drain stalled: {left} of {n} jobs left for a minute; {}",
            process.log_tail()
        );
        let pause = if watched.is_some() { 5 } else { 20 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    let (secs, cpu, redis1) = (
        t0.elapsed().as_secs_f64(),
        server::cpu_micros(process.pid()) - cpu0,
        redis_cpu(),
    );
    let stats1 = server::commandstats(url).await?;
    let (left, dead) = counts(&call_json(&api, "GET", &topic_path, "").await?)?;
    anyhow::ensure!(
        left == 0 && dead == 0,
        "after the drain the API counts {left} jobs left and {dead} dead; {}",
        process.log_tail()
    );
    process.stop().await?;
    let per_job = |a: f64, b: f64| (a - b) / n as f64;
    let mut out = serde_json::json!({
        "processed_per_sec": n as f64 / secs,
        "runner_cpu_us_per_job": cpu / n as f64,
        "api_enqueue_per_sec": n as f64 / enqueue_secs,
        "runner_enqueue_cpu_us_per_job": enqueue_cpu / n as f64,
        "commands_per_job": per_job(stats1.0, stats_e.0),
        "scripts_per_job": per_job(stats1.1, stats_e.1),
        "drain_commands_per_job": per_job(stats1.0, stats0.0),
        "drain_watch": watched.map_or("api".to_owned(), |w| w.0),
    });
    if let (Some(e), Some(r0), Some(r1)) = (redis_e, redis0, redis1) {
        out["redis_cpu_us_per_job"] = per_job(r1, e).into();
        out["redis_drain_cpu_us_per_job"] = per_job(r1, r0).into();
    }
    Ok(out)
}

/// One call to a runner's HTTP API; its JSON answer, or an error naming
/// the route, the status and what the harness needs of the API.
async fn call_json(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
) -> anyhow::Result<serde_json::Value> {
    let (status, text) = call(addr, method, path, body)
        .await
        .with_context(|| format!("{method} {path} on {addr}"))?;
    anyhow::ensure!(
        (200..300).contains(&status),
        "{method} {path} answered {status}: {} ({API_NEEDS})",
        text.chars().take(300).collect::<String>()
    );
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{method} {path} answered {status} with no JSON: {:?}",
            text.chars().take(300).collect::<String>()
        )
    })
}

/// One HTTP/1.1 request on a connection of its own: the status and body.
async fn call(addr: &str, method: &str, path: &str, body: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        if method != "GET" {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        anyhow::Ok(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(120), exchange)
        .await
        .context("no answer in 2 minutes")??;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no HTTP answer: {:?}", String::from_utf8_lossy(&raw)))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let rest = &raw[split + 4..];
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status line: {head:?}"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A chunked body's bytes.
fn dechunk(mut rest: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("a chunk without its size line")?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .with_context(|| format!("a chunk size {size_text:?}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        anyhow::ensure!(rest.len() >= size, "a chunk cut short");
        body.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
}
