//! The flows' counts for `/metrics`, in `<ns>:flows:stats` (a slot of its
//! own): `created` when a flow is created, `completed` or `failed` when its
//! last job ends (as `flow_end.lua` and `flow_cancel.lua` say, once per
//! flow), `reopened` when a dead job of a finished flow is retried and the
//! flow runs again (it finishes once more). Open flows: created + reopened
//! − completed − failed.

use crate::{Flows, QueueError};

impl Flows<'_> {
    /// Count a flow's end as `flow_end.lua`'s `flags` say (2 completed, 4
    /// failed, 8 reopened: a dead job revived).
    pub(super) async fn count_end(self, flags: u64) -> Result<(), QueueError> {
        for (bit, field, by) in [(2, "completed", 1), (4, "failed", 1), (8, "reopened", 1)] {
            if flags & bit != 0 {
                self.count(field, by).await?;
            }
        }
        Ok(())
    }

    /// Add `by` to the flows' count `field` (`/metrics`).
    pub(super) async fn count(self, field: &str, by: i64) -> Result<(), QueueError> {
        let _: i64 = redis::cmd("HINCRBY")
            .arg(crate::keys::flows_stats(&self.q.namespace))
            .arg(field)
            .arg(by)
            .query_async(&mut self.q.conn.clone())
            .await?;
        Ok(())
    }

    /// The flows' counts since the namespace was new.
    pub async fn stats(self) -> Result<FlowStats, QueueError> {
        let v: Vec<Option<u64>> = redis::cmd("HMGET")
            .arg(crate::keys::flows_stats(&self.q.namespace))
            .arg(&["created", "completed", "failed", "reopened"])
            .query_async(&mut self.q.conn.clone())
            .await?;
        let at = |i: usize| v.get(i).copied().flatten().unwrap_or(0);
        Ok(FlowStats {
            created: at(0),
            completed: at(1),
            failed: at(2),
            reopened: at(3),
        })
    }
}

/// The flows' counts ([`Flows::stats`]); batches count as flows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Flows created.
    pub created: u64,
    /// Flows finished with every job acked.
    pub completed: u64,
    /// Flows finished with a job dead, or cancelled.
    pub failed: u64,
    /// Finished flows that ran again (a dead job retried).
    pub reopened: u64,
}

impl FlowStats {
    /// Flows not finished.
    pub fn open(&self) -> u64 {
        (self.created + self.reopened).saturating_sub(self.completed + self.failed)
    }
}
