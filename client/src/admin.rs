//! What operators do to jobs and topics, as the [`Admin`] handle: cancel
//! (`cancel.lua`), pause and resume (`pause.lua`), and the server's eviction
//! policy. Dead letters have a handle of their own (`dead.rs`).

use std::time::Duration;

use redis::Value;

use super::flow::{FlowRef, Notice};
use super::reply::number;
use super::{EndState, JobEnd, Queue, QueueError, Record, TopicKeys, scripts};

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

impl Queue {
    /// What operators do to jobs and topics: cancel, pause and resume.
    pub fn admin(&self) -> Admin<'_> {
        Admin { q: self }
    }
}

impl Admin<'_> {
    /// Delete jobs wherever they are; per id, where it was (`None`: no such job).
    /// On a topic that keeps results (`keep`), each cancelled job's end
    /// (`cancelled`, at `now_ms`) is kept that long and announced to its
    /// waiters. A cancelled job of a flow is an end its flow is told of
    /// (right after, not in the same step: a cancel cut short by a lost
    /// connection is repaired by cancelling again).
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
            history: Vec::new(),
            logs: None,
        };
        let flows = self.flows_of(keys, ids).await?;
        inv.arg(crate::results::keep_ms(keep))
            .arg(&keys.events)
            .arg(end.encode())
            .arg(now_ms);
        for id in ids {
            inv.arg(id);
        }
        let reply: Vec<String> = self.q.invoke_durable(&inv).await?;
        let was: Vec<Option<Cancelled>> = reply
            .iter()
            .map(|was| match was.as_str() {
                "pending" => Ok(Some(Cancelled::Pending)),
                "running" => Ok(Some(Cancelled::Running)),
                "dead" => Ok(Some(Cancelled::Dead)),
                "" => Ok(None),
                other => Err(QueueError::Protocol(format!("cancel answered {other:?}"))),
            })
            .collect::<Result<_, _>>()?;
        let notices: Vec<Notice> = flows
            .into_iter()
            .zip(&was)
            .filter_map(|(flow, was)| {
                let job = flow?;
                was.as_ref()?;
                Some(Notice {
                    job,
                    end: end.clone(),
                })
            })
            .collect();
        if !notices.is_empty() {
            let notices: Vec<&Notice> = notices.iter().collect();
            Box::pin(self.q.flows().end(&notices, now_ms)).await?;
        }
        Ok(was)
    }

    /// Per id, the flow the job belongs to, if any. Only ids of the form a
    /// flow gives its jobs (`<flow>/<name>`) are read.
    async fn flows_of(
        self,
        keys: &TopicKeys,
        ids: &[String],
    ) -> Result<Vec<Option<FlowRef>>, QueueError> {
        if !ids.iter().any(|id| id.contains('/')) {
            return Ok(vec![None; ids.len()]);
        }
        let values: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(&keys.job)
            .arg(ids)
            .query_async(&mut self.q.conn.clone())
            .await?;
        Ok(values
            .into_iter()
            .map(|v| {
                let v = v?;
                let (_, record) = crate::record::split_stored(&v);
                Record::decode(record).ok()?.flow
            })
            .collect())
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
