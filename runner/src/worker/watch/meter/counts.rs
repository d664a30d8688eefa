//! A topic's counts as the meter keeps them (`meter.rs`): its attempts,
//! lateness, CPU and memory since the runner started, and each handler
//! version's metric handles, looked up once.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{
    DirectionLabels, Metrics, OutcomeLabels, ThreadLabels, TopicLabel, VersionLabels,
};
use crate::redis::Tally;

/// Lateness samples kept per topic: the most recent attempts.
pub(super) const RECENT: usize = 1024;

/// The attempts the moving average of an attempt's wall time follows (its
/// weight on the newest is one in this many).
pub(super) const ATTEMPT_WINDOW: f64 = 64.0;

/// How an attempt ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ack,
    Retry,
    Dead,
    Released,
    /// Its job was cancelled while it ran: the commit found it gone.
    Cancelled,
    /// A durable handler's job sleeps or waits for a signal.
    Suspended,
    /// Not started by its deadline: ended unrun (dead-lettered or dropped).
    Expired,
}

impl Outcome {
    pub(super) const ALL: [Outcome; 7] = [
        Outcome::Ack,
        Outcome::Retry,
        Outcome::Dead,
        Outcome::Released,
        Outcome::Cancelled,
        Outcome::Suspended,
        Outcome::Expired,
    ];

    fn label(self) -> &'static str {
        match self {
            Outcome::Ack => "ack",
            Outcome::Retry => "retry",
            Outcome::Dead => "dead",
            Outcome::Released => "released",
            Outcome::Cancelled => "cancelled",
            Outcome::Suspended => "suspended",
            Outcome::Expired => "expired",
        }
    }
}

/// One handler version of a topic.
pub(super) struct VersionCounts {
    pub(super) version: Arc<str>,
    /// Since the last report to Redis.
    pub(super) tally: Tally,
    pub(super) outcomes: [Counter; 7],
    pub(super) duration: Histogram,
    pub(super) cpu: Histogram,
    pub(super) cpu_total: Counter<f64, AtomicU64>,
    pub(super) memory_peak: Histogram,
    pub(super) bytes_out: Counter,
    pub(super) bytes_in: Counter,
}

pub(super) struct Counts {
    pub(super) topic: String,
    pub(super) done: u64,
    pub(super) failed: u64,
    /// Of the failed, dead-lettered.
    pub(super) dead: u64,
    /// Attempts started, per lateness bucket (the history by the minute).
    pub(super) late: [u64; 14],
    pub(super) late_ms: VecDeque<u64>,
    pub(super) lateness: Histogram,
    /// Attempts started on the runner's thread, and on the pool.
    pub(super) threads: [Counter; 2],
    /// CPU of every attempt, µs.
    pub(super) cpu_us: u64,
    /// Peak memory of its most recent attempts, bytes.
    pub(super) memory: VecDeque<u64>,
    /// Wall time of its recent attempts, µs (a moving average), if any ran.
    pub(super) attempt_us: Option<f64>,
    pub(super) versions: Vec<VersionCounts>,
}

impl Counts {
    pub(super) fn new(metrics: &Metrics, topic: &str) -> Counts {
        let label = TopicLabel {
            topic: topic.to_owned(),
        };
        Counts {
            topic: topic.to_owned(),
            done: 0,
            failed: 0,
            dead: 0,
            late: [0; 14],
            late_ms: VecDeque::new(),
            lateness: metrics.lateness.get_or_create_owned(&label),
            threads: ["runner", "pool"].map(|thread| {
                metrics.attempts_started.get_or_create_owned(&ThreadLabels {
                    topic: topic.to_owned(),
                    thread,
                })
            }),
            cpu_us: 0,
            memory: VecDeque::new(),
            attempt_us: None,
            versions: Vec::new(),
        }
    }

    /// The counts of `version`, made on first use.
    pub(super) fn version(&mut self, metrics: &Metrics, version: &Arc<str>) -> &mut VersionCounts {
        let i = match self
            .versions
            .iter()
            .position(|v| Arc::ptr_eq(&v.version, version) || v.version == *version)
        {
            Some(i) => i,
            None => {
                let topic = &self.topic;
                let labels = version_labels(topic, version);
                self.versions.push(VersionCounts {
                    version: version.clone(),
                    tally: Tally::default(),
                    outcomes: Outcome::ALL.map(|o| {
                        metrics
                            .attempts
                            .get_or_create_owned(&outcome_labels(topic, version, o))
                    }),
                    duration: metrics.duration.get_or_create_owned(&labels),
                    cpu: metrics.cpu.get_or_create_owned(&labels),
                    cpu_total: metrics.cpu_total.get_or_create_owned(&labels),
                    memory_peak: metrics.memory_peak.get_or_create_owned(&labels),
                    bytes_out: metrics
                        .outbound_bytes
                        .get_or_create_owned(&direction_labels(topic, version, "out")),
                    bytes_in: metrics
                        .outbound_bytes
                        .get_or_create_owned(&direction_labels(topic, version, "in")),
                });
                self.versions.len() - 1
            }
        };
        &mut self.versions[i]
    }
}

pub(super) fn outcome_labels(topic: &str, version: &str, outcome: Outcome) -> OutcomeLabels {
    OutcomeLabels {
        topic: topic.to_owned(),
        version: version.to_owned(),
        outcome: outcome.label(),
    }
}

pub(super) fn direction_labels(
    topic: &str,
    version: &str,
    direction: &'static str,
) -> DirectionLabels {
    DirectionLabels {
        topic: topic.to_owned(),
        version: version.to_owned(),
        direction,
    }
}

pub(super) fn version_labels(topic: &str, version: &str) -> VersionLabels {
    VersionLabels {
        topic: topic.to_owned(),
        version: version.to_owned(),
    }
}
