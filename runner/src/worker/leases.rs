//! Leases kept while their runner lives. A claimed job's lease runs
//! `timeout + lease_margin` from its claim (`scheduler/claim.rs`), while its
//! attempt's time limit counts from its start. An attempt that waits for a
//! thread, or whose commit waits behind others (a machine past its load),
//! would outlive its lease, be requeued by a runner's housekeeping, and lose
//! its answer to the newer attempt: its runner alive, its work done, and five
//! of those dead-letter the job ("lease expired"). So this runner keeps
//! [`Leases`], the jobs it claimed and has not committed yet, and a task
//! extends each one's lease to a margin past now once its lease is less than
//! a margin away (`extend.lua`: never shortening one, only for the attempt
//! that holds it). A runner that dies stops extending: its jobs come back a
//! margin after the last extension, never before the lease they were claimed
//! with. An extension stops [`OVERRUN`] past that first lease, so an attempt
//! wedged by a bug does not hold its job for ever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Shared;
use crate::clock::now_ms;
use crate::redis::TopicKeys;

/// How long past the lease it was claimed with a job's lease is extended at
/// most: as long as a commit is retried (`commit.rs`).
pub(super) const OVERRUN: Duration = Duration::from_secs(180);

/// The jobs this runner claimed and has not committed yet, by topic.
#[derive(Default)]
pub(super) struct Leases {
    topics: Mutex<HashMap<String, Held>>,
}

/// One topic's held jobs.
struct Held {
    keys: TopicKeys,
    /// How far past now an extension sets a lease (`lease_margin`).
    margin_ms: u64,
    jobs: HashMap<String, Lease>,
}

/// One job's attempt and lease, as this runner last set it.
struct Lease {
    attempt: u32,
    until_ms: u64,
    /// The latest an extension may set it to.
    last_ms: u64,
}

impl Leases {
    /// Hold `jobs` (id, attempt) of the topic of `keys`, just claimed with
    /// leases until `until_ms`; `margin`: the runner's `lease_margin`.
    pub(super) fn hold<'a>(
        &self,
        keys: &TopicKeys,
        jobs: impl IntoIterator<Item = (&'a str, u32)>,
        until_ms: u64,
        margin: Duration,
    ) {
        let mut topics = self.topics.lock().expect("leases lock");
        let held = topics.entry(keys.topic.clone()).or_insert_with(|| Held {
            keys: keys.clone(),
            margin_ms: 0,
            jobs: HashMap::new(),
        });
        held.margin_ms = margin.as_millis() as u64;
        let last_ms = until_ms + OVERRUN.as_millis() as u64;
        for (id, attempt) in jobs {
            let lease = Lease {
                attempt,
                until_ms,
                last_ms,
            };
            held.jobs.insert(id.to_owned(), lease);
        }
    }

    /// Let go of `jobs` (id, attempt) of `topic`: committed (or given up).
    /// A job held again meanwhile by a newer attempt stays held.
    pub(super) fn let_go<'a>(&self, topic: &str, jobs: impl IntoIterator<Item = (&'a str, u32)>) {
        let mut topics = self.topics.lock().expect("leases lock");
        let Some(held) = topics.get_mut(topic) else {
            return;
        };
        for (id, attempt) in jobs {
            if held.jobs.get(id).is_some_and(|l| l.attempt == attempt) {
                held.jobs.remove(id);
            }
        }
    }

    /// How many jobs are held, all topics together.
    #[cfg(test)]
    fn len(&self) -> usize {
        let topics = self.topics.lock().expect("leases lock");
        topics.values().map(|h| h.jobs.len()).sum()
    }

    /// The leases to extend at `now`, by topic: each held job whose lease
    /// ends within a margin, with the time to extend it to. Jobs past their
    /// last extension are let go of, with a warning.
    fn due(&self, now: u64) -> Vec<Extension> {
        let mut topics = self.topics.lock().expect("leases lock");
        let mut out = Vec::new();
        topics.retain(|_, held| !held.jobs.is_empty());
        for held in topics.values_mut() {
            let until_ms = now + held.margin_ms;
            let topic = &held.keys.topic;
            held.jobs.retain(|id, lease| {
                let keep = lease.until_ms < lease.last_ms;
                if !keep {
                    tracing::warn!(topic, job_id = %id, attempt = lease.attempt, "attempt still not committed {}s past its lease: no longer extended, the job will run again", OVERRUN.as_secs());
                }
                keep
            });
            let jobs: Vec<(String, u32)> = held
                .jobs
                .iter_mut()
                .filter(|(_, lease)| lease.until_ms < until_ms)
                .map(|(id, lease)| {
                    lease.until_ms = until_ms.min(lease.last_ms);
                    (id.clone(), lease.attempt)
                })
                .collect();
            if !jobs.is_empty() {
                out.push(Extension {
                    keys: held.keys.clone(),
                    jobs,
                    until_ms,
                });
            }
        }
        out
    }

    /// How often the task looks: a quarter of the shortest margin, between
    /// 25 ms and a second.
    fn tick(&self) -> Duration {
        let topics = self.topics.lock().expect("leases lock");
        let margin = topics.values().map(|h| h.margin_ms).min().unwrap_or(4_000);
        Duration::from_millis((margin / 4).clamp(25, 1_000))
    }
}

/// One topic's leases to extend in one call.
struct Extension {
    keys: TopicKeys,
    jobs: Vec<(String, u32)>,
    until_ms: u64,
}

/// Extend held leases until aborted (after the committer has finished).
pub(super) async fn run(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(shared.leases.tick()).await;
        for ext in shared.leases.due(now_ms()) {
            let topic = ext.keys.topic.as_str();
            match shared
                .queue
                .pipeline()
                .extend(&ext.keys, &ext.jobs, ext.until_ms)
                .await
            {
                Ok(gone) => {
                    let attempt = |id: &str| ext.jobs.iter().find(|j| j.0 == id).map(|j| j.1);
                    let gone: Vec<(&str, u32)> = gone
                        .iter()
                        .filter_map(|id| Some((id.as_str(), attempt(id)?)))
                        .collect();
                    tracing::debug!(
                        topic,
                        extended = ext.jobs.len() - gone.len(),
                        "leases of attempts still running extended"
                    );
                    shared.leases.let_go(topic, gone);
                }
                Err(e) => tracing::warn!(topic, "cannot extend {} leases: {e}", ext.jobs.len()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> TopicKeys {
        TopicKeys::new("hg", "t")
    }

    #[test]
    fn a_lease_is_extended_once_it_ends_within_a_margin_and_not_past_its_overrun() {
        let leases = Leases::default();
        let margin = Duration::from_millis(1_000);
        leases.hold(&keys(), [("a", 1), ("b", 2)], 10_000, margin);
        assert!(leases.due(8_000).is_empty(), "two seconds left: not yet");
        let due = leases.due(9_500);
        assert_eq!(due.len(), 1);
        let mut jobs = due[0].jobs.clone();
        jobs.sort();
        assert_eq!(jobs, [("a".to_owned(), 1), ("b".to_owned(), 2)]);
        assert_eq!(due[0].until_ms, 10_500);
        // extended to 10.5 s: at 9.6 s it ends within a margin again
        assert_eq!(leases.due(9_600)[0].until_ms, 10_600);
        // the overrun's end: extended to it once, then let go of
        let last = 10_000 + OVERRUN.as_millis() as u64;
        assert_eq!(leases.due(last)[0].jobs.len(), 2);
        assert!(leases.due(last + 1).is_empty());
        assert_eq!(leases.len(), 0);
    }

    #[test]
    fn letting_go_of_an_older_attempt_keeps_the_newer_one() {
        let leases = Leases::default();
        let margin = Duration::from_millis(1_000);
        leases.hold(&keys(), [("a", 1)], 10_000, margin);
        leases.hold(&keys(), [("a", 2)], 12_000, margin);
        leases.let_go("t", [("a", 1)]);
        assert_eq!(leases.len(), 1);
        leases.let_go("t", [("a", 2)]);
        leases.let_go("other", [("a", 2)]);
        assert_eq!(leases.len(), 0);
    }

    #[test]
    fn the_task_looks_a_quarter_margin_apart_within_bounds() {
        let leases = Leases::default();
        assert_eq!(leases.tick(), Duration::from_secs(1));
        leases.hold(&keys(), [("a", 1)], 0, Duration::from_millis(200));
        assert_eq!(leases.tick(), Duration::from_millis(50));
        leases.hold(&keys(), [("a", 1)], 0, Duration::from_millis(20));
        assert_eq!(leases.tick(), Duration::from_millis(25));
    }
}
