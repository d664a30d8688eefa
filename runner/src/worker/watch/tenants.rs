//! CPU of tenant keys: each attempt of a topic that claims fairly is
//! summed here per topic and key, and added to Redis every
//! [`CHARGE_EVERY`] by the scheduler (`key_charge.lua`): the cost per job
//! a key is charged under `share = "cpu"`, and the CPU per key of the
//! last minute that `stats --by-key` and `/metrics` show. A flush that
//! fails is kept and tried again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::{Attempt, Ending, Watcher};
use crate::redis::Queue;
use crate::wasm::Finish;

/// How often the sums go to Redis (a key's cost lags by at most this).
pub(crate) const CHARGE_EVERY: Duration = Duration::from_millis(200);

/// Sums not yet in Redis: (topic, key) → (attempts, CPU µs).
#[derive(Debug, Default)]
pub(crate) struct Tenants(Mutex<HashMap<(String, String), (u64, u64)>>);

impl Tenants {
    /// Add what has been summed to Redis; on failure keep it for next time.
    pub async fn flush(&self, queue: &Queue, now_ms: u64) {
        let sums = std::mem::take(&mut *self.0.lock().expect("tenants lock"));
        if sums.is_empty() {
            return;
        }
        let mut by_topic: HashMap<&str, Vec<(String, u64, u64)>> = HashMap::new();
        for ((topic, key), (n, cpu)) in &sums {
            by_topic
                .entry(topic)
                .or_default()
                .push((key.clone(), *n, *cpu));
        }
        for (topic, charges) in by_topic {
            if let Err(e) = queue
                .tenants()
                .charge(&queue.keys(topic), now_ms, &charges)
                .await
            {
                tracing::debug!(topic, "CPU of tenant keys not written yet: {e}");
                let mut kept = self.0.lock().expect("tenants lock");
                for (key, n, cpu) in charges {
                    let e = kept.entry((topic.to_owned(), key)).or_default();
                    e.0 += n;
                    e.1 += cpu;
                }
            }
        }
    }
}

/// Each attempt of a job claimed fairly that ran (or tried to) counts.
impl Watcher for Tenants {
    fn ended(&self, a: &Attempt<'_>, e: &Ending<'_>) {
        if let Some(key) = a.key
            && !matches!(e.finish, Finish::NotStarted(_))
        {
            let mut sums = self.0.lock().expect("tenants lock");
            let s = sums
                .entry((a.topic.to_owned(), key.to_owned()))
                .or_default();
            s.0 += 1;
            s.1 += e.usage.cpu_us;
        }
    }
}
