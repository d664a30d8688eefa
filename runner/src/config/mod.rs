//! `queues.toml`: parsed strictly (unknown keys are errors), validated whole,
//! and resolved into [`Config`] before anything connects or spawns.
//!
//! Every error names the file, line and column and the field at fault.
//! Reading and validating the file is `load.rs`; a topic as resolved is
//! `topic.rs`; each other section has its own file (`store.rs`,
//! `server.rs`, `schedule.rs`, `telemetry.rs`); this file holds the
//! resolved whole ([`Config`], [`RunnerConfig`]) and the grants.

mod backoff;
mod grants;
mod load;
mod logs;
mod outbound;
mod place;
mod raw;
mod restart;
mod schedule;
mod server;
mod store;
mod telemetry;
mod topic;
mod units;

use std::path::PathBuf;
use std::time::Duration;

pub use backoff::Backoff;
pub use hourglass_client::{DeadLetter, redact};
pub use load::{Check, ConfigError};
pub use outbound::{Access, HttpGrant, HttpLimits, MAX_RESPONSE, RemoteHost, Scheme, Target};
pub use schedule::{MAX_CATCH_UP, Missed, ScheduleConfig, When};
pub use server::{HttpServer, Token};
pub use store::{Durability, RedisConfig, RedisTarget, SentinelTarget, TlsFiles};
pub use telemetry::{SpanParent, TelemetryConfig};
pub use topic::{
    BatchPolicy, DEFAULT_JOURNAL_MAX, JOURNAL_MAX_RANGE, JournalPolicy, Journaled, MAX_RESULT,
    OnDivergence, PolicyJson, Rate, Results, Reuse, RolloutPolicy, TopicConfig, check_topic_name,
};
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
    /// A handler version whose recent attempts averaged under this much CPU
    /// runs its attempts on the runner's own thread, beside claiming and
    /// committing; a heavier one on the pool (`hourglass run --threads`).
    /// Zero: every attempt on the pool.
    pub light_cpu: Duration,
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

impl Config {
    /// The topic called `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicConfig> {
        self.topics.iter().find(|t| t.name == name)
    }
}

#[cfg(test)]
mod tests;
