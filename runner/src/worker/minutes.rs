//! This runner's part of each topic's history by the minute
//! (`hourglass_client` `minutes.rs`): with every heartbeat it adds what its
//! topics did since the last one (the meter's totals, less what it added
//! before); once a minute it claims the topics whose counts no other runner
//! took yet and takes theirs. A write that fails is tried again with the
//! next heartbeat (nothing is lost but what a SIGKILL leaves unwritten).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Shared, Topic};
use crate::redis::MinuteSums;

/// What this runner has added to the history so far.
#[derive(Default)]
pub(super) struct Minutes {
    added: BTreeMap<String, MinuteSums>,
    /// The last minute (Unix minutes) whose counts it looked after.
    counted: u64,
}

impl Minutes {
    /// Add what `topics` did since the last call, and take the counts of
    /// those this runner claims in this minute.
    pub async fn flush(&mut self, shared: &Shared, topics: &[Arc<Topic>], now: u64) {
        let totals = shared.meter.totals();
        let deltas: BTreeMap<String, MinuteSums> = totals
            .iter()
            .map(|(topic, t)| {
                let before = self.added.get(topic).cloned().unwrap_or_default();
                let mut late = [0; 14];
                for (i, n) in late.iter_mut().enumerate() {
                    *n = t.late[i].saturating_sub(before.late[i]);
                }
                let delta = MinuteSums {
                    acked: t.acked.saturating_sub(before.acked),
                    failed: t.failed.saturating_sub(before.failed),
                    dead: t.dead.saturating_sub(before.dead),
                    cpu_us: t.cpu_us.saturating_sub(before.cpu_us),
                    late,
                };
                (topic.clone(), delta)
            })
            .collect();
        let runners = shared.queue.runners();
        match runners.add_minutes(&deltas, now).await {
            Ok(()) => self.added = totals,
            Err(e) => tracing::debug!("history by the minute not written: {e}"),
        }
        let minute = now / 60_000;
        if minute == self.counted || topics.is_empty() {
            return;
        }
        self.counted = minute;
        let names: Vec<String> = topics.iter().map(|t| t.cfg.name.clone()).collect();
        let mine = match runners.claim_counts(&names, &shared.runner_id, now).await {
            Ok(mine) => mine,
            Err(e) => {
                tracing::debug!("minute's counts not claimed: {e}");
                return;
            }
        };
        let q = &shared.queue;
        let counted = futures::future::join_all(
            mine.iter()
                .map(|t| async move { q.stats(&q.keys(t), now).await.map(|s| (t.clone(), s)) }),
        )
        .await;
        let counts: Vec<_> = counted.into_iter().filter_map(Result::ok).collect();
        if let Err(e) = runners.add_counts(&counts, now).await {
            tracing::debug!("minute's counts not written: {e}");
        }
    }
}
