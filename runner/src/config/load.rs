//! Reading `queues.toml` into a [`Config`]: the file parsed strictly, every
//! section resolved, the whole checked (topic names, limits, handler files,
//! grants, follow-up targets, schedules) as [`Check`] says, and the first
//! fault reported as a [`ConfigError`] with its file, line and column.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::grants::{resolve_grants, resolve_http};
use super::place::{field_at, line_col};
use super::raw::{Defaults, RawTopic};
use super::{
    Config, JOURNAL_MAX_RANGE, MAX_MEMORY, MAX_PAYLOAD, MAX_RESULT, MIN_MEMORY, ScheduleConfig,
    TopicConfig, check_topic_name, raw, telemetry,
};

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
            super::logs::resolve(topic.logs.as_ref(), defaults.logs.as_ref(), name)
                .map_err(|(span, m)| invalid(span, m))?;
            check_journal(topic, &defaults, &resolved).map_err(|(span, m)| invalid(span, m))?;
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
}

/// `journal_max` within its range; `journal = "effects"` only with a fresh
/// instance per attempt (an instance reused from another job carries state
/// its journal cannot replay).
fn check_journal(
    topic: &RawTopic,
    defaults: &Defaults,
    resolved: &TopicConfig,
) -> Result<(), (Option<std::ops::Range<usize>>, String)> {
    let name = topic.name.get_ref();
    if let Some(max) = topic.journal_max.as_ref().or(defaults.journal_max.as_ref())
        && !JOURNAL_MAX_RANGE.contains(&max.get_ref().0)
    {
        return Err((
            Some(max.span()),
            format!(
                "field `journal_max`: topic {name:?}: between 64KiB and 64MiB (a journal is read whole by every attempt)"
            ),
        ));
    }
    if let (Some(batch), Some(raw)) = (resolved.batch, topic.batch.as_ref()) {
        let why = if batch.max > 10_000 {
            Some("`max` at most 10000".to_owned())
        } else if resolved.journal.effects {
            Some("not with `journal = \"effects\"` (a journal is one job's; a batch call is many jobs')".to_owned())
        } else if batch.wait > std::time::Duration::from_secs(60) {
            Some("`wait` at most 60s (the first job waits that long for others)".to_owned())
        } else if batch.by_key && resolved.fairness.is_none() {
            Some("`key = true` needs fairness on the topic (`fairness`, `key_concurrency` or `key_rate`): only its claims bring each job's key".to_owned())
        } else {
            None
        };
        if let Some(why) = why {
            return Err((
                Some(raw.span()),
                format!("field `batch`: topic {name:?}: {why}"),
            ));
        }
    }
    if resolved.journal.effects && resolved.reuse.is_some() {
        let at = topic.journal.as_ref().or(defaults.journal.as_ref());
        return Err((
            at.map(|j| j.span()),
            format!(
                "field `journal`: topic {name:?}: \"effects\" needs a fresh instance per attempt; remove `reuse` (a reused instance carries state from other jobs that its journal cannot replay)"
            ),
        ));
    }
    Ok(())
}
