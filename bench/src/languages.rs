//! Handlers in other languages and live swaps: what a Python or JavaScript
//! no-op job costs next to Rust's, the runner's memory with a Python and a
//! JavaScript topic, how long big components take to compile, and how long
//! a live file replacement takes to serve.

use std::path::Path;
use std::time::{Duration, Instant};

use hourglass::Runner;
use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::{NewJob, Queue};
use hourglass::wasm::Runtime;
use test_support::components::{ECHO, JS_SDK_PROBE, PY_PROBE};

use crate::hourglass::{Background, Project, enqueue_all, jobs, project_with};

/// The no-op handlers compared: (label, component). The probes ack `{}`
/// after parsing it, through their SDK.
pub const NO_OPS: [(&str, &str); 3] = [
    ("rust", ECHO),
    ("python", PY_PROBE),
    ("javascript", JS_SDK_PROBE),
];

/// A project whose one topic, `bench`, is served by `component`, with
/// `extra` lines in the topic (e.g. `reuse = { jobs = 1000 }`).
pub fn project_for(url: &str, component: &str, extra: &str) -> anyhow::Result<Project> {
    let toml = format!(
        "[redis]\nurl = \"{url}\"\nnamespace = \"bench\"\n\n[[topic]]\nname = \"bench\"\nhandler = \"h.wasm\"\n{extra}\n"
    );
    Ok(Project::from_dir(
        project_with(&toml, &[("h.wasm", component)])?,
        url,
    ))
}

/// The resident memory of process `pid`, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The `hourglass` binary built with this harness (scripts/bench builds both).
pub fn hourglass_bin() -> anyhow::Result<std::path::PathBuf> {
    let bin = std::env::current_exe()?.with_file_name("hourglass");
    anyhow::ensure!(
        bin.is_file(),
        "{} is missing: build it with cargo build --release -p hourglass (scripts/bench does)",
        bin.display()
    );
    Ok(bin)
}

/// An `hourglass run` process with a Python and a JavaScript topic (16 at
/// once each): its resident memory idle (handlers loaded, compiled from a
/// warm cache) and at the peak of draining `n` no-op jobs in each.
pub async fn memory(url: &str, n: usize) -> anyhow::Result<serde_json::Value> {
    let toml = format!(
        "[redis]\nurl = \"{url}\"\nnamespace = \"bench\"\n\n[runner]\nconcurrency = 32\n\n\
         [[topic]]\nname = \"py\"\nhandler = \"py.wasm\"\nconcurrency = 16\n\n\
         [[topic]]\nname = \"js\"\nhandler = \"js.wasm\"\nconcurrency = 16\n"
    );
    let dir = project_with(&toml, &[("py.wasm", PY_PROBE), ("js.wasm", JS_SDK_PROBE)])?;
    let config = dir.path().join("queues.toml");
    let bin = hourglass_bin()?;
    // fill the compile cache first, as a deploy with `hourglass build` does
    let checked = std::process::Command::new(&bin)
        .args(["check", "--config"])
        .arg(&config)
        .output()?;
    anyhow::ensure!(checked.status.success(), "check failed: {checked:?}");
    let log = dir.path().join("runner.log");
    let mut child = std::process::Command::new(&bin)
        .args(["run", "--config"])
        .arg(&config)
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let pid = child.id();
    let started = Instant::now();
    while !std::fs::read_to_string(&log)?.contains("hourglass running") {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "the runner did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = rss_mib(pid);
    let q = Queue::connect(url, "bench").await?;
    for topic in ["py", "js"] {
        enqueue_all(&q, &q.keys(topic), &jobs(n, |_| 0, b"{}")).await?;
    }
    let mut peak = idle;
    loop {
        peak = peak.max(rss_mib(pid));
        let mut left = 0;
        for topic in ["py", "js"] {
            let s = q.stats(&q.keys(topic), now_ms()).await?;
            left += s.ready + s.scheduled + s.running;
        }
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(serde_json::json!({
        "rss_idle_mib": idle,
        "rss_load_mib": peak,
    }))
}

/// Compile `component` with an empty compile cache, then load it again
/// from the cache: seconds each.
pub fn compile(component: &str) -> anyhow::Result<serde_json::Value> {
    let cache = tempfile::tempdir()?;
    let dir = cache.path().join("cache");
    let path = Path::new(component);
    let t = Instant::now();
    Runtime::new(1, Some(&dir))?.load(path)?;
    let cold = t.elapsed().as_secs_f64();
    let t = Instant::now();
    Runtime::new(1, Some(&dir))?.load(path)?;
    let warm = t.elapsed().as_secs_f64();
    Ok(serde_json::json!({ "cold_s": cold, "warm_s": warm }))
}

/// `bytes` (a component) with a custom section naming `n` appended: the same
/// handler with another content hash, as a rebuild with a change would be.
fn variant(bytes: &[u8], n: usize) -> Vec<u8> {
    fn leb(mut v: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"hourglass-bench";
    let payload = n.to_le_bytes();
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(&payload);
    let mut out = bytes.to_vec();
    out.push(0); // custom section
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

/// A runner serving `component` under a backlog that never runs dry; the
/// component's file replaced `swaps` times (write a temporary file, rename
/// it over): seconds from each rename to the first attempt started on the
/// new version. With `precompiled`, each version is first compiled into the
/// runner's compile cache, as `hourglass build` does before it places a file.
pub async fn swap(
    url: &str,
    component: &str,
    swaps: usize,
    precompiled: bool,
) -> anyhow::Result<Vec<f64>> {
    let p = project_for(url, component, "")?;
    let file = p.dir().join("handlers/h.wasm");
    let original = std::fs::read(component)?;
    let q = Queue::connect(url, "bench").await?;
    let k = q.keys("bench");
    let runner = Runner::start(p.config()?).await?;
    let mut events = runner.subscribe();
    let bg = Background::start(runner);
    // keep work waiting: top the backlog up whenever it runs low
    let feeder = {
        let (q, k) = (q.clone(), k.clone());
        tokio::spawn(async move {
            loop {
                let ready = q.stats(&k, now_ms()).await.map(|s| s.ready).unwrap_or(0);
                if ready < 20_000 {
                    let more: Vec<NewJob> = jobs(5_000, |_| 0, b"{}");
                    let _ = enqueue_all(&q, &k, &more).await;
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut took = Vec::with_capacity(swaps);
    for n in 0..swaps {
        let bytes = variant(&original, n);
        let hash = hourglass::wasm::content_hash(&bytes);
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, &bytes)?;
        if precompiled {
            let cache = p.dir().join(".hourglass/cache");
            let tmp = tmp.clone();
            tokio::task::spawn_blocking(move || {
                Runtime::new(1, Some(&cache))?.load(&tmp)?;
                anyhow::Ok(())
            })
            .await??;
        }
        while events.try_recv().is_ok() {}
        let t = Instant::now();
        std::fs::rename(&tmp, &file)?;
        loop {
            match tokio::time::timeout(Duration::from_secs(120), events.recv()).await {
                Ok(Ok(e)) => {
                    if let EventKind::Started { handler, .. } = &e.kind
                        && *handler == hash
                    {
                        break;
                    }
                }
                Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(e)) => anyhow::bail!("event stream: {e}"),
                Err(_) => anyhow::bail!("swap {n}: the new version never served"),
            }
        }
        took.push(t.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    feeder.abort();
    bg.stop().await?;
    Ok(took)
}
