//! `--against REV`, the cost guard: this checkout's `hourglass run` against
//! REV's and BullMQ, in the process mode, in one run. `scripts/bench` builds
//! REV in its own worktree and target directory, cached by commit, and
//! passes the binary (`--against-bin`); the harness does not build.
//!
//! Each hourglass build runs the shipped binary at its defaults with
//! `[http]` on: n no-op jobs put in through its API's bulk enqueue while
//! the topic is paused, then resumed ([`process::throughput_api`]: through
//! the API, so a build with another Redis layout is fed the same way).
//! BullMQ runs its no-op worker as in the throughput section. One round
//! unrecorded first (a fresh redis-server grows its heap in its first
//! run), then rounds, each contender once per round on a flushed server,
//! in an order that changes per round: the six orders of three in turn, so
//! six rounds (the default) put each contender in each place twice and
//! each build before the other three times. Every round is printed and
//! saved as it ends: jobs/s, the ratio of each build to BullMQ, the
//! runner's and Redis's CPU per job, and this build's ratio to REV's;
//! then the medians, and the per-round ratios' medians.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::{bullmq, j, process, server};

mod summary;

pub use summary::{default_json, lscpu};
use summary::{median, medians, print_rows, ratios, thousands, times};

/// A build of hourglass to measure.
#[derive(Debug, Clone)]
pub struct Build {
    /// How tables name it.
    pub label: String,
    pub about: Value,
    pub bin: PathBuf,
}

impl Build {
    /// This checkout's binary (what `scripts/bench` just built), named by
    /// its commit, "+dirty" when the tree it was built from has changes.
    pub fn this() -> anyhow::Result<Build> {
        let bin = crate::languages::hourglass_bin()?;
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .arg("-C")
                .arg(&root)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        };
        let commit = git(&["rev-parse", "HEAD"]).unwrap_or_default();
        let dirty =
            git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        let short = commit.get(..7).unwrap_or("?");
        Ok(Build {
            label: format!("this ({short}{})", if dirty { "+dirty" } else { "" }),
            about: json!({
                "commit": commit,
                "dirty": dirty,
                "binary": bin.display().to_string(),
                "rustc": rustc_in(&root),
            }),
            bin,
        })
    }

    /// REV's binary, built by `scripts/bench` (its folder holds `rustc-version`).
    pub fn other(rev: &str, sha: &str, bin: PathBuf) -> anyhow::Result<Build> {
        anyhow::ensure!(
            bin.is_file(),
            "--against-bin {} is not a file: run ./scripts/bench --against {rev}, which builds it",
            bin.display()
        );
        let rustc = bin
            .parent()
            .and_then(|d| std::fs::read_to_string(d.join("rustc-version")).ok())
            .map(|s| s.trim().to_owned());
        Ok(Build {
            label: sha.get(..7).unwrap_or(rev).to_owned(),
            about: json!({
                "rev": rev,
                "commit": sha,
                "binary": bin.display().to_string(),
                "rustc": rustc,
            }),
            bin,
        })
    }
}

/// `rustc --version` as rustup picks it in `dir`.
fn rustc_in(dir: &Path) -> Option<String> {
    let out = std::process::Command::new("rustc")
        .arg("--version")
        .current_dir(dir)
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The contenders' orders, round after round: 0 this build, 1 REV's, 2 BullMQ.
const ORDERS: [[usize; 3]; 6] = [
    [0, 1, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
    [1, 0, 2],
    [0, 2, 1],
];

/// What one run of the comparison needs.
pub struct Run<'a> {
    pub this: Build,
    pub other: Build,
    pub url: &'a str,
    pub redis: &'a test_support::RedisServer,
    pub jobs: usize,
    pub rounds: usize,
    pub skip_bullmq: bool,
    pub json: PathBuf,
    /// The run's facts (date, machine, Redis version).
    pub about: Value,
}

/// One round's results, in contender order (this, REV, BullMQ).
struct Round {
    order: Vec<usize>,
    results: [Option<Value>; 3],
}

impl Run<'_> {
    pub async fn run(self) -> anyhow::Result<()> {
        let cpu = lscpu();
        let model = cpu
            .get("Model name")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        eprintln!(
            "== against {}: {} against {} and BullMQ, {} rounds of {} no-op jobs, {model}",
            self.other.about["commit"].as_str().unwrap_or("?"),
            self.this.label,
            self.other.label,
            self.rounds,
            thousands(self.jobs as f64),
        );
        eprintln!("== warm-up (not recorded)");
        self.round(&[0, 1, 2])
            .await
            .map_err(|e| e.context("the warm-up round (not recorded)"))?;
        let mut rounds: Vec<Round> = Vec::new();
        let mut error = None;
        for r in 0..self.rounds {
            let order = ORDERS[r % ORDERS.len()].to_vec();
            eprintln!("== round {}/{}", r + 1, self.rounds);
            match self.round(&order).await {
                Ok(results) => {
                    let round = Round { order, results };
                    self.print_round(r, &round);
                    rounds.push(round);
                }
                Err(e) => error = Some(e),
            }
            self.save(&cpu, &rounds, error.as_ref())?;
            if error.is_some() {
                break;
            }
        }
        if !rounds.is_empty() {
            self.print_summary(&model, &rounds);
        }
        eprintln!("written to {}", self.json.display());
        match error {
            Some(e) => Err(e.context(format!("round {}", rounds.len() + 1))),
            None => Ok(()),
        }
    }

    /// Each contender once, in `order`, each on a flushed server.
    async fn round(&self, order: &[usize]) -> anyhow::Result<[Option<Value>; 3]> {
        let mut results = [None, None, None];
        for &who in order {
            server::flush(self.url).await?;
            let result = match who {
                0 | 1 => {
                    let build = if who == 0 { &self.this } else { &self.other };
                    eprintln!("   process mode / {}", build.label);
                    let setup = process::Setup {
                        bin: Some(build.bin.clone()),
                        ..Default::default()
                    };
                    process::throughput_api(self.url, self.redis.pid(), self.jobs, &setup)
                        .await
                        .map_err(|e| {
                            e.context(format!("{} ({})", build.label, build.bin.display()))
                        })?
                }
                _ if self.skip_bullmq => continue,
                _ => {
                    eprintln!("   process mode / bullmq");
                    let n = self.jobs;
                    crate::with_commands(self.url, self.redis.pid(), n, async {
                        bullmq::run("throughput", self.redis.port, json!({ "n": n }))
                    })
                    .await?
                }
            };
            results[who] = Some(result);
        }
        Ok(results)
    }

    fn labels(&self) -> [String; 3] {
        [
            self.this.label.clone(),
            self.other.label.clone(),
            "BullMQ".to_owned(),
        ]
    }

    fn print_round(&self, r: usize, round: &Round) {
        let labels = self.labels();
        let order: Vec<&str> = round
            .order
            .iter()
            .filter(|&&w| w != 2 || !self.skip_bullmq)
            .map(|&w| labels[w].as_str())
            .collect();
        println!(
            "round {}/{} (in this order: {})",
            r + 1,
            self.rounds,
            order.join(", ")
        );
        print_rows(&labels, |who, key| {
            round.results[who].as_ref().and_then(|v| j(v, key))
        });
        let ratios = ratios(round);
        let ratio = |key: &str| ratios.get(key).and_then(Value::as_f64);
        println!(
            "  {} / {}: jobs/s {}, runner CPU per job {}, Redis CPU per job {}",
            labels[0],
            labels[1],
            times(ratio("this_to_against_processed_per_sec")),
            times(ratio("this_to_against_runner_cpu_us_per_job")),
            times(ratio("this_to_against_redis_cpu_us_per_job")),
        );
    }

    fn print_summary(&self, model: &str, rounds: &[Round]) {
        let labels = self.labels();
        println!(
            "\nmedians of {} rounds of {} no-op jobs, process mode, {model}",
            rounds.len(),
            thousands(self.jobs as f64)
        );
        print_rows(&labels, |who, key| medians(rounds, who, key));
        let all: Vec<Value> = rounds.iter().map(|r| Value::Object(ratios(r))).collect();
        let this_to_bull = format!("{} to BullMQ", labels[0]);
        let other_to_bull = format!("{} to BullMQ", labels[1]);
        for (key, what) in [
            ("this_to_against_processed_per_sec", "jobs/s"),
            (
                "this_to_against_runner_cpu_us_per_job",
                "runner CPU per job",
            ),
            ("this_to_against_redis_cpu_us_per_job", "Redis CPU per job"),
            ("this_to_bullmq", this_to_bull.as_str()),
            ("against_to_bullmq", other_to_bull.as_str()),
        ] {
            let per: Vec<f64> = all.iter().filter_map(|r| j(r, key)).collect();
            if per.is_empty() {
                continue;
            }
            let list: Vec<String> = per.iter().map(|v| format!("{v:.3}")).collect();
            let name = if key.starts_with("this_to_against") {
                format!("{} / {} {what}", labels[0], labels[1])
            } else {
                what.to_owned()
            };
            println!(
                "{name}, per round: {} (median {})",
                list.join(" "),
                times(median(&per))
            );
        }
    }

    /// Everything so far to the JSON file.
    fn save(
        &self,
        cpu: &Value,
        rounds: &[Round],
        error: Option<&anyhow::Error>,
    ) -> anyhow::Result<()> {
        let labels = self.labels();
        let per_round: Vec<Value> = rounds
            .iter()
            .enumerate()
            .map(|(r, round)| {
                let mut v = json!({
                    "round": r + 1,
                    "order": round.order.iter()
                        .filter(|&&w| w != 2 || !self.skip_bullmq)
                        .map(|&w| labels[w].clone()).collect::<Vec<_>>(),
                    "this": round.results[0],
                    "against": round.results[1],
                    "bullmq": round.results[2],
                });
                v["ratios"] = Value::Object(ratios(round));
                v
            })
            .collect();
        let keys = [
            "processed_per_sec",
            "runner_cpu_us_per_job",
            "redis_cpu_us_per_job",
            "redis_drain_cpu_us_per_job",
            "commands_per_job",
            "scripts_per_job",
            "runner_enqueue_cpu_us_per_job",
            "api_enqueue_per_sec",
        ];
        let of = |who: usize| {
            let mut m = serde_json::Map::new();
            for key in keys {
                if let Some(v) = medians(rounds, who, key) {
                    m.insert(key.to_owned(), v.into());
                }
            }
            Value::Object(m)
        };
        let all: Vec<Value> = rounds.iter().map(|r| Value::Object(ratios(r))).collect();
        let mut ratio_medians = serde_json::Map::new();
        if let Some(first) = all.first().and_then(Value::as_object) {
            for key in first.keys() {
                let per: Vec<f64> = all.iter().filter_map(|r| j(r, key)).collect();
                if let Some(m) = median(&per) {
                    ratio_medians.insert(key.clone(), m.into());
                }
            }
        }
        let mut out = self.about.clone();
        out["kind"] = "against".into();
        out["method"] = "process mode: the shipped `hourglass run` at its defaults with [http] on, \
            the no-op component; n jobs put in through the API's bulk enqueue (10,000 a call) while \
            the topic is paused, then resumed; jobs/s and the runner's CPU over the drain; Redis's \
            CPU from the first enqueue to the drain's end. BullMQ: its no-op worker (concurrency 50), \
            jobs added in bulk, Redis's CPU over its whole run. One unrecorded round first; the \
            contenders' order changes per round; ratios are taken within each round"
            .into();
        out["jobs"] = self.jobs.into();
        out["rounds_planned"] = self.rounds.into();
        out["lscpu"] = cpu.clone();
        out["this"] = self.this.about.clone();
        out["this"]["label"] = labels[0].clone().into();
        out["against"] = self.other.about.clone();
        out["against"]["label"] = labels[1].clone().into();
        out["rounds"] = per_round.into();
        out["medians"] = json!({
            "this": of(0),
            "against": of(1),
            "bullmq": of(2),
            "ratios": ratio_medians,
        });
        out["errors"] = json!(
            error
                .map(|e| format!("{e:#}"))
                .into_iter()
                .collect::<Vec<_>>()
        );
        if let Some(dir) = self.json.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&self.json, serde_json::to_string_pretty(&out)?)?;
        Ok(())
    }
}
