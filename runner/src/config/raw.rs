//! The file as written: every section `deny_unknown_fields`, every field
//! optional where a default exists. [`super::Config::parse`] resolves it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::topic::{BatchPolicy, DEFAULT_JOURNAL_MAX, JournalPolicy, OnDivergence};
use super::units::{
    DEFAULT_MEMORY, DEFAULT_PAYLOAD, Dur, Factor, Fraction, NonZeroDur, PerPeriod, Positive, Share,
    Size,
};
use super::{
    Backoff, DeadLetter, Grants, HttpLimits, Journaled, Rate, Results, Reuse, RolloutPolicy,
    RunnerConfig, TopicConfig,
};
use hourglass_client::{Fairness, RateLimit, Share as KeyShare};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    #[serde(default)]
    pub redis: super::store::RawRedis,
    #[serde(default)]
    pub runner: Runner,
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(default, rename = "topic")]
    pub topics: Vec<RawTopic>,
    pub http: Option<Spanned<Http>>,
    #[serde(default, rename = "schedule")]
    pub schedules: Vec<super::schedule::RawSchedule>,
    pub telemetry: Option<Spanned<super::telemetry::RawTelemetry>>,
}

/// `[http]`: the API, dashboard and metrics server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Http {
    pub listen: Spanned<String>,
    pub token: Option<Spanned<String>>,
    pub read_token: Option<Spanned<String>>,
    #[serde(default)]
    pub public_read: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Runner {
    pub handlers_dir: Option<PathBuf>,
    pub concurrency: Option<Positive>,
    pub shutdown_grace: Option<Dur>,
    pub lease_margin: Option<Dur>,
    pub compile_cache: Option<CacheSetting>,
    pub max_payload: Option<Spanned<Size>>,
    pub keep_versions: Option<Positive>,
    pub versions_dir: Option<PathBuf>,
    pub light_cpu: Option<Dur>,
}

/// `compile_cache = false`, or the folder.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum CacheSetting {
    Enabled(bool),
    Dir(PathBuf),
}

/// `grants = { env = [...], dirs = [...], http = [...] }` of one topic.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGrants {
    pub env: Option<Vec<Spanned<String>>>,
    pub dirs: Option<Vec<Spanned<RawDir>>>,
    pub http: Option<Vec<Spanned<String>>>,
}

/// `http = { connect_timeout, first_byte_timeout, max_response, max_concurrent, tls_ca }`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub connect_timeout: Option<NonZeroDur>,
    pub first_byte_timeout: Option<NonZeroDur>,
    pub max_response: Option<Size>,
    pub max_concurrent: Option<Positive>,
    pub tls_ca: Option<PathBuf>,
}

/// One granted directory.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDir {
    pub host: PathBuf,
    pub guest: String,
    #[serde(default)]
    pub write: bool,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackoff {
    pub base: Option<Dur>,
    pub factor: Option<Factor>,
    pub max: Option<Dur>,
    pub jitter: Option<Fraction>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDeadLetter {
    pub keep: Option<u64>,
    pub max_age: Option<Dur>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Defaults {
    pub max_attempts: Option<Positive>,
    pub timeout: Option<NonZeroDur>,
    pub cpu: Option<NonZeroDur>,
    pub backoff: Option<Spanned<RawBackoff>>,
    pub memory: Option<Spanned<Size>>,
    pub dead_letter: Option<RawDeadLetter>,
    pub priority: Option<i64>,
    pub concurrency: Option<Positive>,
    pub http: Option<Spanned<RawHttp>>,
    pub rollout: Option<RawRollout>,
    pub results: Option<RawResults>,
    pub reuse: Option<RawReuse>,
    pub journal: Option<Spanned<JournalKind>>,
    pub journal_max: Option<Spanned<Size>>,
    pub on_divergence: Option<OnDivergence>,
    pub expire_after: Option<NonZeroDur>,
    pub on_expire: Option<RawOnExpire>,
    pub logs: Option<super::logs::RawLogs>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTopic {
    pub name: Spanned<String>,
    pub handler: Spanned<PathBuf>,
    pub priority: Option<i64>,
    pub concurrency: Option<Positive>,
    pub max_attempts: Option<Positive>,
    pub timeout: Option<NonZeroDur>,
    pub cpu: Option<NonZeroDur>,
    pub backoff: Option<Spanned<RawBackoff>>,
    pub memory: Option<Spanned<Size>>,
    pub dead_letter: Option<RawDeadLetter>,
    pub may_enqueue: Option<Vec<Spanned<String>>>,
    pub grants: Option<RawGrants>,
    pub http: Option<Spanned<RawHttp>>,
    pub weight: Option<Positive>,
    pub rate: Option<RawRate>,
    pub fairness: Option<RawFairness>,
    pub key_concurrency: Option<Positive>,
    pub key_rate: Option<PerPeriod>,
    pub rollout: Option<RawRollout>,
    pub results: Option<RawResults>,
    pub reuse: Option<RawReuse>,
    pub journal: Option<Spanned<JournalKind>>,
    pub journal_max: Option<Spanned<Size>>,
    pub on_divergence: Option<OnDivergence>,
    pub expire_after: Option<NonZeroDur>,
    pub on_expire: Option<RawOnExpire>,
    pub batch: Option<Spanned<RawBatch>>,
    pub logs: Option<super::logs::RawLogs>,
}

/// `batch = { max = 100, wait = "50ms" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBatch {
    pub max: Positive,
    pub wait: Option<Dur>,
    pub key: Option<bool>,
}

/// `on_expire = "dead" | "drop"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RawOnExpire {
    Dead,
    Drop,
}

/// `journal = "steps" | "effects"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum JournalKind {
    Steps,
    Effects,
}

/// `reuse = { jobs = 1000, idle = "60s" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReuse {
    pub jobs: Option<Positive>,
    pub idle: Option<NonZeroDur>,
}

/// `results = { keep = "24h", max = "64KiB" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawResults {
    pub keep: Option<NonZeroDur>,
    pub max: Option<Spanned<Size>>,
}

/// `rollout = { canary = "10%", for = "5m", min_attempts = 50, max_failure_rate = 0.2, margin = 0.05, journaled = "replay" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRollout {
    pub canary: Share,
    #[serde(rename = "for")]
    pub window: Option<NonZeroDur>,
    pub min_attempts: Option<Positive>,
    pub max_failure_rate: Option<Fraction>,
    pub margin: Option<Fraction>,
    pub journaled: Option<Journaled>,
}

/// `fairness = { by = "key", share = "jobs" | "cpu" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFairness {
    pub by: FairBy,
    pub share: Option<FairShare>,
}

/// What keys take turns: the job's tenant key (the only choice so far).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum FairBy {
    Key,
}

/// `share = "jobs" | "cpu"`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum FairShare {
    Jobs,
    Cpu,
}

/// `rate = { limit = 100, per = "1s", burst = 10 }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRate {
    pub limit: Positive,
    pub per: NonZeroDur,
    #[serde(default)]
    pub burst: u32,
}

/// `[runner] light_cpu` unless set: cheaper than Redis's own work per job
/// (a claim and an ack, about 17 µs on the 2-core machines measured), so
/// one thread that claims, runs and commits keeps up with Redis, and such a
/// job on a second thread costs more in moving between threads than it
/// gains (docs: Performance, "Threads").
const LIGHT_CPU: Duration = Duration::from_micros(50);

impl Runner {
    pub fn resolve(self, base: &Path) -> RunnerConfig {
        RunnerConfig {
            handlers_dir: base.join(self.handlers_dir.unwrap_or_else(|| "handlers".into())),
            concurrency: self.concurrency.map_or(64, |c| c.0),
            shutdown_grace: self.shutdown_grace.map_or(Duration::from_secs(30), |d| d.0),
            lease_margin: self.lease_margin.map_or(Duration::from_secs(5), |d| d.0),
            compile_cache: match self.compile_cache {
                None | Some(CacheSetting::Enabled(true)) => Some(base.join(".hourglass/cache")),
                Some(CacheSetting::Enabled(false)) => None,
                Some(CacheSetting::Dir(dir)) => Some(base.join(dir)),
            },
            max_payload: self
                .max_payload
                .map_or(DEFAULT_PAYLOAD, |s| s.into_inner().0),
            keep_versions: self.keep_versions.map_or(5, |k| k.0),
            versions_dir: base.join(
                self.versions_dir
                    .unwrap_or_else(|| ".hourglass/versions".into()),
            ),
            light_cpu: self.light_cpu.map_or(LIGHT_CPU, |d| d.0),
        }
    }
}

impl RawTopic {
    pub fn resolve(&self, defaults: &Defaults, runner: &RunnerConfig) -> TopicConfig {
        let backoff = self
            .backoff
            .as_ref()
            .or(defaults.backoff.as_ref())
            .map(|b| b.get_ref().clone())
            .unwrap_or_default();
        let dead = self
            .dead_letter
            .clone()
            .or(defaults.dead_letter.clone())
            .unwrap_or_default();
        TopicConfig {
            name: self.name.get_ref().clone(),
            handler: runner.handlers_dir.join(self.handler.get_ref()),
            priority: self.priority.or(defaults.priority).unwrap_or(0),
            // a topic never gets more than the whole runner
            concurrency: self
                .concurrency
                .or(defaults.concurrency)
                .map_or(runner.concurrency, |c| c.0)
                .min(runner.concurrency),
            timeout: self
                .timeout
                .or(defaults.timeout)
                .map_or(Duration::from_secs(30), |d| d.0),
            cpu: self.cpu.or(defaults.cpu).map(|d| d.0),
            max_attempts: self
                .max_attempts
                .or(defaults.max_attempts)
                .map_or(5, |m| m.0),
            backoff: Backoff {
                base: backoff.base.map_or(Duration::from_secs(1), |d| d.0),
                factor: backoff.factor.map_or(2.0, |f| f.0),
                max: backoff.max.map_or(Duration::from_secs(3600), |d| d.0),
                jitter: backoff.jitter.map_or(0.2, |j| j.0),
            },
            memory: self
                .memory
                .as_ref()
                .or(defaults.memory.as_ref())
                .map_or(DEFAULT_MEMORY, |s| s.get_ref().0),
            dead_letter: DeadLetter {
                keep: dead.keep.unwrap_or(10_000),
                max_age: dead
                    .max_age
                    .map_or(Duration::from_secs(14 * 86_400), |d| d.0),
            },
            may_enqueue: self
                .may_enqueue
                .iter()
                .flatten()
                .map(|t| t.get_ref().clone())
                .collect(),
            grants: Grants::default(),
            http: HttpLimits::default(),
            weight: self.weight.map(|w| w.0),
            rate: self.rate.as_ref().map(|r| Rate {
                limit: r.limit.0,
                per: r.per.0,
                burst: r.burst,
            }),
            fairness: (self.fairness.is_some()
                || self.key_concurrency.is_some()
                || self.key_rate.is_some())
            .then(|| {
                let share = self.fairness.as_ref().and_then(|f| {
                    let FairBy::Key = f.by;
                    f.share
                });
                Fairness {
                    share: match share {
                        Some(FairShare::Cpu) => KeyShare::Cpu,
                        Some(FairShare::Jobs) | None => KeyShare::Jobs,
                    },
                    key_concurrency: self.key_concurrency.map_or(0, |c| c.0),
                    key_rate: self.key_rate.map(|r| RateLimit {
                        interval_ms: r.1.as_secs_f64() * 1000.0 / f64::from(r.0),
                        burst: 0,
                    }),
                }
            }),
            rollout: self
                .rollout
                .as_ref()
                .or(defaults.rollout.as_ref())
                .map(|r| RolloutPolicy {
                    canary: r.canary.0,
                    window: r.window.map_or(Duration::from_secs(300), |d| d.0),
                    min_attempts: r.min_attempts.map_or(50, |m| m.0),
                    max_failure_rate: r.max_failure_rate.map_or(0.2, |f| f.0),
                    margin: r.margin.map_or(0.05, |m| m.0),
                    journaled: r.journaled.unwrap_or_default(),
                }),
            results: self
                .results
                .as_ref()
                .or(defaults.results.as_ref())
                .map(|r| Results {
                    keep: r.keep.map_or(Duration::from_secs(86_400), |d| d.0),
                    max: r.max.as_ref().map_or(64 << 10, |m| m.get_ref().0),
                }),
            reuse: self
                .reuse
                .as_ref()
                .or(defaults.reuse.as_ref())
                .map(|r| Reuse {
                    jobs: r.jobs.map_or(1000, |j| j.0),
                    idle: r.idle.map_or(Duration::from_secs(60), |d| d.0),
                }),
            journal: JournalPolicy {
                effects: self
                    .journal
                    .as_ref()
                    .or(defaults.journal.as_ref())
                    .map(|k| *k.get_ref())
                    == Some(JournalKind::Effects),
                max: self
                    .journal_max
                    .as_ref()
                    .or(defaults.journal_max.as_ref())
                    .map_or(DEFAULT_JOURNAL_MAX, |m| m.get_ref().0),
                on_divergence: self
                    .on_divergence
                    .or(defaults.on_divergence)
                    .unwrap_or_default(),
            },
            expire_after: self.expire_after.or(defaults.expire_after).map(|d| d.0),
            batch: self.batch.as_ref().map(|b| BatchPolicy {
                max: b.get_ref().max.0,
                wait: b.get_ref().wait.map_or(Duration::ZERO, |d| d.0),
                by_key: b.get_ref().key.unwrap_or(false),
            }),
            on_expire: match self.on_expire.or(defaults.on_expire) {
                Some(RawOnExpire::Drop) => hourglass_client::OnExpire::Drop,
                Some(RawOnExpire::Dead) | None => hourglass_client::OnExpire::Dead,
            },
            // checked in load.rs: a keep out of range is refused there
            logs: super::logs::resolve(self.logs.as_ref(), defaults.logs.as_ref(), "")
                .unwrap_or(hourglass_client::logs::DEFAULT_KEEP),
        }
    }
}
