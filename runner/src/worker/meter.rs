//! What this runner did per topic, for its heartbeat (and so for `hourglass
//! stats --watch`): attempts acked and failed since it started, and the
//! lateness (due → start) of its most recent attempts.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use crate::redis::TopicMeter;

/// Lateness samples kept per topic: the most recent attempts.
const RECENT: usize = 1024;

#[derive(Default)]
struct Counts {
    done: u64,
    failed: u64,
    late_ms: VecDeque<u64>,
}

/// Per-topic counts, shared by the attempts, the committer and the heartbeat.
#[derive(Default)]
pub(crate) struct Meter(Mutex<HashMap<String, Counts>>);

impl Meter {
    fn with(&self, topic: &str, f: impl FnOnce(&mut Counts)) {
        let mut topics = self.0.lock().expect("meter lock");
        match topics.get_mut(topic) {
            Some(counts) => f(counts),
            None => f(topics.entry(topic.to_owned()).or_default()),
        }
    }

    /// An attempt of `topic` started `late_ms` after it was due.
    pub fn started(&self, topic: &str, late_ms: u64) {
        self.with(topic, |c| {
            if c.late_ms.len() == RECENT {
                c.late_ms.pop_front();
            }
            c.late_ms.push_back(late_ms);
        });
    }

    /// `done` attempts of `topic` were acked and `failed` failed.
    pub fn finished(&self, topic: &str, done: u64, failed: u64) {
        if done + failed > 0 {
            self.with(topic, |c| {
                c.done += done;
                c.failed += failed;
            });
        }
    }

    /// The counts so far, with the recent lateness percentiles.
    pub fn snapshot(&self) -> BTreeMap<String, TopicMeter> {
        let topics = self.0.lock().expect("meter lock");
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
        m.finished("t", 90, 10);
        let t = &m.snapshot()["t"];
        assert_eq!((t.done, t.failed), (90, 10));
        assert_eq!((t.late_p50_ms, t.late_p99_ms), (Some(51), Some(99)));
        // only the most recent samples count
        for _ in 0..RECENT {
            m.started("t", 7);
        }
        assert_eq!(m.snapshot()["t"].late_p99_ms, Some(7));
    }
}
