//! The file as written: every section `deny_unknown_fields`, every field
//! optional where a default exists. [`super::Config::parse`] resolves it.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::units::{
    DEFAULT_MEMORY, DEFAULT_PAYLOAD, Dur, Factor, Fraction, NonZeroDur, Positive, Size,
};
use super::{Backoff, DeadLetter, Grants, RedisConfig, RedisTarget, RunnerConfig, TopicConfig};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    #[serde(default)]
    pub redis: Redis,
    #[serde(default)]
    pub runner: Runner,
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(default, rename = "topic")]
    pub topics: Vec<Topic>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Redis {
    pub url: Option<Spanned<String>>,
    pub namespace: Option<String>,
    /// Where embedded Redis keeps its data (default `.hourglass/redis` beside the config).
    pub data_dir: Option<PathBuf>,
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
}

/// `compile_cache = false`, or the folder.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum CacheSetting {
    Enabled(bool),
    Dir(PathBuf),
}

/// `grants = { env = [...], dirs = [...] }` of one topic.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGrants {
    pub env: Option<Vec<Spanned<String>>>,
    pub dirs: Option<Vec<Spanned<RawDir>>>,
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
    pub backoff: Option<Spanned<RawBackoff>>,
    pub memory: Option<Spanned<Size>>,
    pub dead_letter: Option<RawDeadLetter>,
    pub priority: Option<i64>,
    pub concurrency: Option<Positive>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Topic {
    pub name: Spanned<String>,
    pub handler: Spanned<PathBuf>,
    pub priority: Option<i64>,
    pub concurrency: Option<Positive>,
    pub max_attempts: Option<Positive>,
    pub timeout: Option<NonZeroDur>,
    pub backoff: Option<Spanned<RawBackoff>>,
    pub memory: Option<Spanned<Size>>,
    pub dead_letter: Option<RawDeadLetter>,
    pub may_enqueue: Option<Vec<Spanned<String>>>,
    pub grants: Option<RawGrants>,
}

type Invalid = (Range<usize>, String);

impl Redis {
    pub fn resolve(self, base: &Path) -> Result<RedisConfig, Invalid> {
        let namespace = self.namespace.unwrap_or_else(|| "hourglass".into());
        let target = match self.url {
            None => RedisTarget::Url("redis://127.0.0.1:6379/0".into()),
            Some(url) if url.get_ref() == "embedded" => RedisTarget::Embedded {
                dir: base.join(self.data_dir.unwrap_or_else(|| ".hourglass/redis".into())),
            },
            Some(url) => {
                let span = url.span();
                let url = url.into_inner();
                let known = ["redis://", "rediss://", "unix://", "redis+unix://"];
                if !known.iter().any(|scheme| url.starts_with(scheme)) {
                    return Err((
                        span,
                        format!(
                            "field `url`: {url:?} is not a redis://, rediss:// or unix:// URL, nor \"embedded\""
                        ),
                    ));
                }
                RedisTarget::Url(url)
            }
        };
        Ok(RedisConfig { target, namespace })
    }
}

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
        }
    }
}

impl Topic {
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
        }
    }
}
