//! What this runner did per topic: for its heartbeat (and so for `hourglass
//! stats --watch`) attempts acked and failed since it started and the
//! lateness (due → start) of its most recent attempts; for Prometheus
//! (`/metrics`) the same as counters and histograms. Each topic's metric
//! handles are looked up once, so recording costs an atomic add.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{Metrics, OutcomeLabels, TopicLabel};
use crate::redis::TopicMeter;

/// Lateness samples kept per topic: the most recent attempts.
const RECENT: usize = 1024;

/// How an attempt ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ack,
    Retry,
    Dead,
    Released,
    /// Its job was cancelled while it ran: the commit found it gone.
    Cancelled,
}

impl Outcome {
    const ALL: [Outcome; 5] = [
        Outcome::Ack,
        Outcome::Retry,
        Outcome::Dead,
        Outcome::Released,
        Outcome::Cancelled,
    ];

    fn label(self) -> &'static str {
        match self {
            Outcome::Ack => "ack",
            Outcome::Retry => "retry",
            Outcome::Dead => "dead",
            Outcome::Released => "released",
            Outcome::Cancelled => "cancelled",
        }
    }
}

struct Counts {
    done: u64,
    failed: u64,
    late_ms: VecDeque<u64>,
    outcomes: [Counter; 5],
    lateness: Histogram,
    duration: Histogram,
}

impl Counts {
    fn new(metrics: &Metrics, topic: &str) -> Counts {
        let label = TopicLabel {
            topic: topic.to_owned(),
        };
        Counts {
            done: 0,
            failed: 0,
            late_ms: VecDeque::new(),
            outcomes: Outcome::ALL.map(|o| {
                metrics.attempts.get_or_create_owned(&OutcomeLabels {
                    topic: topic.to_owned(),
                    outcome: o.label(),
                })
            }),
            lateness: metrics.lateness.get_or_create_owned(&label),
            duration: metrics.duration.get_or_create_owned(&label),
        }
    }
}

/// Per-topic counts, shared by the attempts, the committer and the heartbeat.
pub(crate) struct Meter {
    metrics: Arc<Metrics>,
    topics: Mutex<HashMap<String, Counts>>,
}

impl Default for Meter {
    fn default() -> Self {
        Meter::new(Arc::default())
    }
}

impl Meter {
    /// Count into `metrics` (and for the heartbeat).
    pub fn new(metrics: Arc<Metrics>) -> Meter {
        Meter {
            metrics,
            topics: Mutex::default(),
        }
    }

    fn with(&self, topic: &str, f: impl FnOnce(&mut Counts)) {
        let mut topics = self.topics.lock().expect("meter lock");
        match topics.get_mut(topic) {
            Some(counts) => f(counts),
            None => f(topics
                .entry(topic.to_owned())
                .or_insert_with(|| Counts::new(&self.metrics, topic))),
        }
    }

    /// An attempt of `topic` started `late_ms` after it was due.
    pub fn started(&self, topic: &str, late_ms: u64) {
        self.with(topic, |c| {
            if c.late_ms.len() == RECENT {
                c.late_ms.pop_front();
            }
            c.late_ms.push_back(late_ms);
            c.lateness.observe(late_ms as f64 / 1000.0);
        });
    }

    /// An attempt of `topic` ran its handler for `took`.
    pub fn ran(&self, topic: &str, took: Duration) {
        self.with(topic, |c| c.duration.observe(took.as_secs_f64()));
    }

    /// `n` attempts of `topic` ended with `outcome` (committed to Redis).
    pub fn ended(&self, topic: &str, outcome: Outcome, n: usize) {
        if n == 0 {
            return;
        }
        let n = n as u64;
        self.with(topic, |c| {
            match outcome {
                Outcome::Ack => c.done += n,
                Outcome::Retry | Outcome::Dead => c.failed += n,
                Outcome::Released | Outcome::Cancelled => {}
            }
            c.outcomes[outcome as usize].inc_by(n);
        });
    }

    /// New jobs this runner enqueued (follow-ups, schedules), per topic.
    pub fn enqueued(&self, new: &BTreeMap<String, usize>) {
        for (topic, n) in new {
            self.metrics
                .enqueued
                .get_or_create(&TopicLabel {
                    topic: topic.clone(),
                })
                .inc_by(*n as u64);
        }
    }

    /// A Redis call failed.
    pub fn redis_error(&self) {
        self.metrics.redis_errors.inc();
    }

    /// The counts so far, with the recent lateness percentiles.
    pub fn snapshot(&self) -> BTreeMap<String, TopicMeter> {
        let topics = self.topics.lock().expect("meter lock");
        topics
            .iter()
            .map(|(name, c)| {
                let mut late: Vec<u64> = c.late_ms.iter().copied().collect();
                late.sort_unstable();
                let at = |q: f64| -> Option<u64> {
                    let i = ((late.len() as f64 - 1.0) * q).round() as usize;
                    late.get(i).copied()
                };
                let meter = TopicMeter {
                    done: c.done,
                    failed: c.failed,
                    late_p50_ms: at(0.5),
                    late_p99_ms: at(0.99),
                };
                (name.clone(), meter)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_recent_lateness_percentiles() {
        let m = Meter::default();
        for late in 1..=100 {
            m.started("t", late);
        }
        m.ended("t", Outcome::Ack, 90);
        m.ended("t", Outcome::Retry, 4);
        m.ended("t", Outcome::Dead, 6);
        m.ended("t", Outcome::Released, 3);
        let t = &m.snapshot()["t"];
        assert_eq!((t.done, t.failed), (90, 10));
        let text = m.metrics.encode();
        assert!(
            text.contains("hourglass_attempts_total{topic=\"t\",outcome=\"ack\"} 90"),
            "{text}"
        );
        assert!(
            text.contains("hourglass_attempts_total{topic=\"t\",outcome=\"released\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("hourglass_lateness_seconds_count{topic=\"t\"} 100"),
            "{text}"
        );
        assert_eq!((t.late_p50_ms, t.late_p99_ms), (Some(51), Some(99)));
        // only the most recent samples count
        for _ in 0..RECENT {
            m.started("t", 7);
        }
        assert_eq!(m.snapshot()["t"].late_p99_ms, Some(7));
    }
}
