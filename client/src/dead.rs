//! A topic's dead letters, as the [`DeadLetters`] handle: list them
//! (newest first), retry them (`dead_retry.lua`, on a kept version if
//! asked), purge them (`dead_purge.lua`), read one.

use redis::Value;

use super::reply::optional_string;
use super::{DeadInfo, JobState, Queue, QueueError, TopicKeys, scripts};

/// Most dead letters a `retry` or `purge` without ids handles per script call.
pub const DEAD_BATCH: usize = 1000;

/// A topic's dead letters ([`Queue::dead`]).
#[derive(Clone, Copy)]
pub struct DeadLetters<'q> {
    pub(crate) q: &'q Queue,
}

impl Queue {
    /// A topic's dead letters: list, retry (on a kept version), purge.
    pub fn dead(&self) -> DeadLetters<'_> {
        DeadLetters { q: self }
    }
}

impl DeadLetters<'_> {
    /// Up to `limit` dead letters, newest first, skipping `offset`.
    pub async fn list(
        self,
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
            .query_async(&mut self.q.conn.clone())
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let infos: Vec<Value> = redis::cmd("HMGET")
            .arg(&keys.dead_info)
            .arg(&ids)
            .query_async(&mut self.q.conn.clone())
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
    pub async fn retry(
        self,
        keys: &TopicKeys,
        ids: &[String],
        now_ms: u64,
    ) -> Result<Vec<String>, QueueError> {
        let mut inv = self.retry_call(keys, now_ms, 1);
        for id in ids {
            inv.arg(id);
        }
        self.q.invoke_durable(&inv).await
    }

    /// [`DeadLetters::retry`] dropping each job's journal (durable steps,
    /// effects): it starts afresh, on the version it is pinned to if any.
    /// Returns the ids requeued.
    pub async fn retry_afresh(
        self,
        keys: &TopicKeys,
        ids: &[String],
        now_ms: u64,
    ) -> Result<Vec<String>, QueueError> {
        let mut inv = self.retry_call(keys, now_ms, 3);
        for id in ids {
            inv.arg(id);
        }
        self.q.invoke_durable(&inv).await
    }

    /// `dead_retry.lua` with its keys and leading arguments; ids (stride 1,
    /// or 3 to drop their journals) or id and record pairs (stride 2) follow.
    fn retry_call(
        self,
        keys: &TopicKeys,
        now_ms: u64,
        stride: u8,
    ) -> redis::ScriptInvocation<'static> {
        let mut inv = scripts::DEAD_RETRY.on(keys);
        self.q.wake_args(&mut inv, keys);
        inv.arg(now_ms).arg(DEAD_BATCH).arg(stride);
        inv
    }

    /// [`DeadLetters::retry`] pinning each job to handler `version` (replay on
    /// a chosen version): these ids, or when `ids` is empty the oldest
    /// [`DEAD_BATCH`]. A dead letter whose record cannot be read is requeued
    /// unchanged, as [`DeadLetters::retry`] does. A job with a journal (a
    /// durable handler's) is refused unless `reset_journal`: its steps were
    /// recorded by the version it is pinned to; reset, it starts afresh.
    /// Returns the ids requeued.
    pub async fn retry_on(
        self,
        keys: &TopicKeys,
        ids: &[String],
        version: &str,
        reset_journal: bool,
        now_ms: u64,
    ) -> Result<Vec<String>, QueueError> {
        crate::record::check_version(version).map_err(QueueError::Invalid)?;
        let ids: Vec<String> = if ids.is_empty() {
            redis::cmd("ZRANGE")
                .arg(&keys.dead)
                .arg(0)
                .arg(DEAD_BATCH - 1)
                .query_async(&mut self.q.conn.clone())
                .await?
        } else {
            ids.to_vec()
        };
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        if !reset_journal {
            let journaled: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(&keys.journal)
                .arg(&ids)
                .query_async(&mut self.q.conn.clone())
                .await?;
            let with: Vec<&str> = ids
                .iter()
                .zip(&journaled)
                .filter(|(_, j)| j.is_some())
                .map(|(id, _)| id.as_str())
                .collect();
            if !with.is_empty() {
                return Err(QueueError::Invalid(format!(
                    "{} {} {} a journal of steps recorded by the version {} ran on: replayed on \
                     another version they would be handed to different code. Replay on the job's \
                     own version (without --version), or start afresh with --reset-journal (its \
                     steps run again)",
                    if with.len() == 1 { "job" } else { "jobs" },
                    with.join(", "),
                    if with.len() == 1 { "has" } else { "have" },
                    if with.len() == 1 { "it" } else { "they" },
                )));
            }
        }
        let stored: Vec<Value> = redis::cmd("HMGET")
            .arg(&keys.job)
            .arg(&ids)
            .query_async(&mut self.q.conn.clone())
            .await?;
        let mut inv = self.retry_call(keys, now_ms, 2);
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
        self.q.invoke_durable(&inv).await
    }

    /// Delete dead letters and their payloads: these ids, or when `ids` is
    /// empty the oldest [`DEAD_BATCH`]. Returns the ids deleted.
    pub async fn purge(self, keys: &TopicKeys, ids: &[String]) -> Result<Vec<String>, QueueError> {
        let mut inv = scripts::DEAD_PURGE.on(keys);
        inv.arg(DEAD_BATCH);
        for id in ids {
            inv.arg(id);
        }
        self.q.invoke_durable(&inv).await
    }

    /// The dead letter `id` of a topic, if there is one.
    pub async fn info(self, keys: &TopicKeys, id: &str) -> Result<Option<DeadInfo>, QueueError> {
        Ok(self
            .q
            .inspect(keys, id, 0)
            .await?
            .and_then(|view| match view.state {
                JobState::Dead(info) => Some(info),
                _ => None,
            }))
    }
}
