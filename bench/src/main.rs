//! The hourglass benchmark harness: hourglass against BullMQ on one
//! redis-server (loopback, no persistence, the same for both), the same
//! workloads, contenders alternating, every workload repeated; ratios are
//! taken pair by pair and the medians printed as one table and written as JSON.
//!
//! Run: `cargo run --release -p hourglass-bench` (see `--help`).

mod bullmq;
mod hourglass;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ::hourglass::redis::Endpoint;
use clap::Parser;
use test_support::RedisServer;

/// Measure hourglass against BullMQ on this machine.
#[derive(Debug, Parser)]
struct Args {
    /// How many times each workload runs per contender.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Small sizes everywhere: a smoke run in a minute, not numbers to quote.
    #[arg(long)]
    quick: bool,
    /// Jobs already scheduled for the enqueue/claim scaling workload.
    #[arg(long, value_delimiter = ',', default_value = "10000,1000000,10000000")]
    sizes: Vec<usize>,
    /// Largest scaling size also run on BullMQ (it needs ~800 bytes and ~30 µs per prefilled job).
    #[arg(long, default_value_t = 1_000_000)]
    bullmq_max_size: usize,
    /// Run hourglass only.
    #[arg(long)]
    skip_bullmq: bool,
    /// Run only these workloads (throughput, lateness, memory, instance, cluster, scaling).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Where to write the results as JSON.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/latest.json"))]
    json: PathBuf,
}

/// One metric across repeats.
#[derive(Debug, Default, serde::Serialize)]
struct Row {
    unit: &'static str,
    hourglass: Vec<f64>,
    bullmq: Vec<f64>,
}

type Rows = BTreeMap<String, Row>;

fn record(rows: &mut Rows, key: &str, unit: &'static str, hg: Option<f64>, bull: Option<f64>) {
    let row = rows.entry(key.to_owned()).or_insert_with(|| Row {
        unit,
        ..Row::default()
    });
    row.hourglass.extend(hg);
    row.bullmq.extend(bull);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.quick {
        args.repeats = 1;
        args.sizes = vec![10_000, 100_000];
    }
    let (n_throughput, n_late, spread, n_mem, n_scale, n_instance) = if args.quick {
        (10_000, 2_000, Duration::from_secs(2), 10_000, 2_000, 2_000)
    } else {
        (
            100_000,
            20_000,
            Duration::from_secs(10),
            100_000,
            10_000,
            20_000,
        )
    };
    let redis = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let url = redis.url();
    if !args.skip_bullmq {
        bullmq::install()?;
    }
    let project = hourglass::Project::new(&url)?;
    let mut rows = Rows::new();
    let j = |v: &serde_json::Value, k: &str| v.get(k).and_then(serde_json::Value::as_f64);

    for r in 0..args.repeats {
        eprintln!("== repeat {}/{}", r + 1, args.repeats);
        // alternate who goes first so warm-up effects fall on both
        let hg_first = r % 2 == 0;
        macro_rules! pair {
            ($label:literal, $hg:expr, $bull:expr) => {{
                let mut hg = None;
                let mut bull = None;
                for turn in 0..2 {
                    flush(&url).await?;
                    if (turn == 0) == hg_first {
                        eprintln!("   {} / hourglass", $label);
                        hg = Some($hg);
                    } else if !args.skip_bullmq {
                        eprintln!("   {} / bullmq", $label);
                        bull = Some($bull);
                    }
                }
                (hg.expect("hourglass ran"), bull)
            }};
        }
        let wanted = |w: &str| args.only.is_empty() || args.only.iter().any(|o| o == w);
        if wanted("throughput") {
            let (hg, bull) = pair!(
                "throughput",
                with_commands(
                    &url,
                    n_throughput,
                    hourglass::throughput(&project, n_throughput)
                )
                .await?,
                with_commands(&url, n_throughput, async {
                    bullmq::run(
                        "throughput",
                        redis.port,
                        serde_json::json!({ "n": n_throughput }),
                    )
                })
                .await?
            );
            for (key, unit) in [
                ("enqueue_per_sec", "jobs/s"),
                ("processed_per_sec", "jobs/s"),
                ("scripts_per_job", "calls"),
                ("commands_per_job", "commands"),
            ] {
                record(
                    &mut rows,
                    &format!("throughput {key}"),
                    unit,
                    j(&hg, key),
                    bull.as_ref().and_then(|b| j(b, key)),
                );
            }
            record(
                &mut rows,
                "throughput runner_cpu_us_per_job",
                "µs",
                j(&hg, "runner_cpu_us_per_job"),
                None,
            );

            let late_args = serde_json::json!({ "n": n_late, "spread_ms": spread.as_millis() as u64, "lead_ms": 1000 });
            let (hg, bull) = pair!(
                "lateness",
                hourglass::lateness(&project, n_late, spread, Duration::from_secs(1)).await?,
                bullmq::run("lateness", redis.port, late_args.clone())?
            );
            for key in ["p50_ms", "p99_ms", "max_ms", "early"] {
                let unit = if key == "early" { "jobs" } else { "ms" };
                record(
                    &mut rows,
                    &format!("lateness {key}"),
                    unit,
                    j(&hg, key),
                    bull.as_ref().and_then(|b| j(b, key)),
                );
            }
        }
        if wanted("memory") {
            let (hg, bull) = pair!(
                "memory",
                hourglass::memory(&project, n_mem).await?,
                bullmq::run("memory", redis.port, serde_json::json!({ "n": n_mem }))?
            );
            record(
                &mut rows,
                "memory bytes_per_job",
                "bytes",
                j(&hg, "bytes_per_job"),
                bull.as_ref().and_then(|b| j(b, "bytes_per_job")),
            );
        }
        if wanted("instance") {
            let hg = hourglass::instance(n_instance).await?;
            record(
                &mut rows,
                "host fresh_instance_us_per_job",
                "µs",
                j(&hg, "fresh_instance_us_per_job"),
                None,
            );
        }
    }

    // hourglass alone: one server vs a 3-master cluster, several topics
    if args.only.is_empty() || args.only.iter().any(|o| o == "cluster") {
        let cluster = test_support::RedisCluster::start();
        let topics = 8;
        for r in 0..args.repeats {
            eprintln!("== cluster {}/{}", r + 1, args.repeats);
            flush(&url).await?;
            let single = Endpoint {
                urls: vec![url.clone()],
                cluster: false,
                tls: None,
            };
            let multi = Endpoint {
                urls: cluster.urls(),
                cluster: true,
                tls: None,
            };
            let one = hourglass::spread(&single, topics, n_throughput).await?;
            let three = hourglass::spread(&multi, topics, n_throughput).await?;
            record(
                &mut rows,
                "cluster one_node_per_sec",
                "jobs/s",
                Some(one),
                None,
            );
            record(
                &mut rows,
                "cluster three_masters_per_sec",
                "jobs/s",
                Some(three),
                None,
            );
            record(
                &mut rows,
                "cluster ratio_three_to_one",
                "×",
                Some(three / one),
                None,
            );
        }
    }

    // scaling prefills up to millions of jobs: once, not per repeat
    let sizes = if args.only.is_empty() || args.only.iter().any(|o| o == "scaling") {
        args.sizes.clone()
    } else {
        vec![]
    };
    for &size in &sizes {
        eprintln!("== scaling with {size} scheduled");
        flush(&url).await?;
        let hg = hourglass::scaling(&project, size, n_scale).await?;
        let bull = if args.skip_bullmq || size > args.bullmq_max_size {
            None
        } else {
            flush(&url).await?;
            Some(bullmq::run(
                "enqueue",
                redis.port,
                serde_json::json!({ "n": n_scale, "prefill": size }),
            )?)
        };
        for key in ["enqueue_us_per_job", "claim_us_per_job", "ack_us_per_job"] {
            let b = bull.as_ref().and_then(|b| j(b, key));
            record(
                &mut rows,
                &format!("scaling {key} @{size}"),
                "µs",
                j(&hg, key),
                b,
            );
        }
    }

    print_table(&rows, &args);
    let out = serde_json::json!({
        "date": jiff_now(),
        "machine": machine(),
        "redis": redis_version(&url).await.unwrap_or_default(),
        "repeats": args.repeats,
        "quick": args.quick,
        "rows": rows,
    });
    if let Some(dir) = args.json.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.json, serde_json::to_string_pretty(&out)?)?;
    eprintln!("written to {}", args.json.display());
    Ok(())
}

fn print_table(rows: &Rows, args: &Args) {
    println!(
        "{:<44} {:>12} {:>12} {:>10}   (median of {} repeats; ratio = hourglass / BullMQ, pair by pair)",
        "metric", "hourglass", "BullMQ", "ratio", args.repeats
    );
    for (key, row) in rows {
        let hg = median(&row.hourglass);
        let bull = median(&row.bullmq);
        let ratios: Vec<f64> = row
            .hourglass
            .iter()
            .zip(&row.bullmq)
            .filter(|(_, b)| **b != 0.0)
            .map(|(h, b)| h / b)
            .collect();
        let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        let ratio = median(&ratios).map_or("-".to_owned(), |r| format!("{r:.2}×"));
        println!(
            "{:<44} {:>12} {:>12} {:>10}",
            format!("{key} ({})", row.unit),
            show(hg),
            show(bull),
            ratio
        );
    }
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(percentile(&s, 50.0))
}

/// The `p`th percentile of sorted `v` (nearest rank).
pub(crate) fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * v.len() as f64).floor() as usize;
    v[i.min(v.len() - 1)]
}

/// Run `work`, adding to its JSON result the Redis scripts and commands (all
/// of them, those run inside scripts included) per job, from `INFO commandstats`.
async fn with_commands(
    url: &str,
    jobs: usize,
    work: impl std::future::Future<Output = anyhow::Result<serde_json::Value>>,
) -> anyhow::Result<serde_json::Value> {
    let before = commandstats(url).await?;
    let mut result = work.await?;
    let after = commandstats(url).await?;
    let per_job = |a: f64, b: f64| (a - b) / jobs as f64;
    result["scripts_per_job"] = per_job(after.1, before.1).into();
    result["commands_per_job"] = per_job(after.0, before.0).into();
    Ok(result)
}

/// (all calls, script calls) so far, from `INFO commandstats`.
async fn commandstats(url: &str) -> anyhow::Result<(f64, f64)> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await?;
    let (mut all, mut scripts) = (0.0, 0.0);
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let calls: f64 = rest
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        all += calls;
        if matches!(
            name,
            "evalsha" | "eval" | "evalsha_ro" | "eval_ro" | "fcall"
        ) {
            scripts += calls;
        }
    }
    Ok((all, scripts))
}

/// A numeric field of `INFO section`.
pub(crate) async fn redis_info(url: &str, section: &str, field: &str) -> anyhow::Result<f64> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("INFO {section} has no {field}"))
}

async fn flush(url: &str) -> anyhow::Result<()> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await?;
    Ok(())
}

async fn redis_version(url: &str) -> anyhow::Result<String> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned())
}

fn jiff_now() -> String {
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
