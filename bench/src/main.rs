//! The hourglass benchmark harness: hourglass against BullMQ on one
//! redis-server (loopback, no persistence, the same for both), the same
//! workloads, contenders alternating, every workload repeated; ratios are
//! taken pair by pair and the medians printed as one table and written as
//! JSON (after every section, so a failure loses nothing measured before it).
//!
//! Run: `./scripts/bench` (see `--help`). Sections: `throughput`,
//! `process`, `telemetry`, `logs`, `http`, `languages`, `lateness`, `memory`,
//! `instance`, `metrics`, `swap`, `cluster`, `durability`, `fairness`, `batches`,
//! `scaling`.
//! `./scripts/bench --against REV` runs instead the process mode of this
//! build against REV's and BullMQ (`against.rs`).

mod against;
mod args;
mod batches;
mod bullmq;
mod fairness;
mod features;
mod hourglass;
mod languages;
mod process;
mod redis_side;
mod report;
mod runtime;
mod server;
mod sink;
mod throughput;

use std::future::Future;
use std::time::Duration;

use ::hourglass::redis::Endpoint;
use serde_json::Value;
use test_support::RedisServer;

use args::{Args, Sizes};
use report::Report;

/// The allocator the `hourglass` binary uses, so the runner measured here
/// in-process allocates as it does in production.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The run: its server, the hourglass project, and what was measured.
struct Bench {
    args: Args,
    sizes: Sizes,
    redis: RedisServer,
    url: String,
    project: hourglass::Project,
    report: Report,
    about: Value,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let matches = <Args as clap::CommandFactory>::command().get_matches();
    let mut args = <Args as clap::FromArgMatches>::from_arg_matches(&matches)?;
    let given = |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    if args.quick {
        if !given("repeats") {
            args.repeats = 1;
        }
        args.sizes = vec![10_000, 100_000];
    }
    if args.against.is_some() {
        if !given("repeats") && !args.quick {
            args.repeats = 6;
        }
        anyhow::ensure!(
            args.only.is_empty(),
            "--against runs only its own comparison: leave out --only"
        );
    }
    let sizes = if args.quick {
        Sizes {
            throughput: 10_000,
            http: 2_000,
            late: 2_000,
            spread: Duration::from_secs(2),
            memory: 10_000,
            scale: 2_000,
            instance: 2_000,
            languages: 1_000,
            swaps: (5, 1),
        }
    } else {
        Sizes {
            throughput: 100_000,
            http: 20_000,
            late: 20_000,
            spread: Duration::from_secs(10),
            memory: 100_000,
            scale: 50_000,
            instance: 20_000,
            languages: 5_000,
            swaps: (30, 3),
        }
    };
    let sizes = sizes.times(args.scale as usize);
    let redis = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let url = redis.url();
    if !args.skip_bullmq {
        bullmq::install()?;
    }
    if let (Some(rev), Some(bin)) = (&args.against, &args.against_bin) {
        let sha = args.against_sha.clone().unwrap_or_else(|| rev.clone());
        let date = utc_now();
        let json = if given("json") {
            args.json.clone()
        } else {
            against::default_json(&sha, &date)
        };
        return against::Run {
            this: against::Build::this()?,
            other: against::Build::other(rev, &sha, bin.clone())?,
            url: &url,
            redis: &redis,
            jobs: sizes.throughput,
            rounds: args.repeats,
            skip_bullmq: args.skip_bullmq,
            json,
            about: serde_json::json!({
                "date": date,
                "machine": machine(),
                "redis": server::version(&url).await.unwrap_or_default(),
                "quick": args.quick,
                "scale": args.scale,
            }),
        }
        .run()
        .await;
    }
    let project = hourglass::Project::new(&url)?;
    let about = serde_json::json!({
        "date": utc_now(),
        "machine": machine(),
        "redis": server::version(&url).await.unwrap_or_default(),
        "repeats": args.repeats,
        "quick": args.quick,
    });
    let mut b = Bench {
        args,
        sizes,
        redis,
        url,
        project,
        report: Report::default(),
        about,
    };
    if b.wanted("throughput") {
        // one unrecorded round first: a fresh redis-server grows its heap
        // during the first run (it fell on whichever contender ran first,
        // always hourglass: its first pair ran 30% below the others)
        eprintln!("== warm-up (not recorded)");
        b.warm_up().await?;
    }
    for r in 0..b.args.repeats {
        eprintln!("== repeat {}/{}", r + 1, b.args.repeats);
        if b.wanted("throughput") {
            let result = b.throughput(r).await;
            b.done("throughput", result)?;
        }
        if b.wanted("process") {
            let result = b.process(r).await;
            b.done("process", result)?;
        }
        if b.wanted("telemetry") {
            let result = b.telemetry(r).await;
            b.done("telemetry", result)?;
        }
        if b.wanted("logs") {
            let result = b.logs(r).await;
            b.done("logs", result)?;
        }
        if b.wanted("cpu-limit") {
            let result = b.cpu_limit(r).await;
            b.done("cpu-limit", result)?;
        }
        if b.wanted("http") {
            let result = b.http_call().await;
            b.done("http", result)?;
        }
        if b.wanted("languages") {
            let result = b.languages(r).await;
            b.done("languages", result)?;
        }
        if b.wanted("batches") {
            let result = b.batches(r).await;
            b.done("batches", result)?;
        }
        if b.wanted("lateness") {
            let result = b.lateness(r).await;
            b.done("lateness", result)?;
        }
        if b.wanted("memory") {
            let result = b.memory(r).await;
            b.done("memory", result)?;
        }
        if b.wanted("instance") {
            let result = b.instance().await;
            b.done("instance", result)?;
        }
        if b.wanted("metrics") {
            let result = b.metrics().await;
            b.done("metrics", result)?;
        }
    }
    if b.wanted("swap") {
        let result = b.swap().await;
        b.done("swap", result)?;
    }
    if b.wanted("cluster") {
        let result = b.cluster().await;
        b.done("cluster", result)?;
    }
    if b.wanted("durability") {
        let result = b.durability().await;
        b.done("durability", result)?;
    }
    if b.wanted("fairness") {
        let result = b.fairness().await;
        b.done("fairness", result)?;
    }
    if b.wanted("scaling") {
        // prefills up to millions of jobs: once, not per repeat
        for size in b.args.sizes.clone() {
            let result = b.scaling(size).await;
            b.done(&format!("scaling @{size}"), result)?;
        }
    }
    b.report.print(b.args.repeats);
    eprintln!("written to {}", b.args.json.display());
    Ok(())
}

fn j(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

impl Bench {
    fn wanted(&self, section: &str) -> bool {
        self.args.only.is_empty() || self.args.only.iter().any(|o| o == section)
    }

    /// Note a section's failure (the run goes on) and save what is measured so far.
    fn done(&mut self, section: &str, result: anyhow::Result<()>) -> anyhow::Result<()> {
        if let Err(e) = result {
            eprintln!("   {section} FAILED: {e:#}");
            self.report.errors.push(format!("{section}: {e:#}"));
        }
        self.report.save(&self.args.json, self.about.clone())
    }

    /// No-op jobs in Rust, Python and JavaScript against BullMQ's no-op
    /// worker in the same repeat; the runner's memory with a Python and a
    /// JavaScript topic; compiling the big components.
    async fn languages(&mut self, _repeat: usize) -> anyhow::Result<()> {
        let bull_n = self.sizes.throughput / 5;
        let bull = if self.args.skip_bullmq {
            None
        } else {
            server::flush(&self.url).await?;
            eprintln!("   languages / bullmq no-op");
            Some(bullmq::run(
                "throughput",
                self.redis.port,
                serde_json::json!({ "n": bull_n }),
            )?)
        };
        for (label, component) in self.no_ops() {
            let component = component.as_str();
            server::flush(&self.url).await?;
            eprintln!("   languages / {label} no-op");
            let n = if label == "rust" {
                bull_n
            } else {
                self.sizes.languages
            };
            let p = languages::project_for(&self.url, component, "")?;
            let hg = hourglass::throughput(&p, n).await?;
            self.report.record(
                &format!("languages {label} no-op processed_per_sec"),
                "jobs/s",
                j(&hg, "processed_per_sec"),
                bull.as_ref().and_then(|b| j(b, "processed_per_sec")),
            );
            self.report.record(
                &format!("languages {label} no-op runner_cpu_us_per_job"),
                "µs",
                j(&hg, "runner_cpu_us_per_job"),
                None,
            );
            // the same handler with `reuse`: one instance serves many jobs
            server::flush(&self.url).await?;
            eprintln!("   languages / {label} no-op with reuse");
            let p = languages::project_for(&self.url, component, "reuse = { jobs = 1000 }")?;
            let hg = hourglass::throughput(&p, bull_n).await?;
            self.report.record(
                &format!("languages {label} no-op with reuse processed_per_sec"),
                "jobs/s",
                j(&hg, "processed_per_sec"),
                bull.as_ref().and_then(|b| j(b, "processed_per_sec")),
            );
            self.report.record(
                &format!("languages {label} no-op with reuse runner_cpu_us_per_job"),
                "µs",
                j(&hg, "runner_cpu_us_per_job"),
                None,
            );
        }
        if self.args.language.is_some() {
            return Ok(());
        }
        server::flush(&self.url).await?;
        eprintln!("   languages / memory");
        let m = languages::memory(&self.url, self.sizes.languages / 2).await?;
        for (key, name) in [
            (
                "rss_idle_mib",
                "languages runner RSS, a python + a js topic, idle",
            ),
            (
                "rss_load_mib",
                "languages runner RSS, a python + a js topic, 16+16 running",
            ),
        ] {
            self.report.record(name, "MiB", j(&m, key), None);
        }
        for (label, component) in &languages::NO_OPS[1..] {
            eprintln!("   languages / compile {label}");
            let c = languages::compile(component)?;
            self.report.record(
                &format!("languages {label} compile, empty cache"),
                "s",
                j(&c, "cold_s"),
                None,
            );
            self.report.record(
                &format!("languages {label} load from the compile cache"),
                "s",
                j(&c, "warm_s"),
                None,
            );
        }
        Ok(())
    }
}

/// The topic measured beside the scaling topic, and how many jobs it holds.
const SCALING_BESIDE: &str = "scaling-beside";
const SCALING_BASE: usize = 10_000;

/// Run `work`, adding to its JSON result what it cost Redis per job: scripts
/// and commands (those run inside scripts included, from `INFO commandstats`)
/// and the redis-server process's CPU time.
async fn with_commands(
    url: &str,
    pid: Option<u32>,
    jobs: usize,
    work: impl Future<Output = anyhow::Result<Value>>,
) -> anyhow::Result<Value> {
    let before = server::commandstats(url).await?;
    let cpu_before = pid.map(server::cpu_micros);
    let mut result = work.await?;
    let cpu_after = pid.map(server::cpu_micros);
    let after = server::commandstats(url).await?;
    let per_job = |a: f64, b: f64| (a - b) / jobs as f64;
    result["scripts_per_job"] = per_job(after.1, before.1).into();
    result["commands_per_job"] = per_job(after.0, before.0).into();
    if let (Some(a), Some(b)) = (cpu_after, cpu_before) {
        result["redis_cpu_us_per_job"] = per_job(a, b).into();
    }
    Ok(result)
}

/// How many spans an OTLP receiver got.
fn spans_received(receiver: &test_support::http_server::HttpServer) -> usize {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    receiver
        .received()
        .iter()
        .filter(|r| r.path == "/v1/traces")
        .filter_map(|r| ExportTraceServiceRequest::decode(&r.body[..]).ok())
        .flat_map(|e| e.resource_spans)
        .flat_map(|r| r.scope_spans)
        .map(|s| s.spans.len())
        .sum()
}

fn utc_now() -> String {
    let out = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%dT%H:%M:%SZ")
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores, {cpu}")
}
