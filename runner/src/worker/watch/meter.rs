//! What this runner did per topic: for its heartbeat (and so for `hourglass
//! stats --watch`) attempts acked and failed since it started and the
//! lateness (due → start) of its most recent attempts; for Prometheus
//! (`/metrics`) the same as counters and histograms, the attempts and their
//! durations per handler version; for rollouts (`rollout.rs`) each version's
//! attempts, failures and crashes since the last report to Redis. Each
//! topic's and version's metric handles are looked up once, so recording
//! costs an atomic add under the topic's lock.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::metrics::{Metrics, TopicLabel};
use crate::redis::{MinuteSums, Tally, TopicMeter, Usage, late_bucket};
use crate::wasm::Finish;

mod counts;

pub(crate) use counts::Outcome;
use counts::{ATTEMPT_WINDOW, Counts, RECENT, direction_labels, outcome_labels, version_labels};

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

    fn with<T>(&self, topic: &str, f: impl FnOnce(&mut Counts) -> T) -> T {
        let mut topics = self.topics.lock().expect("meter lock");
        match topics.get_mut(topic) {
            Some(counts) => f(counts),
            None => f(topics
                .entry(topic.to_owned())
                .or_insert_with(|| Counts::new(&self.metrics, topic))),
        }
    }

    /// An attempt of `topic` started `late_ms` after it was due, on the
    /// pool if `pooled` (else on the runner's thread).
    pub fn started(&self, topic: &str, late_ms: u64, pooled: bool) {
        self.with(topic, |c| {
            c.threads[usize::from(pooled)].inc();
            if c.late_ms.len() == RECENT {
                c.late_ms.pop_front();
            }
            c.late_ms.push_back(late_ms);
            c.late[late_bucket(late_ms)] += 1;
            c.lateness.observe(late_ms as f64 / 1000.0);
        });
    }

    /// An attempt of `topic` ran handler `version`, using `usage` and
    /// ending as `finish` (one that could not start counts for no version:
    /// a rollout judges a version by the attempts it ran).
    pub fn ran(&self, topic: &str, version: &Arc<str>, usage: &Usage, finish: &Finish) {
        // (failed, crashed), or not counted: a retry or a failure the handler chose
        // is a failure; a trap or a limit is also a crash
        let tally = match finish {
            Finish::Ack(_) | Finish::Suspended(_) => Some((false, false)),
            Finish::Retry { .. } | Finish::Fail(_) => Some((true, false)),
            Finish::Crashed(_) => Some((true, true)),
            Finish::NotStarted(_) => None,
        };
        self.with(topic, |c| {
            c.cpu_us += usage.cpu_us;
            if c.memory.len() == RECENT {
                c.memory.pop_front();
            }
            c.memory.push_back(usage.memory_peak);
            if tally.is_some() {
                let wall = usage.wall_us as f64;
                c.attempt_us = Some(match c.attempt_us {
                    Some(mean) => mean + (wall - mean) / ATTEMPT_WINDOW,
                    None => wall,
                });
            }
            let v = c.version(&self.metrics, version);
            v.duration.observe(usage.wall().as_secs_f64());
            let cpu = usage.cpu().as_secs_f64();
            v.cpu.observe(cpu);
            v.cpu_total.inc_by(cpu);
            v.memory_peak.observe(usage.memory_peak as f64);
            if usage.requests > 0 {
                v.bytes_out.inc_by(usage.bytes_out);
                v.bytes_in.inc_by(usage.bytes_in);
            }
            if let Some((failed, crashed)) = tally {
                v.tally.attempts += 1;
                v.tally.failures += u64::from(failed);
                v.tally.crashes += u64::from(crashed);
            }
        });
    }

    /// `n` attempts of `topic` on handler `version` ended with `outcome`
    /// (committed to Redis).
    pub fn ended(&self, topic: &str, version: &Arc<str>, outcome: Outcome, n: usize) {
        if n == 0 {
            return;
        }
        let n = n as u64;
        self.with(topic, |c| {
            match outcome {
                Outcome::Ack => c.done += n,
                Outcome::Retry => c.failed += n,
                Outcome::Dead => {
                    c.failed += n;
                    c.dead += n;
                }
                Outcome::Released | Outcome::Cancelled | Outcome::Suspended | Outcome::Expired => {}
            }
            c.version(&self.metrics, version).outcomes[outcome as usize].inc_by(n);
        });
    }

    /// Each version's attempts of `topic` since the last call (reset).
    pub fn take_tallies(&self, topic: &str) -> Vec<(Arc<str>, Tally)> {
        self.with(topic, |c| {
            c.versions
                .iter_mut()
                .filter(|v| v.tally.attempts > 0)
                .map(|v| (v.version.clone(), std::mem::take(&mut v.tally)))
                .collect()
        })
    }

    /// Put back tallies [`Meter::take_tallies`] took that could not be reported.
    pub fn restore_tallies(&self, topic: &str, tallies: Vec<(Arc<str>, Tally)>) {
        self.with(topic, |c| {
            for (version, t) in tallies {
                c.version(&self.metrics, &version).tally.add(t);
            }
        });
    }

    /// Stop labelling metrics with the versions of `topic` that `kept` says
    /// are gone (the label sets stay bounded by the kept versions).
    pub fn forget_versions(&self, topic: &str, kept: impl Fn(&str) -> bool) {
        self.with(topic, |c| {
            c.versions.retain(|v| {
                if kept(&v.version) || v.tally.attempts > 0 {
                    return true;
                }
                for o in Outcome::ALL {
                    self.metrics
                        .attempts
                        .remove(&outcome_labels(topic, &v.version, o));
                }
                let labels = version_labels(topic, &v.version);
                self.metrics.duration.remove(&labels);
                self.metrics.cpu.remove(&labels);
                self.metrics.cpu_total.remove(&labels);
                self.metrics.memory_peak.remove(&labels);
                for direction in ["out", "in"] {
                    self.metrics
                        .outbound_bytes
                        .remove(&direction_labels(topic, &v.version, direction));
                }
                false
            });
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

    /// A call of `topic`'s `handle-batch` with `jobs` jobs.
    pub fn batch_call(&self, topic: &str, jobs: usize) {
        let label = crate::metrics::TopicLabel {
            topic: topic.to_owned(),
        };
        self.metrics.batch_calls.get_or_create(&label).inc();
        self.metrics
            .batch_jobs
            .get_or_create(&label)
            .inc_by(jobs as u64);
    }

    /// A durable handler's attempt of `topic` recorded and replayed steps.
    pub fn steps(&self, topic: &str, steps: crate::wasm::StepCounts) {
        for (how, n) in [("recorded", steps.recorded), ("replayed", steps.replayed)] {
            if n > 0 {
                let label = crate::metrics::StepLabels {
                    topic: topic.to_owned(),
                    how,
                };
                self.metrics
                    .steps
                    .get_or_create(&label)
                    .inc_by(u64::from(n));
            }
        }
    }

    /// A journaled attempt of `topic` recorded and replayed effects, and
    /// met divergences.
    pub fn effects(&self, topic: &str, effects: crate::wasm::EffectCounts) {
        use crate::wasm::EffectCounts;
        for (how, counts) in [
            ("recorded", effects.recorded),
            ("replayed", effects.replayed),
        ] {
            for (kind, n) in EffectCounts::KINDS.iter().zip(counts) {
                if n > 0 {
                    let label = crate::metrics::EffectLabels {
                        topic: topic.to_owned(),
                        kind,
                        how,
                    };
                    self.metrics
                        .effects
                        .get_or_create(&label)
                        .inc_by(u64::from(n));
                }
            }
        }
        if effects.diverged > 0 {
            let label = crate::metrics::TopicLabel {
                topic: topic.to_owned(),
            };
            self.metrics
                .divergences
                .get_or_create(&label)
                .inc_by(u64::from(effects.diverged));
        }
    }

    /// A Redis call failed.
    pub fn redis_error(&self) {
        self.metrics.redis_errors.inc();
    }

    /// What each topic did since this runner started, for its history by
    /// the minute (the heartbeat adds the difference to Redis).
    pub fn totals(&self) -> BTreeMap<String, MinuteSums> {
        let topics = self.topics.lock().expect("meter lock");
        topics
            .iter()
            .map(|(name, c)| {
                let sums = MinuteSums {
                    acked: c.done,
                    failed: c.failed,
                    dead: c.dead,
                    cpu_us: c.cpu_us,
                    late: c.late,
                };
                (name.clone(), sums)
            })
            .collect()
    }

    /// The counts so far, with the recent lateness percentiles.
    pub fn snapshot(&self) -> BTreeMap<String, TopicMeter> {
        let topics = self.topics.lock().expect("meter lock");
        topics
            .iter()
            .map(|(name, c)| {
                let late = sorted(&c.late_ms);
                let meter = TopicMeter {
                    done: c.done,
                    failed: c.failed,
                    late_p50_ms: quantile(&late, 0.5),
                    late_p99_ms: quantile(&late, 0.99),
                    cpu_us: c.cpu_us,
                    memory_p99: quantile(&sorted(&c.memory), 0.99),
                    attempt_us: c.attempt_us.map(|us| us.round() as u64),
                };
                (name.clone(), meter)
            })
            .collect()
    }
}

/// The meter as a watcher of attempts: lateness as each starts, what each
/// used and how its handler answered as it ends.
impl super::Watcher for Meter {
    fn started(&self, a: &super::Attempt<'_>) {
        self.started(a.topic, a.late_ms(), a.pooled);
    }

    fn ended(&self, a: &super::Attempt<'_>, e: &super::Ending<'_>) {
        self.ran(a.topic, a.version, e.usage, e.finish);
    }
}

fn sorted(samples: &VecDeque<u64>) -> Vec<u64> {
    let mut v: Vec<u64> = samples.iter().copied().collect();
    v.sort_unstable();
    v
}

/// The `q` quantile of `sorted` samples (nearest rank), if there are any.
fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_recent_lateness_percentiles() {
        let m = Meter::default();
        let v: Arc<str> = "00000000000000aa".into();
        for late in 1..=100 {
            m.started("t", late, false);
        }
        m.ended("t", &v, Outcome::Ack, 90);
        m.ended("t", &v, Outcome::Retry, 4);
        m.ended("t", &v, Outcome::Dead, 6);
        m.ended("t", &v, Outcome::Released, 3);
        let t = &m.snapshot()["t"];
        assert_eq!((t.done, t.failed), (90, 10));
        let text = m.metrics.encode();
        assert!(
            text.contains(
                "hourglass_attempts_total{topic=\"t\",version=\"00000000000000aa\",outcome=\"ack\"} 90"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "hourglass_attempts_total{topic=\"t\",version=\"00000000000000aa\",outcome=\"released\"} 3"
            ),
            "{text}"
        );
        assert!(
            text.contains("hourglass_lateness_seconds_count{topic=\"t\"} 100"),
            "{text}"
        );
        assert_eq!((t.late_p50_ms, t.late_p99_ms), (Some(51), Some(99)));
        // only the most recent samples count
        for _ in 0..RECENT {
            m.started("t", 7, false);
        }
        assert_eq!(m.snapshot()["t"].late_p99_ms, Some(7));
    }

    #[test]
    fn tallies_per_version_are_taken_once_and_forgotten_versions_leave_the_metrics() {
        let m = Meter::default();
        let (old, new): (Arc<str>, Arc<str>) =
            ("000000000000000a".into(), "000000000000000b".into());
        let ms = Usage {
            wall_us: 1000,
            ..Usage::default()
        };
        m.ran("t", &old, &ms, &Finish::Ack(Default::default()));
        m.ran("t", &new, &ms, &Finish::Fail("no".into()));
        m.ran("t", &new, &ms, &Finish::Crashed("trap".into()));
        m.ran("t", &new, &ms, &Finish::NotStarted("pool".into()));
        let mut taken = m.take_tallies("t");
        taken.sort_by(|a, b| a.0.cmp(&b.0));
        let tally = |a, f, c| Tally {
            attempts: a,
            failures: f,
            crashes: c,
        };
        assert_eq!(
            taken,
            vec![(old.clone(), tally(1, 0, 0)), (new.clone(), tally(2, 2, 1))]
        );
        assert!(m.take_tallies("t").is_empty(), "taken once");
        m.restore_tallies("t", vec![(new.clone(), tally(2, 2, 1))]);
        assert_eq!(m.take_tallies("t"), vec![(new.clone(), tally(2, 2, 1))]);
        assert!(m.metrics.encode().contains("version=\"000000000000000a\""));
        m.forget_versions("t", |v| v == &*new);
        let text = m.metrics.encode();
        assert!(!text.contains("version=\"000000000000000a\""), "{text}");
        assert!(text.contains("version=\"000000000000000b\""), "{text}");
    }
}
