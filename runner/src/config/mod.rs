//! `queues.toml`: parsed strictly (unknown keys are errors), validated whole,
//! and resolved into [`Config`] before anything connects or spawns.
//!
//! Every error names the file, line and column and the field at fault.

mod backoff;
mod grants;
mod outbound;
mod place;
mod raw;
mod restart;
mod schedule;
mod server;
mod store;
mod telemetry;
mod units;

use grants::{resolve_grants, resolve_http};
use place::{field_at, line_col};

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use backoff::Backoff;
pub use hourglass_client::{DeadLetter, redact};
pub use outbound::{Access, HttpGrant, HttpLimits, MAX_RESPONSE, RemoteHost, Scheme, Target};
pub use schedule::{MAX_CATCH_UP, Missed, ScheduleConfig, When};
pub use server::{HttpServer, Token};
pub use store::{Durability, RedisConfig, RedisTarget, SentinelTarget, TlsFiles};
pub use telemetry::{SpanParent, TelemetryConfig};
pub use units::{DEFAULT_PAYLOAD, MAX_MEMORY, MAX_PAYLOAD, MIN_MEMORY, parse_duration, parse_size};

/// The `[runner]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerConfig {
    /// Where the compiled handler components are (relative paths resolved against the config file).
    pub handlers_dir: PathBuf,
    /// Jobs in flight in this process, all topics together.
    pub concurrency: u32,
    /// How long running handlers may finish after SIGINT/SIGTERM before their jobs are released.
    pub shutdown_grace: Duration,
    /// Added to a topic's timeout to make its lease: how long a dead runner holds a job.
    pub lease_margin: Duration,
    /// Where compiled handlers are cached (private to the runner), or `None` for no cache.
    pub compile_cache: Option<PathBuf>,
    /// The largest payload a job may carry, in bytes.
    pub max_payload: u64,
    /// How many handler versions each topic keeps loadable (the newest).
    pub keep_versions: u32,
    /// Where kept handler versions are stored (private to the runner).
    pub versions_dir: PathBuf,
}

/// One `[[topic]]`, with the `[defaults]` applied.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    /// The topic's name, as producers use it.
    pub name: String,
    /// The handler component's path.
    pub handler: PathBuf,
    /// Higher is served first when several topics have due jobs.
    pub priority: i64,
    /// Jobs of this topic in flight in this process.
    pub concurrency: u32,
    /// Wall-clock limit of one attempt; the guest is stopped when it runs out.
    pub timeout: Duration,
    /// CPU limit of one attempt, if any; the guest is stopped (within an
    /// epoch tick) once it has used this much.
    pub cpu: Option<Duration>,
    /// Attempts before dead-lettering, for jobs that do not set their own.
    pub max_attempts: u32,
    /// Delay between attempts when the handler does not choose one.
    pub backoff: Backoff,
    /// Linear memory limit of one instance, in bytes.
    pub memory: u64,
    /// Dead-letter retention.
    pub dead_letter: DeadLetter,
    /// Topics this topic's handler may enqueue follow-up jobs to.
    pub may_enqueue: Vec<String>,
    /// What the handler may reach beyond its sandbox; nothing by default.
    pub grants: Grants,
    /// Limits on the handler's outbound HTTP requests.
    pub http: HttpLimits,
    /// Share of capacity among topics of the same priority (`None`: strict
    /// file order inside the class unless another topic of it has a weight,
    /// then 1).
    pub weight: Option<u32>,
    /// How many attempts may start per period, across every runner.
    pub rate: Option<Rate>,
    /// How a new handler version is rolled out; `None`: it replaces the
    /// old one at once.
    pub rollout: Option<RolloutPolicy>,
    /// How long each job's end (state, result, reason) is kept for waiters;
    /// `None`: nothing is kept and nobody can wait.
    pub results: Option<Results>,
    /// Whether an instance serves more than one job (giving up per-job
    /// isolation for speed); `None`: a fresh instance per attempt.
    pub reuse: Option<Reuse>,
}

/// `reuse = { jobs, idle }`: one instance of a handler version serves up to
/// `jobs` jobs, one at a time, and is dropped once idle for `idle`, after a
/// trap or a limit, and when its version or the topic's sandbox changes.
/// What one job leaves in the instance's memory the next job sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reuse {
    /// Most jobs one instance serves.
    pub jobs: u32,
    /// How long an instance may wait for its next job.
    pub idle: Duration,
}

/// `results = { keep, max }`: every job's end is kept this long, with the
/// result its handler set (at most `max` bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Results {
    /// How long an end is kept after it.
    pub keep: Duration,
    /// The largest result an attempt may set, in bytes.
    pub max: u64,
}

/// The largest `results.max`: 16 MiB.
pub const MAX_RESULT: u64 = 16 << 20;

/// `rollout = { canary, for, min_attempts, max_failure_rate, margin }`: a
/// new handler version first serves a share of attempts (the canary), then
/// is promoted or rolled back by the numbers (README "Roll out a handler
/// safely").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RolloutPolicy {
    /// The canary's share of attempts (0..1, exclusive).
    pub canary: f64,
    /// How long the canary serves before it can be promoted.
    pub window: Duration,
    /// Attempts the canary needs before any verdict by failure rate.
    pub min_attempts: u32,
    /// A canary failing more often than this (and than the stable version
    /// by more than `margin`) is rolled back.
    pub max_failure_rate: f64,
    /// How much worse than the stable version a canary may fail and still
    /// be promoted.
    pub margin: f64,
}

/// `rate = { limit, per, burst }`: at most `limit` starts per `per` on
/// average across all runners, `burst` more at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Starts per period.
    pub limit: u32,
    /// The period.
    pub per: Duration,
    /// Extra starts allowed at once.
    pub burst: u32,
}

impl Rate {
    /// The steady spacing between starts, in ms (fractional).
    pub fn interval_ms(&self) -> f64 {
        self.per.as_secs_f64() * 1000.0 / f64::from(self.limit)
    }
}

/// Capabilities `queues.toml` grants one topic's handler.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Environment variables (name, value) copied from the runner's environment.
    pub env: Vec<(String, String)>,
    /// Host directories the guest sees.
    pub dirs: Vec<DirGrant>,
    /// Where outbound HTTP requests may go.
    pub http: Vec<HttpGrant>,
}

/// One host directory a guest may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    /// The directory on the host.
    pub host: PathBuf,
    /// Where the guest sees it (an absolute guest path such as `/data`).
    pub guest: String,
    /// Whether the guest may create, change and delete files in it.
    pub write: bool,
}

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it was read from.
    pub path: PathBuf,
    /// `[redis]`.
    pub redis: RedisConfig,
    /// `[runner]`.
    pub runner: RunnerConfig,
    /// The topics, in file order.
    pub topics: Vec<TopicConfig>,
    /// `[http]`: the API, dashboard and metrics, if served.
    pub http: Option<HttpServer>,
    /// `[[schedule]]`: jobs enqueued on a cron expression or period.
    pub schedules: Vec<ScheduleConfig>,
    /// `[telemetry]` (or the OTLP environment variables): where spans are
    /// exported; `None`: not at all.
    pub telemetry: Option<TelemetryConfig>,
}

/// A configuration that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid, at a known place.
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong, naming the field.
        message: String,
    },
}

/// How much of the machine a configuration is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Everything, for a runner: handler files exist, granted variables are
    /// set, granted folders and CA files exist.
    Runner,
    /// The file itself only, for a producer or an operator's command: it
    /// needs `[redis]` and topic names, not the handlers or their grants.
    Producer,
}

impl Config {
    /// Read and validate `path` for a runner.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_for(path, Check::Runner)
    }

    /// Read and validate `path`, checked against the machine as `check` says.
    pub fn load_for(path: &Path, check: Check) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::parse_for(path, &text, check)
    }

    /// Validate `text` for a runner, as if read from `path` (relative paths
    /// resolve against its folder).
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        Config::parse_for(path, text, Check::Runner)
    }

    /// Validate `text` as if read from `path`, checked against the machine as
    /// `check` says.
    pub fn parse_for(path: &Path, text: &str, check: Check) -> Result<Config, ConfigError> {
        let invalid = |span: Option<std::ops::Range<usize>>, message: String| {
            let (line, column) = span.map_or((1, 1), |s| line_col(text, s.start));
            ConfigError::Invalid {
                path: path.to_owned(),
                line,
                column,
                message,
            }
        };
        let raw: raw::File = toml::from_str(text).map_err(|e| {
            let message = e.message().to_owned();
            // a value's own error (a bad duration, size or number) names the value, not its key
            let message = match e.span().and_then(|span| field_at(text, span.start)) {
                Some(field) if !message.contains("field") => format!("field `{field}`: {message}"),
                _ => message,
            };
            invalid(e.span(), message)
        })?;
        let base = path.parent().map(Path::to_owned).unwrap_or_default();
        let base = if base.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            base
        };

        let redis = raw
            .redis
            .resolve(&base)
            .map_err(|(span, m)| invalid(Some(span), m))?;
        if let Some(size) = &raw.runner.max_payload
            && !(1..=MAX_PAYLOAD).contains(&size.get_ref().0)
        {
            return Err(invalid(
                Some(size.span()),
                format!(
                    "field `max_payload`: must be between 1 byte and {} MiB",
                    MAX_PAYLOAD >> 20
                ),
            ));
        }
        let runner = raw.runner.resolve(&base);
        let defaults = raw.defaults;
        let mut topics = Vec::with_capacity(raw.topics.len());
        let mut names = HashSet::new();
        for topic in &raw.topics {
            let span = topic.name.span();
            let name = topic.name.get_ref();
            if let Err(why) = check_topic_name(name) {
                return Err(invalid(Some(span), format!("field `name`: {why}")));
            }
            if !names.insert(name.clone()) {
                return Err(invalid(
                    Some(span),
                    format!("field `name`: topic {name:?} is defined twice"),
                ));
            }
            let mut resolved = topic.resolve(&defaults, &runner);
            let memory = topic.memory.as_ref().or(defaults.memory.as_ref());
            if let Some(memory) = memory
                && !(MIN_MEMORY..=MAX_MEMORY).contains(&resolved.memory)
            {
                return Err(invalid(
                    Some(memory.span()),
                    format!(
                        "field `memory`: topic {name:?}: between 1MiB (a handler's own stack and data) and 4GiB (a WebAssembly memory cannot grow further)"
                    ),
                ));
            }
            let results = topic.results.as_ref().or(defaults.results.as_ref());
            if let Some(max) = results.and_then(|r| r.max.as_ref())
                && !(1..=MAX_RESULT).contains(&max.get_ref().0)
            {
                return Err(invalid(
                    Some(max.span()),
                    format!(
                        "field `results.max`: topic {name:?}: between 1B and 16MiB (results live in Redis; put bigger outputs in storage and return where)"
                    ),
                ));
            }
            if check == Check::Producer {
                // what runs the jobs is the runner's business
                topics.push(resolved);
                continue;
            }
            if let Some(grants) = &topic.grants {
                resolved.grants = resolve_grants(grants, &base, name)
                    .map_err(|(span, m)| invalid(Some(span), m))?;
            }
            resolved.http = resolve_http(defaults.http.as_ref(), topic.http.as_ref(), &base, name)
                .map_err(|(span, m)| invalid(Some(span), m))?;
            if !resolved.handler.is_file() {
                return Err(invalid(
                    Some(topic.handler.span()),
                    format!(
                        "field `handler`: topic {name:?}: handler file {} does not exist (build it with `hourglass build`)",
                        resolved.handler.display()
                    ),
                ));
            }
            topics.push(resolved);
        }
        for topic in &raw.topics {
            for target in topic.may_enqueue.iter().flatten() {
                if !names.contains(target.get_ref()) {
                    return Err(invalid(
                        Some(target.span()),
                        format!(
                            "field `may_enqueue`: topic {:?} may enqueue to {:?}, which is not a topic here",
                            topic.name.get_ref(),
                            target.get_ref()
                        ),
                    ));
                }
            }
        }
        let http = match raw.http {
            None => None,
            Some(h) => {
                let whole = h.span();
                Some(
                    h.into_inner()
                        .resolve(whole)
                        .map_err(|(span, m)| invalid(Some(span), m))?,
                )
            }
        };
        let mut schedules: Vec<ScheduleConfig> = Vec::with_capacity(raw.schedules.len());
        for raw_schedule in raw.schedules {
            let (name_span, topic_span) = (raw_schedule.name.span(), raw_schedule.topic.span());
            let schedule = raw_schedule
                .resolve()
                .map_err(|(span, m)| invalid(Some(span), m))?;
            if schedules.iter().any(|s| s.name == schedule.name) {
                return Err(invalid(
                    Some(name_span),
                    format!(
                        "field `name`: schedule {:?} is defined twice",
                        schedule.name
                    ),
                ));
            }
            let known = topics.is_empty() || names.contains(&schedule.topic);
            if let Err(why) = check_topic_name(&schedule.topic).and(if known {
                Ok(())
            } else {
                Err(format!("{:?} is not a topic here", schedule.topic))
            }) {
                return Err(invalid(Some(topic_span), format!("field `topic`: {why}")));
            }
            schedules.push(schedule);
        }
        let telemetry =
            telemetry::RawTelemetry::resolve(raw.telemetry, |name| std::env::var(name).ok())
                .map_err(|(span, m)| invalid(Some(span), m))?;
        Ok(Config {
            path: path.to_owned(),
            redis,
            runner,
            topics,
            http,
            schedules,
            telemetry,
        })
    }

    /// The topic called `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicConfig> {
        self.topics.iter().find(|t| t.name == name)
    }
}

/// Topic names end up inside Redis keys and hash tags: keep them plain.
pub fn check_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 128 {
        return Err("a topic name is 1 to 128 characters".into());
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        Some(c) => Err(format!(
            "{name:?} contains {c:?}; use letters, digits, '_', '-' and '.'"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
