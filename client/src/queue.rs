//! [`Queue`]: a connection to one namespace's pipeline, with what
//! producers call every day (enqueue, stats, inspect, wait) and the handles
//! that group the rest by concern ([`Queue::pipeline`], [`Queue::admin`],
//! [`Queue::dead`], [`Queue::rollouts`], [`Queue::runners`],
//! [`Queue::layout`]). A handle borrows the queue and is `Copy`: free to
//! make, and its methods take it by value, so their futures can be kept.

use std::time::Duration;

use redis::Value;

use super::connect::Conn;
use super::reply::string;
use super::{
    DEFAULT_PAYLOAD, Endpoint, Enqueued, LOWEST_PRIORITY, NewJob, QueueError, Record, TopicKeys,
    TopicStats, check_account, check_id, check_key, record, scripts, wake_channel,
};

/// How many replicas must confirm a change, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    /// Replicas that must have the change before it is answered.
    pub replicas: u32,
    /// How long to wait for them.
    pub timeout: Duration,
}

/// A connection to the pipeline of one namespace.
#[derive(Clone)]
pub struct Queue {
    pub(crate) endpoint: Endpoint,
    pub(crate) conn: Conn,
    pub(crate) namespace: String,
    pub(crate) wake: String,
    pub(crate) max_payload: u64,
    pub(crate) durability: Option<Durability>,
}

impl Queue {
    /// Connect to one server at `url` (redis://, rediss://, unix://);
    /// reconnects by itself afterwards.
    pub async fn connect(url: &str, namespace: &str) -> Result<Queue, QueueError> {
        Queue::open(&Endpoint::url(url), namespace).await
    }

    /// Connect to `endpoint` (a server or a cluster, TLS, AUTH); reconnects
    /// by itself afterwards.
    pub async fn open(endpoint: &Endpoint, namespace: &str) -> Result<Queue, QueueError> {
        let conn = endpoint.connect().await?;
        Ok(Queue {
            endpoint: endpoint.clone(),
            conn,
            namespace: namespace.to_owned(),
            wake: wake_channel(namespace),
            max_payload: DEFAULT_PAYLOAD,
            durability: None,
        })
    }

    /// Another connection to the same server, with the same settings. Its
    /// task runs on the runtime this is called on, so a caller on another
    /// thread pool than the first connection's (the HTTP API beside a
    /// runner) talks to Redis without crossing threads on every call.
    pub async fn reconnect(&self) -> Result<Queue, QueueError> {
        Ok(Queue {
            conn: self.endpoint.connect().await?,
            ..self.clone()
        })
    }

    /// The same connection, refusing payloads over `bytes`.
    pub fn with_max_payload(mut self, bytes: u64) -> Queue {
        self.max_payload = bytes;
        self
    }

    /// Refuse what cannot be stored: a bad id, a payload over the limit.
    fn check(&self, jobs: &[NewJob]) -> Result<(), QueueError> {
        for (i, job) in jobs.iter().enumerate() {
            let which = || match &job.id {
                Some(id) => format!("job {id:?}"),
                None if jobs.len() == 1 => "the job".to_owned(),
                None => format!("job {} of {}", i + 1, jobs.len()),
            };
            if let Some(id) = &job.id {
                check_id(id).map_err(QueueError::Invalid)?;
            } else if job.unique_for_ms > 0 || job.replace {
                return Err(QueueError::Invalid(format!(
                    "{}: unique-for and replace need the job's id",
                    which()
                )));
            }
            if let Some(version) = &job.version {
                record::check_version(version)
                    .map_err(|e| QueueError::Invalid(format!("{}: {e}", which())))?;
            }
            if let Some(account) = &job.account {
                check_account(account)
                    .map_err(|e| QueueError::Invalid(format!("{}: {e}", which())))?;
            }
            if let Some(key) = &job.key {
                check_key(key).map_err(|e| QueueError::Invalid(format!("{}: {e}", which())))?;
            }
            if job.priority > LOWEST_PRIORITY {
                return Err(QueueError::Invalid(format!(
                    "{}: priority {} is out of range: 0 (the highest) to {LOWEST_PRIORITY}",
                    which(),
                    job.priority
                )));
            }
            if let Some(at) = job.expires_at_ms
                && at <= job.due_at_ms
            {
                return Err(QueueError::Invalid(format!(
                    "{}: it would expire (at {at} ms) before it is due (at {} ms)",
                    which(),
                    job.due_at_ms
                )));
            }
            if job.payload.len() as u64 > self.max_payload {
                return Err(QueueError::Invalid(format!(
                    "{}: payload of {} bytes is over the limit of {} bytes ([runner] max_payload)",
                    which(),
                    job.payload.len(),
                    self.max_payload
                )));
            }
        }
        Ok(())
    }

    /// The keys of `topic`.
    pub fn keys(&self, topic: &str) -> TopicKeys {
        TopicKeys::new(&self.namespace, topic)
    }

    /// The first two arguments of every script that may wake the runners:
    /// the wake channel and the topic (`wake_if_earlier` in `prelude.lua`).
    pub(crate) fn wake_args(&self, inv: &mut redis::ScriptInvocation<'_>, keys: &TopicKeys) {
        inv.arg(&self.wake).arg(&keys.topic);
    }

    /// The channel carrying "a job became due earlier" messages.
    pub fn wake_channel(&self) -> &str {
        &self.wake
    }

    /// A dedicated pub/sub connection (one per subscriber): to the server, to
    /// the first cluster node that answers (PUBLISH reaches every node), or
    /// to the primary the sentinels name.
    pub async fn pubsub(&self) -> Result<redis::aio::PubSub, QueueError> {
        self.endpoint.pubsub(&self.conn).await
    }

    /// A new pub/sub connection subscribed to `channel` (the wake-ups, a
    /// topic's events).
    pub async fn subscribe(&self, channel: &str) -> Result<redis::aio::PubSub, QueueError> {
        let mut pubsub = self.pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok(pubsub)
    }

    /// Enqueue `jobs` into one topic, atomically per 1000 jobs. Nothing is
    /// written if any job is invalid.
    pub async fn enqueue(
        &self,
        keys: &TopicKeys,
        jobs: &[NewJob],
        now_ms: u64,
    ) -> Result<Vec<Enqueued>, QueueError> {
        self.check(jobs)?;
        let mut out = Vec::with_capacity(jobs.len());
        // keep each call's ARGV well inside Lua's unpack limits and Redis' argument buffer
        for chunk in jobs.chunks(1000) {
            let mut inv = scripts::ENQUEUE.on(keys);
            // reservation keys only when a job asks for one: none on the common path
            if chunk.iter().any(|j| j.unique_for_ms > 0) {
                for job in chunk {
                    inv.key(keys.unique(job.id.as_deref().unwrap_or("")));
                }
            }
            self.wake_args(&mut inv, keys);
            inv.arg(now_ms);
            // each argument is a string Redis and Lua make: a call whose jobs
            // use none of the options sends three a job, not nine
            let options = chunk.iter().any(|j| {
                j.unique_for_ms > 0
                    || j.replace
                    || j.account.is_some()
                    || j.key.is_some()
                    || j.expires_at_ms.is_some()
                    || j.priority != 0
            });
            inv.arg(if options { 9 } else { 3 });
            for job in chunk {
                let record = Record {
                    max_attempts: job.max_attempts,
                    enqueued_at_ms: now_ms,
                    payload: job.payload.clone(),
                    version: job.version.clone(),
                    parent_result: job.parent_result.clone(),
                    trace: job.trace.clone(),
                    flow: job.flow.clone(),
                };
                inv.arg(job.id.as_deref().unwrap_or(""))
                    .arg(job.due_at_ms)
                    .arg(record.encode_stored(job.due_at_ms));
                if !options {
                    continue;
                }
                inv.arg(job.unique_for_ms)
                    .arg(if job.replace { "1" } else { "0" })
                    .arg(job.account.as_deref().unwrap_or(""))
                    .arg(job.key.as_deref().unwrap_or(""))
                    .arg(job.expires_at_ms.map(|t| t.to_string()).unwrap_or_default())
                    .arg(job.priority);
            }
            let reply: Vec<Value> = self.invoke_durable(&inv).await?;
            for pair in reply.chunks(2) {
                match pair {
                    [id, Value::Int(1)] => out.push(Enqueued::New(string(id)?)),
                    [id, Value::Int(0)] => out.push(Enqueued::Duplicate(string(id)?)),
                    [id, Value::Int(2)] => out.push(Enqueued::Replaced(string(id)?)),
                    [id, Value::Int(3)] => out.push(Enqueued::Running(string(id)?)),
                    [id, Value::Int(4)] => out.push(Enqueued::Journaled(string(id)?)),
                    other => {
                        return Err(QueueError::Protocol(format!("enqueue answered {other:?}")));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Counts for one topic at `now_ms`.
    pub async fn stats(&self, keys: &TopicKeys, now_ms: u64) -> Result<TopicStats, QueueError> {
        #[allow(clippy::type_complexity)]
        let (ready, pending, running, dead, paused, suspended, expired): (
            u64,
            u64,
            u64,
            u64,
            bool,
            u64,
            u64,
        ) = scripts::COUNTS
            .on(keys)
            .arg(now_ms)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(TopicStats {
            scheduled: pending - ready,
            ready,
            running,
            dead,
            paused,
            suspended,
            expired,
        })
    }

    /// Round-trip check, used at start-up to fail early with a clear message.
    pub async fn ping(&self) -> Result<(), QueueError> {
        let _: String = redis::cmd("PING")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}
