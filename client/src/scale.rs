//! What an autoscaler reads (`scale.lua`, one call a topic that changes
//! nothing): a topic's [`Load`] (jobs ready now, the oldest one's age,
//! running, suspended, due within a horizon, paused), and how many runners
//! it takes ([`suggest`]) from a runner's concurrency for the topic and the
//! recent time of an attempt.

use super::{Queue, QueueError, TopicKeys, scripts};

/// How far ahead an autoscaler looks: jobs due within the next minute count
/// as work to have runners for.
pub const HORIZON_MS: u64 = 60_000;

/// One topic's load as Redis holds it ([`Queue::load`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Load {
    /// Jobs due by now, not running (on the time index, or queued per tenant key).
    pub ready: u64,
    /// How long the oldest ready job on the time index has been due, ms (none when
    /// nothing is ready there; jobs queued per tenant key are not aged).
    pub oldest_ready_age_ms: Option<u64>,
    /// Jobs leased to a runner.
    pub running: u64,
    /// Durable handlers' jobs asleep or waiting for a signal.
    pub suspended: u64,
    /// Jobs due after now and within the horizon (the next minute), suspended
    /// jobs waking then included.
    pub due_soon: u64,
    /// Claims nothing until resumed (its ready jobs need no runner).
    pub paused: bool,
}

impl Queue {
    /// The topic's [`Load`] at `now_ms`, looking `horizon_ms` ahead: one
    /// script call. Its cost in Redis is a few O(log n) reads plus one
    /// `ZCARD` or `ZCOUNT` per bucket of the time index (about 48 jobs
    /// each) due by `now_ms + horizon_ms` (`lua/scale.lua`).
    pub async fn load(
        &self,
        keys: &TopicKeys,
        now_ms: u64,
        horizon_ms: u64,
    ) -> Result<Load, QueueError> {
        let (ready, oldest, running, suspended, due_soon, paused): (u64, i64, u64, u64, u64, bool) =
            scripts::SCALE
                .on(keys)
                .arg(now_ms)
                .arg(horizon_ms)
                .invoke_async(&mut self.conn.clone())
                .await?;
        Ok(Load {
            ready,
            oldest_ready_age_ms: u64::try_from(oldest)
                .ok()
                .map(|due| now_ms.saturating_sub(due)),
            running,
            suspended,
            due_soon,
            paused,
        })
    }
}

/// What one runner offers a topic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// Attempts of the topic one runner runs at once (its `concurrency`,
    /// within the runner's).
    pub concurrency: u32,
    /// The topic's rate limit in starts per second across all runners, if it has one.
    pub rate_per_s: Option<f64>,
}

/// Runners needed for `load` within the horizon: the running jobs, and
/// the ready and soon-due ones that may start (none while paused; no more
/// than a rate allows), each taking a slot for `attempt_us` (the recent
/// mean time of an attempt), a runner offering `capacity.concurrency`
/// slots for `horizon_ms`. A slot runs `horizon / attempt` jobs in the
/// horizon, and at least one (an attempt longer than the horizon still
/// starts in it). Without a measured attempt time (no runner has run the
/// topic lately: scaled to zero) any work asks for one runner, whose
/// attempts then give the time. No work, no runner.
pub fn suggest(load: &Load, capacity: Capacity, attempt_us: Option<u64>, horizon_ms: u64) -> u32 {
    match slots(load, capacity, attempt_us, horizon_ms) {
        Some(slots) => runners_for(slots, capacity.concurrency),
        // unmeasured work: one runner, whose attempts then give the time
        None => 1,
    }
}

/// The slots `load` keeps busy on average over the horizon (fractions of
/// one count): what [`suggest`] divides by a runner's concurrency, exposed
/// so several topics' needs can be summed against a runner's shared
/// concurrency. None for work whose attempt time is not known.
pub fn slots(
    load: &Load,
    capacity: Capacity,
    attempt_us: Option<u64>,
    horizon_ms: u64,
) -> Option<f64> {
    let mut startable = if load.paused {
        0
    } else {
        load.ready + load.due_soon
    };
    if let Some(rate) = capacity.rate_per_s {
        let most = (rate * horizon_ms as f64 / 1000.0).ceil() as u64;
        startable = startable.min(most);
    }
    let jobs = load.running + startable;
    if jobs == 0 {
        return Some(0.0);
    }
    let per_slot = (horizon_ms as f64 * 1000.0 / attempt_us?.max(1) as f64).max(1.0);
    Some(jobs as f64 / per_slot)
}

/// Runners of `concurrency` slots each for `slots` busy slots.
pub fn runners_for(slots: f64, concurrency: u32) -> u32 {
    if slots <= 0.0 {
        return 0;
    }
    let runners = (slots / f64::from(concurrency.max(1))).ceil();
    (runners as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Capacity = Capacity {
        concurrency: 10,
        rate_per_s: None,
    };

    fn load(ready: u64, running: u64, due_soon: u64) -> Load {
        Load {
            ready,
            running,
            due_soon,
            ..Load::default()
        }
    }

    #[test]
    fn no_work_no_runner_and_unmeasured_work_one() {
        assert_eq!(suggest(&load(0, 0, 0), C, Some(1000), HORIZON_MS), 0);
        assert_eq!(suggest(&load(0, 0, 0), C, None, HORIZON_MS), 0);
        assert_eq!(suggest(&load(5000, 0, 0), C, None, HORIZON_MS), 1);
        assert_eq!(suggest(&load(0, 0, 1), C, None, HORIZON_MS), 1);
        assert_eq!(slots(&load(5000, 0, 0), C, None, HORIZON_MS), None);
    }

    #[test]
    fn slots_are_jobs_times_their_time_over_the_horizon() {
        // 1,200 jobs of 1 s in a minute: 20 busy slots, two runners of ten
        assert_eq!(
            slots(&load(1000, 100, 100), C, Some(1_000_000), HORIZON_MS),
            Some(20.0)
        );
        assert_eq!(
            suggest(&load(1000, 100, 100), C, Some(1_000_000), HORIZON_MS),
            2
        );
        // one more job: a third runner
        assert_eq!(
            suggest(&load(1001, 100, 100), C, Some(1_000_000), HORIZON_MS),
            3
        );
        // quick jobs: a million of 1 ms is about 17 slots
        assert_eq!(
            suggest(&load(1_000_000, 0, 0), C, Some(1000), HORIZON_MS),
            2
        );
        // attempts longer than the horizon: a slot each
        assert_eq!(
            suggest(&load(25, 0, 0), C, Some(600_000_000), HORIZON_MS),
            3
        );
    }

    #[test]
    fn a_paused_topic_counts_only_what_runs_and_a_rate_caps_the_starts() {
        let paused = Load {
            paused: true,
            ..load(5000, 10, 50)
        };
        assert_eq!(slots(&paused, C, Some(60_000_000), HORIZON_MS), Some(10.0));
        let rated = Capacity {
            concurrency: 10,
            rate_per_s: Some(1.0),
        };
        // 60 starts in the minute at most, each 60 s long: 60 slots, not 5,000
        assert_eq!(
            suggest(&load(5000, 0, 0), rated, Some(60_000_000), HORIZON_MS),
            6
        );
    }
}
