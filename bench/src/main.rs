//! The hourglass benchmark harness: hourglass against BullMQ on one
//! redis-server (loopback, no persistence, the same for both), the same
//! workloads, contenders alternating, every workload repeated; ratios are
//! taken pair by pair and the medians printed as one table and written as
//! JSON (after every section, so a failure loses nothing measured before it).
//!
//! Run: `./scripts/bench` (see `--help`). Sections: `throughput`,
//! `process`, `telemetry`, `http`, `languages`, `lateness`, `memory`,
//! `instance`, `metrics`, `swap`, `cluster`, `durability`, `fairness`, `batches`,
//! `scaling`.
//! `./scripts/bench --against REV` runs instead the process mode of this
//! build against REV's and BullMQ (`against.rs`).

mod against;
mod batches;
mod bullmq;
mod fairness;
mod hourglass;
mod languages;
mod process;
mod report;
mod server;
mod sink;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use ::hourglass::redis::Endpoint;
use clap::Parser;
use serde_json::Value;
use test_support::RedisServer;

use report::Report;

/// The allocator the `hourglass` binary uses, so the runner measured here
/// in-process allocates as it does in production.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Measure hourglass against BullMQ on this machine.
///
/// With --against REV (given to ./scripts/bench), the cost guard instead:
/// this checkout's `hourglass run` against REV's and BullMQ in the process
/// mode (each build at its defaults with `[http]` on, 100,000 no-op jobs put
/// in through its API's bulk enqueue while the topic is paused, then
/// resumed), 6 rounds in rotating order after one unrecorded; per round
/// and as medians: jobs/s, each build's ratio to BullMQ, the runner's and
/// Redis's CPU per job, this build's ratio to REV's; the CPU model (lscpu).
/// scripts/bench builds REV first in its own git worktree and target
/// directory, cached by commit under `~/.cache/hourglass/against/<sha>/`
/// (cold: 15-40 minutes on 2 cores, niced; then about 5 minutes a run).
/// Writes `bench/results/against-<rev>-<date>.json` (not `latest.json`).
#[derive(Debug, Parser)]
struct Args {
    /// How many times each workload runs per contender (with --against:
    /// rounds, 6 unless given).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Small sizes everywhere: a smoke run in a minute, not numbers to quote
    /// (one repeat unless --repeats is given; with --against, 10,000 jobs).
    #[arg(long)]
    quick: bool,
    /// The cost guard: this build against REV's in the process mode, and
    /// BullMQ (see above); only with ./scripts/bench, which builds REV,
    /// caches it and passes --against-bin. Other sections are not run.
    #[arg(long, value_name = "REV", requires = "against_bin")]
    against: Option<String>,
    /// REV's `hourglass` binary (set by ./scripts/bench --against REV; add
    /// --build-only there to only build it).
    #[arg(long, value_name = "PATH", requires = "against")]
    against_bin: Option<PathBuf>,
    /// The commit REV resolved to (set by ./scripts/bench).
    #[arg(long, value_name = "SHA", requires = "against")]
    against_sha: Option<String>,
    /// Jobs already scheduled for the enqueue/claim scaling workload.
    #[arg(long, value_delimiter = ',', default_value = "10000,1000000,10000000")]
    sizes: Vec<usize>,
    /// Largest scaling size also run on BullMQ (it needs ~800 bytes and ~30 µs per prefilled job).
    #[arg(long, default_value_t = 1_000_000)]
    bullmq_max_size: usize,
    /// Run hourglass only.
    #[arg(long)]
    skip_bullmq: bool,
    /// Run only these sections (throughput, process, telemetry, cpu-limit, http, languages, batches, lateness, memory, instance, metrics, swap, cluster, durability, fairness, scaling).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Where to write the results as JSON (with --against:
    /// `bench/results/against-<rev>-<date>.json` unless given).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/latest.json"))]
    json: PathBuf,
    /// Only this language's no-op in the `languages` and `instance` sections
    /// (the languages section's memory and compile figures, which need both
    /// interpreted languages, are then left out).
    #[arg(long, value_parser = ["rust", "python", "javascript"])]
    language: Option<String>,
    /// With --language: this component instead of the built-in no-op, e.g.
    /// one whose guest functions have names, to profile.
    #[arg(long, requires = "language")]
    component: Option<PathBuf>,
    /// Every workload's job count times this: a longer run to profile (for
    /// `perf record`), not figures to quote.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    scale: u32,
    /// Where the `instance` section keeps compiled handlers between runs (a
    /// 19 MB Python handler then loads in a second instead of compiling
    /// again); none by default.
    #[arg(long)]
    compile_cache: Option<PathBuf>,
}

/// How many jobs each workload uses.
struct Sizes {
    throughput: usize,
    http: usize,
    late: usize,
    spread: Duration,
    memory: usize,
    scale: usize,
    instance: usize,
    /// No-op jobs per language (Python and JavaScript; Rust and BullMQ get `throughput` / 5).
    languages: usize,
    /// Live swaps of a small (Rust) and of a big (Python) component.
    swaps: (usize, usize),
}

impl Sizes {
    /// Every job count times `k` (`--scale`).
    fn times(self, k: usize) -> Sizes {
        Sizes {
            throughput: self.throughput * k,
            http: self.http * k,
            late: self.late * k,
            memory: self.memory * k,
            scale: self.scale * k,
            instance: self.instance * k,
            languages: self.languages * k,
            ..self
        }
    }
}

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

    /// Both contenders on a clean server, in an order that alternates by repeat
    /// so that warm-up effects fall on both.
    async fn pair(
        &self,
        label: &str,
        repeat: usize,
        hg: impl Future<Output = anyhow::Result<Value>>,
        bull: impl Future<Output = anyhow::Result<Value>>,
    ) -> anyhow::Result<(Value, Option<Value>)> {
        let hg_first = repeat.is_multiple_of(2);
        let (mut hg, mut bull) = (Some(hg), Some(bull));
        let (mut hg_out, mut bull_out) = (None, None);
        for turn in 0..2 {
            server::flush(&self.url).await?;
            if (turn == 0) == hg_first {
                eprintln!("   {label} / hourglass");
                hg_out = Some(hg.take().expect("runs once").await?);
            } else if !self.args.skip_bullmq {
                eprintln!("   {label} / bullmq");
                bull_out = Some(bull.take().expect("runs once").await?);
            }
        }
        Ok((hg_out.expect("hourglass ran"), bull_out))
    }

    /// Record `keys` of both results.
    fn both(
        &mut self,
        prefix: &str,
        keys: &[(&str, &'static str)],
        hg: &Value,
        bull: &Option<Value>,
    ) {
        for (key, unit) in keys {
            self.report.record(
                &format!("{prefix} {key}"),
                unit,
                j(hg, key),
                bull.as_ref().and_then(|b| j(b, key)),
            );
        }
    }

    /// The throughput workload of both contenders once, the results dropped.
    async fn warm_up(&self) -> anyhow::Result<()> {
        let n = self.sizes.throughput;
        self.pair(
            "warm-up",
            0,
            hourglass::throughput(&self.project, n),
            async { bullmq::run("throughput", self.redis.port, serde_json::json!({ "n": n })) },
        )
        .await?;
        Ok(())
    }

    async fn throughput(&mut self, repeat: usize) -> anyhow::Result<()> {
        let n = self.sizes.throughput;
        let (hg, bull) = self
            .pair(
                "throughput",
                repeat,
                with_commands(
                    &self.url,
                    self.redis.pid(),
                    n,
                    hourglass::throughput(&self.project, n),
                ),
                with_commands(&self.url, self.redis.pid(), n, async {
                    bullmq::run("throughput", self.redis.port, serde_json::json!({ "n": n }))
                }),
            )
            .await?;
        self.both(
            "throughput",
            &[
                ("enqueue_per_sec", "jobs/s"),
                ("processed_per_sec", "jobs/s"),
                ("scripts_per_job", "calls"),
                ("commands_per_job", "commands"),
                ("redis_cpu_us_per_job", "µs"),
            ],
            &hg,
            &bull,
        );
        self.report.record(
            "throughput runner_cpu_us_per_job",
            "µs",
            j(&hg, "runner_cpu_us_per_job"),
            None,
        );
        Ok(())
    }

    /// The throughput workload with `hourglass run` as a child process (the
    /// binary users run, default settings, `[http]` on) against BullMQ.
    async fn process(&mut self, repeat: usize) -> anyhow::Result<()> {
        let n = self.sizes.throughput;
        let (hg, bull) = self
            .pair(
                "process mode",
                repeat,
                process::throughput(&self.url, n, &process::Setup::default()),
                async { bullmq::run("throughput", self.redis.port, serde_json::json!({ "n": n })) },
            )
            .await?;
        self.both(
            "process mode",
            &[("processed_per_sec", "jobs/s")],
            &hg,
            &bull,
        );
        self.report.record(
            "process mode runner_cpu_us_per_job",
            "µs",
            j(&hg, "runner_cpu_us_per_job"),
            None,
        );
        Ok(())
    }

    /// hourglass alone, in process mode: the no-op workload with spans
    /// exported (every job carrying a producer's `traceparent`, an OTLP
    /// receiver in this process) and without, alternating.
    async fn telemetry(&mut self, repeat: usize) -> anyhow::Result<()> {
        let n = self.sizes.throughput;
        let receiver = test_support::http_server::HttpServer::start(vec![
            test_support::http_server::Reply::status(200, "")
                .with_header("content-type", "application/x-protobuf"),
        ]);
        let on = process::Setup {
            toml: format!("[telemetry]\nendpoint = \"{}\"\n", receiver.url()),
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            ..Default::default()
        };
        let runs = self
            .on_and_off("telemetry", repeat, &process::Setup::default(), &on)
            .await?;
        let get = |label: &str, key: &str| {
            runs.iter()
                .find(|r| r.0 == label)
                .and_then(|r| j(&r.1, key))
        };
        let spans = spans_received(&receiver);
        let r = &mut self.report;
        r.record(
            "telemetry spans_received_per_job",
            "spans",
            Some(spans as f64 / n as f64),
            None,
        );
        r.record(
            "telemetry spans_dropped_per_job",
            "spans",
            get("on", "spans_dropped").map(|d| d / n as f64),
            None,
        );
        Ok(())
    }

    /// hourglass alone, in process mode: the no-op workload on a topic with
    /// a `cpu` limit (checked at every epoch tick) and without, alternating.
    async fn cpu_limit(&mut self, repeat: usize) -> anyhow::Result<()> {
        let on = process::Setup {
            toml: "[defaults]\ncpu = \"500ms\"\n".into(),
            ..Default::default()
        };
        self.on_and_off("cpu limit", repeat, &process::Setup::default(), &on)
            .await?;
        Ok(())
    }

    /// The process-mode no-op workload with `off` and with `on`, in an order
    /// that alternates by repeat; records each one's jobs/s and runner CPU
    /// per job and their ratio as `{name} ...`, and returns both results.
    async fn on_and_off(
        &mut self,
        name: &str,
        repeat: usize,
        off: &process::Setup,
        on: &process::Setup,
    ) -> anyhow::Result<Vec<(&'static str, Value)>> {
        let n = self.sizes.throughput;
        let mut order = [("off", off), ("on", on)];
        if repeat % 2 == 1 {
            order.reverse();
        }
        let mut runs = Vec::new();
        for (label, setup) in order {
            server::flush(&self.url).await?;
            eprintln!("   {name} {label}");
            runs.push((label, process::throughput(&self.url, n, setup).await?));
        }
        let get = |label: &str, key: &str| {
            runs.iter()
                .find(|r| r.0 == label)
                .and_then(|r| j(&r.1, key))
        };
        let r = &mut self.report;
        for label in ["off", "on"] {
            r.record(
                &format!("{name} {label}_per_sec"),
                "jobs/s",
                get(label, "processed_per_sec"),
                None,
            );
            r.record(
                &format!("{name} {label} runner_cpu_us_per_job"),
                "µs",
                get(label, "runner_cpu_us_per_job"),
                None,
            );
        }
        if let (Some(on), Some(off)) = (
            get("on", "processed_per_sec"),
            get("off", "processed_per_sec"),
        ) {
            r.record(
                &format!("{name} ratio_on_to_off"),
                "×",
                Some(on / off),
                None,
            );
        }
        Ok(runs)
    }

    /// hourglass alone: no-op jobs whose handler makes one loopback HTTP call.
    async fn http_call(&mut self) -> anyhow::Result<()> {
        server::flush(&self.url).await?;
        let hg = hourglass::http_call(&self.url, self.sizes.http).await?;
        self.report.record(
            "http processed_per_sec (one loopback GET per job)",
            "jobs/s",
            j(&hg, "processed_per_sec"),
            None,
        );
        self.report.record(
            "http runner_cpu_us_per_job",
            "µs",
            j(&hg, "runner_cpu_us_per_job"),
            None,
        );
        Ok(())
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

    /// Live replacements under load: rename → first attempt on the new version.
    async fn swap(&mut self) -> anyhow::Result<()> {
        let (small, big) = self.sizes.swaps;
        let (echo, python) = (
            test_support::components::ECHO,
            test_support::components::PY_PROBE,
        );
        for (label, component, swaps, precompiled) in [
            ("rust echo (100 KB)", echo, small, false),
            ("python probe (19 MB)", python, big, false),
            (
                "python probe (19 MB), precompiled by hourglass build",
                python,
                big,
                true,
            ),
        ] {
            server::flush(&self.url).await?;
            eprintln!("== swap {label} x{swaps}");
            let took = languages::swap(&self.url, component, swaps, precompiled).await?;
            let worst = took.iter().copied().fold(0.0, f64::max);
            self.report.record(
                &format!("swap {label}: rename to serving, worst of {swaps}"),
                "s",
                Some(worst),
                None,
            );
            for t in took {
                self.report.record(
                    &format!("swap {label}: rename to serving"),
                    "s",
                    Some(t),
                    None,
                );
            }
        }
        Ok(())
    }

    async fn lateness(&mut self, repeat: usize) -> anyhow::Result<()> {
        let (n, spread) = (self.sizes.late, self.sizes.spread);
        let lead = Duration::from_secs(1);
        let args = serde_json::json!({ "n": n, "spread_ms": spread.as_millis() as u64, "lead_ms": lead.as_millis() as u64 });
        let (hg, bull) = self
            .pair(
                "lateness",
                repeat,
                hourglass::lateness(&self.project, n, spread, lead),
                async { bullmq::run("lateness", self.redis.port, args.clone()) },
            )
            .await?;
        self.both(
            "lateness",
            &[
                ("p50_ms", "ms"),
                ("p99_ms", "ms"),
                ("max_ms", "ms"),
                ("early", "jobs"),
            ],
            &hg,
            &bull,
        );
        Ok(())
    }

    async fn memory(&mut self, repeat: usize) -> anyhow::Result<()> {
        let n = self.sizes.memory;
        let (hg, bull) = self
            .pair(
                "memory",
                repeat,
                hourglass::memory(&self.project, n),
                async { bullmq::run("memory", self.redis.port, serde_json::json!({ "n": n })) },
            )
            .await?;
        self.both("memory", &[("bytes_per_job", "bytes")], &hg, &bull);
        Ok(())
    }

    /// The operators' window with 100 topics: a scrape's and the dashboard's latency.
    async fn metrics(&mut self) -> anyhow::Result<()> {
        server::flush(&self.url).await?;
        let samples = if self.args.quick { 3 } else { 10 };
        let hg = hourglass::scrape(&self.url, 100, samples).await?;
        for (key, name) in [
            (
                "scrape_fresh_ms",
                "metrics /metrics scrape reading Redis, 100 topics",
            ),
            (
                "scrape_cached_ms",
                "metrics /metrics scrape from the 1 s cache, 100 topics",
            ),
            ("api_topics_ms", "metrics GET /api/topics, 100 topics"),
        ] {
            self.report.record(name, "ms", j(&hg, key), None);
        }
        Ok(())
    }

    /// Each language's no-op job in a fresh instance after another, then in
    /// one reused instance (`reuse`), no Redis: the host's cost per job.
    async fn instance(&mut self) -> anyhow::Result<()> {
        let cache = self.args.compile_cache.clone();
        for (label, component) in self.no_ops() {
            let n = match label {
                "rust" => self.sizes.instance,
                _ => self.sizes.instance / 20,
            };
            for (reuse, key) in [
                (false, "host fresh_instance_us_per_job"),
                (true, "host reused_instance_us_per_job"),
            ] {
                let key = match (label, reuse) {
                    ("rust", false) => key.to_owned(), // the name of earlier runs
                    _ => format!("{key} {label}"),
                };
                let hg = hourglass::instance(&component, n, reuse, cache.as_deref()).await?;
                self.report.record(&key, "µs", j(&hg, "us_per_job"), None);
            }
        }
        Ok(())
    }

    /// The no-op handler per language (`languages::NO_OPS`), or only the one
    /// --language names (with --component's instead of its own).
    fn no_ops(&self) -> Vec<(&'static str, String)> {
        languages::NO_OPS
            .iter()
            .filter(|(label, _)| self.args.language.as_deref().is_none_or(|l| l == *label))
            .map(|(label, component)| {
                let component = match &self.args.component {
                    Some(path) => path.display().to_string(),
                    None => component.to_string(),
                };
                (*label, component)
            })
            .collect()
    }

    /// Hourglass alone: one server vs a 3-master cluster, 8 topics.
    async fn cluster(&mut self) -> anyhow::Result<()> {
        let cluster = test_support::RedisCluster::start();
        let topics = 8;
        let single = Endpoint::url(&self.url);
        let multi = Endpoint::cluster(cluster.urls());
        for r in 0..self.args.repeats {
            eprintln!("== cluster {}/{}", r + 1, self.args.repeats);
            server::flush(&self.url).await?;
            let one = hourglass::spread(&single, topics, self.sizes.throughput, "").await?;
            let three = hourglass::spread(&multi, topics, self.sizes.throughput, "").await?;
            let r = &mut self.report;
            r.record("cluster one_node_per_sec", "jobs/s", Some(one), None);
            r.record("cluster three_masters_per_sec", "jobs/s", Some(three), None);
            r.record("cluster ratio_three_to_one", "×", Some(three / one), None);
        }
        Ok(())
    }

    /// Hourglass alone, on a primary with one replica: the no-op workload
    /// with `[redis] durability = { replicas = 1 }` and without, alternating.
    async fn durability(&mut self) -> anyhow::Result<()> {
        let primary = test_support::RedisServer::start();
        let port = primary.port.to_string();
        let _replica = test_support::RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let url = primary.url();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while server::info(&url, "replication", "connected_slaves").await? < 1.0 {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the replica did not connect"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let endpoint = Endpoint::url(&url);
        let durable = "durability = { replicas = 1, timeout = \"1s\" }";
        for r in 0..self.args.repeats {
            eprintln!("== durability {}/{}", r + 1, self.args.repeats);
            server::flush(&url).await?;
            let off = hourglass::spread(&endpoint, 1, self.sizes.throughput, "").await?;
            server::flush(&url).await?;
            let on = hourglass::spread(&endpoint, 1, self.sizes.throughput, durable).await?;
            let r = &mut self.report;
            r.record("durability off_per_sec", "jobs/s", Some(off), None);
            r.record("durability on_per_sec", "jobs/s", Some(on), None);
            r.record("durability ratio_on_to_off", "×", Some(on / off), None);
        }
        Ok(())
    }

    /// Enqueue, claim and ack on a topic holding `size` scheduled jobs,
    /// round after round, each beside the same steps on a topic holding
    /// 10,000 in the same Redis (in alternating order): this host's speed
    /// drifts by a third between minutes, so the growth is read as the
    /// ratio of the two within each round; BullMQ once per size.
    async fn scaling(&mut self, size: usize) -> anyhow::Result<()> {
        eprintln!("== scaling with {size} scheduled");
        let n = self.sizes.scale;
        let bull = if self.args.skip_bullmq || size > self.args.bullmq_max_size {
            None
        } else {
            server::flush(&self.url).await?;
            Some(bullmq::run(
                "enqueue",
                self.redis.port,
                serde_json::json!({ "n": n, "prefill": size }),
            )?)
        };
        server::flush(&self.url).await?;
        hourglass::prefill(&self.project, SCALING_BESIDE, SCALING_BASE).await?;
        hourglass::prefill(&self.project, hourglass::TOPIC, size).await?;
        let keys = [
            ("enqueue_us_per_job", "µs"),
            ("claim_us_per_job", "µs"),
            ("ack_us_per_job", "µs"),
        ];
        for round in 0..self.args.repeats {
            let mut order = [hourglass::TOPIC, SCALING_BESIDE];
            if round % 2 == 1 {
                order.reverse();
            }
            let mut measured = Vec::new();
            for topic in order {
                measured.push((
                    topic,
                    hourglass::scaling_round(&self.project, topic, n).await?,
                ));
            }
            let of = |topic: &str, key: &str| {
                measured
                    .iter()
                    .find(|m| m.0 == topic)
                    .and_then(|m| j(&m.1, key))
            };
            for (key, unit) in keys {
                let big = of(hourglass::TOPIC, key);
                self.report.record(
                    &format!("scaling {key} @{size}"),
                    unit,
                    big,
                    bull.as_ref().filter(|_| round == 0).and_then(|b| j(b, key)),
                );
                let ratio = big.zip(of(SCALING_BESIDE, key)).map(|(b, s)| b / s);
                self.report.record(
                    &format!("scaling {key} @{size} to 10k beside it"),
                    "×",
                    ratio,
                    None,
                );
            }
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
