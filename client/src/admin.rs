//! What operators do to jobs and topics: cancel, dead-letter list, retry and
//! purge, pause and resume. One script each; listing is a read-only pipeline.

use std::time::Duration;

use redis::Value;

use super::reply::{number, optional_string};
use super::{DeadInfo, EndState, JobEnd, Queue, QueueError, TopicKeys, scripts};

/// Most dead letters a `retry` or `purge` without ids handles per script call.
pub const DEAD_BATCH: usize = 1000;

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

impl Queue {
    /// Delete jobs wherever they are; per id, where it was (`None`: no such job).
    /// On a topic that keeps results (`keep`), each cancelled job's end
    /// (`cancelled`, at `now_ms`) is kept that long and announced to its
    /// waiters.
    pub async fn cancel(
        &self,
        keys: &TopicKeys,
        ids: &[String],
        now_ms: u64,
        keep: Option<Duration>,
    ) -> Result<Vec<Option<Cancelled>>, QueueError> {
        let mut inv = scripts::CANCEL.prepare_invoke();
        inv.key(&keys.pending)
            .key(&keys.lease)
            .key(&keys.job)
            .key(&keys.attempt)
            .key(&keys.error)
            .key(&keys.dead)
            .key(&keys.dead_info)
            .key(&keys.account)
            .key(&keys.progress)
            .key(&keys.legacy_pending);
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
        let reply: Vec<String> = self.invoke_durable(&inv).await?;
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

    /// Up to `limit` dead letters, newest first, skipping `offset`.
    pub async fn dead_list(
        &self,
        keys: &TopicKeys,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<(String, DeadInfo)>, QueueError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(&keys.dead)
            .arg(offset)
            .arg(offset + limit - 1)
            .query_async(&mut self.conn.clone())
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let infos: Vec<Value> = redis::cmd("HMGET")
            .arg(&keys.dead_info)
            .arg(&ids)
            .query_async(&mut self.conn.clone())
            .await?;
        ids.into_iter()
            .zip(infos)
            .filter_map(|(id, info)| match optional_string(&info) {
                Ok(Some(json)) => Some(
                    serde_json::from_str(&json)
                        .map(|info| (id.clone(), info))
                        .map_err(|e| {
                            QueueError::Protocol(format!("dead letter {id:?} is not readable: {e}"))
                        }),
                ),
                Ok(None) => None, // purged between the two reads
                Err(e) => Some(Err(e)),
            })
            .collect()
    }

    /// Requeue dead letters (due now, attempts reset): these ids, or when
    /// `ids` is empty the oldest [`DEAD_BATCH`]. Returns the ids requeued.
    pub async fn dead_retry(
        &self,
        keys: &TopicKeys,
        ids: &[String],
        now_ms: u64,
    ) -> Result<Vec<String>, QueueError> {
        let mut inv = self.dead_retry_call(keys, now_ms, 1);
        for id in ids {
            inv.arg(id);
        }
        self.invoke_durable(&inv).await
    }

    /// `dead_retry.lua` with its keys and leading arguments; ids (stride 1)
    /// or id and record pairs (stride 2) follow.
    fn dead_retry_call(
        &self,
        keys: &TopicKeys,
        now_ms: u64,
        stride: u8,
    ) -> redis::ScriptInvocation<'static> {
        let mut inv = scripts::DEAD_RETRY.prepare_invoke();
        inv.key(&keys.dead)
            .key(&keys.dead_info)
            .key(&keys.pending)
            .key(&keys.job)
            .key(&keys.attempt)
            .key(&keys.error);
        self.wake_args(&mut inv, keys);
        inv.arg(now_ms).arg(DEAD_BATCH).arg(stride);
        inv
    }

    /// [`Queue::dead_retry`] pinning each job to handler `version` (replay on
    /// a chosen version): these ids, or when `ids` is empty the oldest
    /// [`DEAD_BATCH`]. A dead letter whose record cannot be read is requeued
    /// unchanged, as [`Queue::dead_retry`] does. Returns the ids requeued.
    pub async fn dead_retry_on(
        &self,
        keys: &TopicKeys,
        ids: &[String],
        version: &str,
        now_ms: u64,
    ) -> Result<Vec<String>, QueueError> {
        crate::record::check_version(version).map_err(QueueError::Invalid)?;
        let ids: Vec<String> = if ids.is_empty() {
            redis::cmd("ZRANGE")
                .arg(&keys.dead)
                .arg(0)
                .arg(DEAD_BATCH - 1)
                .query_async(&mut self.conn.clone())
                .await?
        } else {
            ids.to_vec()
        };
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let stored: Vec<Value> = redis::cmd("HMGET")
            .arg(&keys.job)
            .arg(&ids)
            .query_async(&mut self.conn.clone())
            .await?;
        let mut inv = self.dead_retry_call(keys, now_ms, 2);
        for (id, stored) in ids.iter().zip(&stored) {
            // a record that cannot be read (or is gone) is handled as by
            // `dead_retry`: requeued unchanged (it dies again, saying why), or dropped
            let pinned = match stored {
                Value::BulkString(bytes) => {
                    crate::Record::decode(crate::record::split_stored(bytes).1)
                        .ok()
                        .map(|mut r| {
                            r.version = Some(version.to_owned());
                            r.encode()
                        })
                }
                _ => None,
            };
            inv.arg(id).arg(pinned.unwrap_or_default());
        }
        self.invoke_durable(&inv).await
    }

    /// Delete dead letters and their payloads: these ids, or when `ids` is
    /// empty the oldest [`DEAD_BATCH`]. Returns the ids deleted.
    pub async fn dead_purge(
        &self,
        keys: &TopicKeys,
        ids: &[String],
    ) -> Result<Vec<String>, QueueError> {
        let mut inv = scripts::DEAD_PURGE.prepare_invoke();
        inv.key(&keys.dead)
            .key(&keys.dead_info)
            .key(&keys.job)
            .key(&keys.account);
        inv.arg(DEAD_BATCH);
        for id in ids {
            inv.arg(id);
        }
        self.invoke_durable(&inv).await
    }

    /// Pause (`true`) or resume a topic; whether that changed anything.
    pub async fn set_paused(&self, keys: &TopicKeys, paused: bool) -> Result<bool, QueueError> {
        let mut inv = scripts::PAUSE.prepare_invoke();
        inv.key(&keys.paused).key(&keys.pending);
        self.wake_args(&mut inv, keys);
        inv.arg(if paused { "1" } else { "0" });
        let changed: Value = inv.invoke_async(&mut self.conn.clone()).await?;
        Ok(number(&changed)? == 1)
    }

    /// Whether a topic is paused.
    pub async fn is_paused(&self, keys: &TopicKeys) -> Result<bool, QueueError> {
        let v: Value = redis::cmd("EXISTS")
            .arg(&keys.paused)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(number(&v)? == 1)
    }

    /// The last fire time schedule `name` enqueued or passed over (ms), if it ever ran.
    pub async fn schedule_cursor(
        &self,
        keys: &TopicKeys,
        name: &str,
    ) -> Result<Option<u64>, QueueError> {
        let v: Option<u64> = redis::cmd("GET")
            .arg(keys.schedule(name))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(v)
    }

    /// Move schedule `name`'s cursor forward to `tick_ms` (never back).
    pub async fn advance_schedule(
        &self,
        keys: &TopicKeys,
        name: &str,
        tick_ms: u64,
    ) -> Result<(), QueueError> {
        let _: Value = scripts::SCHEDULE_ADVANCE
            .key(keys.schedule(name))
            .arg(tick_ms)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

impl Queue {
    /// The server's `maxmemory-policy` (from `INFO memory`; on a cluster, one
    /// node's), if it says. Anything but `noeviction` lets Redis delete job
    /// keys under memory pressure.
    pub async fn eviction_policy(&self) -> Result<Option<String>, QueueError> {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix("maxmemory_policy:"))
            .map(|p| p.trim().to_owned()))
    }
}
