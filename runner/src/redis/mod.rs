//! The Redis pipeline: the only module that talks to Redis.
//!
//! A job's life is a handful of atomic state changes, each one Lua script in
//! `runner/lua/` touching only keys of its topic (passed in KEYS, all with the
//! topic's hash tag): enqueue → (pending) → claim → (leased) → ack | retry →
//! (pending) | bury → (dead). Expired leases are requeued, leases of a runner
//! shutting down are released. Scores are milliseconds; every function takes
//! `now_ms` from its caller so tests control the clock.

pub mod embedded;
pub mod keys;
pub mod record;
mod scripts;

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Value};

pub use keys::{TopicKeys, wake_channel};
pub use record::{CorruptRecord, Record};

/// A Redis failure; every one of them is retryable by the caller.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The connection or the server failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A script answered something this version does not understand.
    #[error("unexpected reply from redis: {0}")]
    Protocol(String),
}

/// A job to enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// The caller's id, or `None` for a generated one.
    pub id: Option<String>,
    /// The bytes the handler receives.
    pub payload: Vec<u8>,
    /// Not before this (ms since the Unix epoch).
    pub due_at_ms: u64,
    /// Attempts; 0 for the topic's default.
    pub max_attempts: u32,
}

/// What happened to one [`NewJob`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// Accepted under this id.
    New(String),
    /// A live job already has this id: nothing was changed.
    Duplicate(String),
}

impl Enqueued {
    /// The job's id.
    pub fn id(&self) -> &str {
        match self {
            Enqueued::New(id) | Enqueued::Duplicate(id) => id,
        }
    }
}

/// One claimed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedJob {
    /// The job's id.
    pub id: String,
    /// When this attempt became due.
    pub due_at_ms: u64,
    /// 1-based; also the lease's fencing token.
    pub attempt: u32,
    /// The stored record, or why it could not be read.
    pub record: Result<Record, CorruptRecord>,
    /// The error of the previous attempt, if any.
    pub last_error: Option<String>,
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The attempts now leased to the caller.
    pub jobs: Vec<ClaimedJob>,
    /// When the first job still pending is due, if any is.
    pub next_due_ms: Option<u64>,
}

/// Counts for one topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TopicStats {
    /// Pending, due later.
    pub scheduled: u64,
    /// Pending, due now.
    pub ready: u64,
    /// Leased to a runner.
    pub running: u64,
    /// In the dead-letter set.
    pub dead: u64,
}

/// A dead-lettered job's record of why, stored as JSON.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeadInfo {
    /// Why the job was given up.
    pub reason: String,
    /// Attempts made.
    pub attempts: u32,
    /// When (ms since the Unix epoch).
    pub failed_at_ms: u64,
}

/// A connection to the pipeline of one namespace.
#[derive(Clone)]
pub struct Queue {
    client: redis::Client,
    conn: ConnectionManager,
    namespace: String,
    wake: String,
}

impl Queue {
    /// Connect to `url` (redis://, rediss://, unix://); reconnects by itself afterwards.
    pub async fn connect(url: &str, namespace: &str) -> Result<Queue, QueueError> {
        let client = redis::Client::open(url)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(10)))
            .set_max_delay(Duration::from_secs(2))
            .set_number_of_retries(3);
        let conn = client.get_connection_manager_with_config(config).await?;
        Ok(Queue {
            client,
            conn,
            namespace: namespace.to_owned(),
            wake: wake_channel(namespace),
        })
    }

    /// The keys of `topic`.
    pub fn keys(&self, topic: &str) -> TopicKeys {
        TopicKeys::new(&self.namespace, topic)
    }

    /// The channel carrying "a job became due earlier" messages.
    pub fn wake_channel(&self) -> &str {
        &self.wake
    }

    /// A dedicated pub/sub connection (one per subscriber).
    pub async fn pubsub(&self) -> Result<redis::aio::PubSub, QueueError> {
        Ok(self.client.get_async_pubsub().await?)
    }

    /// Enqueue `jobs` into one topic in one atomic step.
    pub async fn enqueue(
        &self,
        keys: &TopicKeys,
        jobs: &[NewJob],
        now_ms: u64,
    ) -> Result<Vec<Enqueued>, QueueError> {
        let mut out = Vec::with_capacity(jobs.len());
        // keep each call's ARGV well inside Lua's unpack limits and Redis' argument buffer
        for chunk in jobs.chunks(1000) {
            let mut inv = scripts::ENQUEUE.prepare_invoke();
            inv.key(&keys.pending)
                .key(&keys.job)
                .key(&keys.dead)
                .key(&keys.dead_info)
                .key(&keys.seq);
            inv.arg(&self.wake).arg(&keys.topic);
            for job in chunk {
                let record = Record {
                    max_attempts: job.max_attempts,
                    enqueued_at_ms: now_ms,
                    payload: job.payload.clone(),
                };
                inv.arg(job.id.as_deref().unwrap_or(""))
                    .arg(job.due_at_ms)
                    .arg(record.encode());
            }
            let reply: Vec<Value> = inv.invoke_async(&mut self.conn.clone()).await?;
            for pair in reply.chunks(2) {
                match pair {
                    [id, Value::Int(1)] => out.push(Enqueued::New(string(id)?)),
                    [id, Value::Int(0)] => out.push(Enqueued::Duplicate(string(id)?)),
                    other => {
                        return Err(QueueError::Protocol(format!("enqueue answered {other:?}")));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Lease up to `limit` jobs due by `now_ms` until `lease_until_ms`.
    pub async fn claim(
        &self,
        keys: &TopicKeys,
        now_ms: u64,
        lease_until_ms: u64,
        limit: usize,
    ) -> Result<Claimed, QueueError> {
        let reply: Vec<Value> = scripts::CLAIM
            .key(&keys.pending)
            .key(&keys.lease)
            .key(&keys.job)
            .key(&keys.attempt)
            .key(&keys.error)
            .arg(now_ms)
            .arg(lease_until_ms)
            .arg(limit)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let (head, rest) = reply
            .split_first()
            .ok_or_else(|| QueueError::Protocol("empty claim reply".into()))?;
        let next_due_ms = match head {
            Value::Int(_) => None,
            v => Some(number(v)?),
        };
        let mut jobs = Vec::with_capacity(rest.len() / 5);
        for job in rest.chunks(5) {
            let [id, due, attempt, record, error] = job else {
                return Err(QueueError::Protocol(format!("claim answered {job:?}")));
            };
            jobs.push(ClaimedJob {
                id: string(id)?,
                due_at_ms: number(due)?,
                attempt: u32::try_from(number(attempt)?).unwrap_or(u32::MAX),
                record: Record::decode(&bytes(record)?),
                last_error: match error {
                    Value::Nil => None,
                    v => Some(string(v)?),
                },
            });
        }
        Ok(Claimed { jobs, next_due_ms })
    }

    /// Delete finished jobs; `done` holds (id, attempt). Returns the ids left
    /// alone because a newer attempt owns them (their lease had expired).
    pub async fn ack(
        &self,
        keys: &TopicKeys,
        done: &[(String, u32)],
    ) -> Result<Vec<String>, QueueError> {
        let mut inv = scripts::ACK.prepare_invoke();
        inv.key(&keys.lease)
            .key(&keys.pending)
            .key(&keys.job)
            .key(&keys.attempt)
            .key(&keys.error);
        for (id, attempt) in done {
            inv.arg(id).arg(attempt);
        }
        Ok(inv.invoke_async(&mut self.conn.clone()).await?)
    }

    /// Schedule next attempts; `failed` holds (id, attempt, next due ms, error).
    pub async fn retry(
        &self,
        keys: &TopicKeys,
        failed: &[(String, u32, u64, String)],
    ) -> Result<Vec<String>, QueueError> {
        let mut inv = scripts::RETRY.prepare_invoke();
        inv.key(&keys.lease)
            .key(&keys.pending)
            .key(&keys.attempt)
            .key(&keys.error);
        inv.arg(&self.wake).arg(&keys.topic);
        for (id, attempt, due, error) in failed {
            inv.arg(id).arg(attempt).arg(due).arg(error);
        }
        Ok(inv.invoke_async(&mut self.conn.clone()).await?)
    }

    /// Dead-letter jobs; `dead` holds (id, attempt, why). Enforces `retention`.
    /// Returns the ids left alone because a newer attempt owns them.
    pub async fn bury(
        &self,
        keys: &TopicKeys,
        dead: &[(String, u32, DeadInfo)],
        retention: crate::config::DeadLetter,
        now_ms: u64,
    ) -> Result<Vec<String>, QueueError> {
        let mut inv = scripts::BURY.prepare_invoke();
        inv.key(&keys.lease)
            .key(&keys.pending)
            .key(&keys.job)
            .key(&keys.attempt)
            .key(&keys.error)
            .key(&keys.dead)
            .key(&keys.dead_info);
        let oldest =
            now_ms.saturating_sub(u64::try_from(retention.max_age.as_millis()).unwrap_or(u64::MAX));
        inv.arg(now_ms).arg(retention.keep).arg(oldest);
        for (id, attempt, info) in dead {
            let json = serde_json::to_string(info).expect("dead info serializes");
            inv.arg(id).arg(attempt).arg(json);
        }
        Ok(inv.invoke_async(&mut self.conn.clone()).await?)
    }

    /// Return up to `limit` jobs whose lease ended before `now_ms` to pending.
    pub async fn requeue_expired(
        &self,
        keys: &TopicKeys,
        now_ms: u64,
        limit: usize,
    ) -> Result<u64, QueueError> {
        Ok(scripts::REQUEUE
            .key(&keys.lease)
            .key(&keys.pending)
            .key(&keys.error)
            .arg(now_ms)
            .arg(limit)
            .arg(&self.wake)
            .arg(&keys.topic)
            .invoke_async(&mut self.conn.clone())
            .await?)
    }

    /// Give back leased jobs without counting their attempt; `held` holds (id, attempt).
    pub async fn release(
        &self,
        keys: &TopicKeys,
        held: &[(String, u32)],
        now_ms: u64,
    ) -> Result<Vec<String>, QueueError> {
        let mut inv = scripts::RELEASE.prepare_invoke();
        inv.key(&keys.lease).key(&keys.pending).key(&keys.attempt);
        inv.arg(now_ms).arg(&self.wake).arg(&keys.topic);
        for (id, attempt) in held {
            inv.arg(id).arg(attempt);
        }
        Ok(inv.invoke_async(&mut self.conn.clone()).await?)
    }

    /// Counts for one topic at `now_ms`.
    pub async fn stats(&self, keys: &TopicKeys, now_ms: u64) -> Result<TopicStats, QueueError> {
        let (ready, pending, running, dead): (u64, u64, u64, u64) = redis::pipe()
            .zcount(&keys.pending, "-inf", now_ms)
            .zcard(&keys.pending)
            .zcard(&keys.lease)
            .zcard(&keys.dead)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(TopicStats {
            scheduled: pending - ready,
            ready,
            running,
            dead,
        })
    }

    /// The dead letter `id` of a topic, if there is one.
    pub async fn dead_info(
        &self,
        keys: &TopicKeys,
        id: &str,
    ) -> Result<Option<DeadInfo>, QueueError> {
        let json: Option<String> = self.conn.clone().hget(&keys.dead_info, id).await?;
        json.map(|j| {
            serde_json::from_str(&j)
                .map_err(|e| QueueError::Protocol(format!("dead info of {id:?}: {e}")))
        })
        .transpose()
    }

    /// Round-trip check, used at start-up to fail early with a clear message.
    pub async fn ping(&self) -> Result<(), QueueError> {
        let _: String = redis::cmd("PING")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

fn bytes(v: &Value) -> Result<Vec<u8>, QueueError> {
    match v {
        Value::BulkString(b) => Ok(b.clone()),
        Value::SimpleString(s) => Ok(s.clone().into_bytes()),
        Value::Int(i) => Ok(i.to_string().into_bytes()),
        other => Err(QueueError::Protocol(format!(
            "expected a string, got {other:?}"
        ))),
    }
}

fn string(v: &Value) -> Result<String, QueueError> {
    String::from_utf8(bytes(v)?).map_err(|e| QueueError::Protocol(format!("non-UTF-8 string: {e}")))
}

fn number(v: &Value) -> Result<u64, QueueError> {
    match v {
        Value::Int(i) => {
            u64::try_from(*i).map_err(|_| QueueError::Protocol(format!("negative number {i}")))
        }
        other => {
            let s = string(other)?;
            s.parse::<u64>()
                .or_else(|_| s.parse::<f64>().map(|f| f as u64))
                .map_err(|_| QueueError::Protocol(format!("expected a number, got {s:?}")))
        }
    }
}
