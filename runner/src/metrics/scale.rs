//! The autoscaling gauges (`hourglass_scale_*`), set from Redis at scrape
//! time like the depths (`http/scrape.rs`, from `http/scale.rs`'s read).
//! Ready, running and suspended are `hourglass_jobs{state}` already.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use super::TopicLabel;

/// A gauge of seconds.
type Seconds = Gauge<f64, AtomicU64>;

/// What an autoscaler reads, per topic and for the namespace.
#[derive(Debug, Default)]
pub struct ScaleMetrics {
    /// How long the oldest ready job has been due, seconds (0: none ready).
    pub oldest_ready: Family<TopicLabel, Seconds>,
    /// Jobs due within the next minute (not due yet).
    pub due_next_minute: Family<TopicLabel, Gauge>,
    /// The recent mean wall time of an attempt over the live runners, seconds.
    pub attempt: Family<TopicLabel, Seconds>,
    /// Runners each topic alone needs.
    pub suggested: Family<TopicLabel, Gauge>,
    /// Runners every topic together needs.
    pub fleet: Gauge,
}

impl ScaleMetrics {
    /// Register under `hourglass_scale_`.
    pub(super) fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("scale");
        r.register(
            "oldest_ready_age_seconds",
            "How long the oldest job ready to run (on the time index) has been due, 0 when none is",
            self.oldest_ready.clone(),
        );
        r.register(
            "due_next_minute",
            "Jobs that become due within the next minute (suspended ones waking then included)",
            self.due_next_minute.clone(),
        );
        r.register(
            "attempt_seconds",
            "Recent mean wall time of an attempt, over the live runners that report it",
            self.attempt.clone(),
        );
        r.register(
            "suggested_runners",
            "Runners this topic alone needs for its running, ready and next minute's jobs",
            self.suggested.clone(),
        );
        r.register(
            "fleet_runners",
            "Runners every topic together needs (what /api/scale's suggested_runners says): point an autoscaler here",
            self.fleet.clone(),
        );
    }

    /// Forget every topic's series (a topic gone from queues.toml leaves none).
    pub fn clear(&self) {
        self.oldest_ready.clear();
        self.due_next_minute.clear();
        self.attempt.clear();
        self.suggested.clear();
    }
}
