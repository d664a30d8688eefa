//! The flows' counts for `/metrics`, in `<ns>:flows:stats` (a slot of its
//! own): `created` when a flow is created, `completed` or `failed` when its
//! last job ends (as `flow_end.lua` and `flow_cancel.lua` say, once per
//! flow), `reopened` when a dead job of a finished flow is retried and the
//! flow runs again (it finishes once more). Open flows: created + reopened
//! − completed − failed.

use serde::Serialize;

use crate::{Flows, QueueError};

/// Flows the recent list keeps: the newest created.
pub const RECENT_FLOWS: usize = 1000;

/// A recent flow, as the list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecentFlow {
    /// Its id.
    pub id: String,
    /// When it was created (ms).
    pub created_ms: u64,
    /// Its jobs (a batch's callbacks among them); null once it is gone
    /// (finished flows are kept 7 days).
    pub jobs: Option<u64>,
    /// Of them, ended.
    pub ended: u64,
    /// Of them, dead-lettered (or cancelled).
    pub dead: u64,
    /// When its last job ended (ms), if all have.
    pub done_ms: Option<u64>,
    /// When it was cancelled (ms), if it was.
    pub cancelled_ms: Option<u64>,
}

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

    /// Count a flow created at `now_ms` and list it among the recent ones
    /// (one pipeline, in the slot of the counts: the list keeps the newest
    /// [`RECENT_FLOWS`]).
    pub(super) async fn created(self, id: &str, now_ms: u64) -> Result<(), QueueError> {
        let recent = crate::keys::flows_recent(&self.q.namespace);
        let _: () = redis::pipe()
            .hincr(crate::keys::flows_stats(&self.q.namespace), "created", 1)
            .ignore()
            .zadd(&recent, id, now_ms)
            .ignore()
            .cmd("ZREMRANGEBYRANK")
            .arg(&recent)
            .arg(0)
            .arg(-(RECENT_FLOWS as i64) - 1)
            .ignore()
            .query_async(&mut self.q.conn.clone())
            .await?;
        Ok(())
    }

    /// The most recent flows created before `before_ms` (all when `None`),
    /// newest first, at most `limit`, with how far each got.
    pub async fn recent(
        self,
        before_ms: Option<u64>,
        limit: usize,
    ) -> Result<Vec<RecentFlow>, QueueError> {
        let top = before_ms.map_or("+inf".to_owned(), |b| format!("({b}"));
        let listed: Vec<(String, f64)> = redis::cmd("ZREVRANGEBYSCORE")
            .arg(crate::keys::flows_recent(&self.q.namespace))
            .arg(top)
            .arg("-inf")
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut self.q.conn.clone())
            .await?;
        let mut pipe = redis::pipe();
        for (id, _) in &listed {
            pipe.cmd("HMGET").arg(self.keys(id).flow).arg(&[
                "n",
                "ended",
                "dead",
                "done",
                "cancelled",
            ]);
        }
        let heads: Vec<Vec<Option<u64>>> = if listed.is_empty() {
            Vec::new()
        } else {
            pipe.query_async(&mut self.q.conn.clone()).await?
        };
        Ok(listed
            .into_iter()
            .zip(heads)
            .map(|((id, created), h)| RecentFlow {
                id,
                created_ms: created as u64,
                jobs: h.first().copied().flatten(),
                ended: h.get(1).copied().flatten().unwrap_or(0),
                dead: h.get(2).copied().flatten().unwrap_or(0),
                done_ms: h.get(3).copied().flatten(),
                cancelled_ms: h.get(4).copied().flatten(),
            })
            .collect())
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
