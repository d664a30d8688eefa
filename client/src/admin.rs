//! What operators do to jobs and topics, as the [`Admin`] handle: cancel
//! (`cancel.lua`), pause and resume (`pause.lua`), and the server's eviction
//! policy. Dead letters have a handle of their own (`dead.rs`).

use std::time::Duration;

use redis::Value;

use super::reply::number;
use super::{EndState, JobEnd, Queue, QueueError, TopicKeys, scripts};

/// Where a cancelled job was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// Waiting (scheduled or ready).
    Pending,
    /// Running: the attempt finishes, its outcome is discarded.
    Running,
    /// In the dead-letter set.
    Dead,
}

/// What operators do to jobs and topics ([`Queue::admin`]).
#[derive(Clone, Copy)]
pub struct Admin<'q> {
    pub(crate) q: &'q Queue,
}

impl Admin<'_> {
    /// Delete jobs wherever they are; per id, where it was (`None`: no such job).
    /// On a topic that keeps results (`keep`), each cancelled job's end
    /// (`cancelled`, at `now_ms`) is kept that long and announced to its
    /// waiters.
    pub async fn cancel(
        self,
        keys: &TopicKeys,
        ids: &[String],
        now_ms: u64,
        keep: Option<Duration>,
    ) -> Result<Vec<Option<Cancelled>>, QueueError> {
        let mut inv = scripts::CANCEL.on(keys);
        if keep.is_some() {
            for id in ids {
                inv.key(keys.result(id));
            }
        }
        let end = JobEnd {
            state: EndState::Cancelled,
            result: None,
            reason: Some("cancelled by an operator".into()),
            version: None,
            attempts: 0,
            at_ms: now_ms,
        };
        inv.arg(crate::results::keep_ms(keep))
            .arg(&keys.events)
            .arg(end.encode());
        for id in ids {
            inv.arg(id);
        }
        let reply: Vec<String> = self.q.invoke_durable(&inv).await?;
        reply
            .iter()
            .map(|was| match was.as_str() {
                "pending" => Ok(Some(Cancelled::Pending)),
                "running" => Ok(Some(Cancelled::Running)),
                "dead" => Ok(Some(Cancelled::Dead)),
                "" => Ok(None),
                other => Err(QueueError::Protocol(format!("cancel answered {other:?}"))),
            })
            .collect()
    }

    /// Pause (`true`) or resume a topic; whether that changed anything.
    pub async fn set_paused(self, keys: &TopicKeys, paused: bool) -> Result<bool, QueueError> {
        let mut inv = scripts::PAUSE.on(keys);
        self.q.wake_args(&mut inv, keys);
        inv.arg(if paused { "1" } else { "0" });
        let changed: Value = inv.invoke_async(&mut self.q.conn.clone()).await?;
        Ok(number(&changed)? == 1)
    }

    /// Whether a topic is paused.
    pub async fn is_paused(self, keys: &TopicKeys) -> Result<bool, QueueError> {
        let v: Value = redis::cmd("EXISTS")
            .arg(&keys.paused)
            .query_async(&mut self.q.conn.clone())
            .await?;
        Ok(number(&v)? == 1)
    }

    /// The server's `maxmemory-policy` (from `INFO memory`; on a cluster, one
    /// node's), if it says. Anything but `noeviction` lets Redis delete job
    /// keys under memory pressure.
    pub async fn eviction_policy(self) -> Result<Option<String>, QueueError> {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut self.q.conn.clone())
            .await?;
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix("maxmemory_policy:"))
            .map(|p| p.trim().to_owned()))
    }
}
