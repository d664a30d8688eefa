//! The harness's command line, and the job counts each workload uses.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

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
pub(crate) struct Args {
    /// How many times each workload runs per contender (with --against:
    /// rounds, 6 unless given).
    #[arg(long, default_value_t = 5)]
    pub(crate) repeats: usize,
    /// Small sizes everywhere: a smoke run in a minute, not numbers to quote
    /// (one repeat unless --repeats is given; with --against, 10,000 jobs).
    #[arg(long)]
    pub(crate) quick: bool,
    /// The cost guard: this build against REV's in the process mode, and
    /// BullMQ (see above); only with ./scripts/bench, which builds REV,
    /// caches it and passes --against-bin. Other sections are not run.
    #[arg(long, value_name = "REV", requires = "against_bin")]
    pub(crate) against: Option<String>,
    /// REV's `hourglass` binary (set by ./scripts/bench --against REV; add
    /// --build-only there to only build it).
    #[arg(long, value_name = "PATH", requires = "against")]
    pub(crate) against_bin: Option<PathBuf>,
    /// The commit REV resolved to (set by ./scripts/bench).
    #[arg(long, value_name = "SHA", requires = "against")]
    pub(crate) against_sha: Option<String>,
    /// Jobs already scheduled for the enqueue/claim scaling workload.
    #[arg(long, value_delimiter = ',', default_value = "10000,1000000,10000000")]
    pub(crate) sizes: Vec<usize>,
    /// Largest scaling size also run on BullMQ (it needs ~800 bytes and ~30 µs per prefilled job).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) bullmq_max_size: usize,
    /// Run hourglass only.
    #[arg(long)]
    pub(crate) skip_bullmq: bool,
    /// Run only these sections (throughput, process, telemetry, logs, cpu-limit, http, languages, batches, lateness, memory, instance, metrics, swap, cluster, durability, fairness, scaling).
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<String>,
    /// Where to write the results as JSON (with --against:
    /// `bench/results/against-<rev>-<date>.json` unless given).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/latest.json"))]
    pub(crate) json: PathBuf,
    /// Only this language's no-op in the `languages` and `instance` sections
    /// (the languages section's memory and compile figures, which need both
    /// interpreted languages, are then left out).
    #[arg(long, value_parser = ["rust", "python", "javascript"])]
    pub(crate) language: Option<String>,
    /// With --language: this component instead of the built-in no-op, e.g.
    /// one whose guest functions have names, to profile.
    #[arg(long, requires = "language")]
    pub(crate) component: Option<PathBuf>,
    /// Every workload's job count times this: a longer run to profile (for
    /// `perf record`), not figures to quote.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) scale: u32,
    /// Where the `instance` section keeps compiled handlers between runs (a
    /// 19 MB Python handler then loads in a second instead of compiling
    /// again); none by default.
    #[arg(long)]
    pub(crate) compile_cache: Option<PathBuf>,
}

/// How many jobs each workload uses.
pub(crate) struct Sizes {
    pub(crate) throughput: usize,
    pub(crate) http: usize,
    pub(crate) late: usize,
    pub(crate) spread: Duration,
    pub(crate) memory: usize,
    pub(crate) scale: usize,
    pub(crate) instance: usize,
    /// No-op jobs per language (Python and JavaScript; Rust and BullMQ get `throughput` / 5).
    pub(crate) languages: usize,
    /// Live swaps of a small (Rust) and of a big (Python) component.
    pub(crate) swaps: (usize, usize),
}

impl Sizes {
    /// Every job count times `k` (`--scale`).
    pub(crate) fn times(self, k: usize) -> Sizes {
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
