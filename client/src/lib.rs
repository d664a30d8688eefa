//! hourglass-client: the job pipeline in Redis, without the runner.
//!
//! Producers (a web service enqueueing jobs, a script inspecting the dead
//! letters) need only this crate: redis, serde and the Lua scripts, no
//! wasmtime. The runner (`hourglass`) uses it for every Redis call; it is the
//! only code that talks to Redis.
//!
//! ```no_run
//! # async fn demo() -> Result<(), hourglass_client::QueueError> {
//! use hourglass_client::{Enqueued, NewJob, Queue, clock::now_ms};
//!
//! let queue = Queue::connect("redis://127.0.0.1:6379/0", "hourglass").await?;
//! let job = NewJob {
//!     id: Some("order-1042".into()),
//!     payload: br#"{"order_id":1042}"#.to_vec(),
//!     due_at_ms: now_ms() + 30 * 60 * 1000,
//!     ..Default::default()
//! };
//! for answer in queue.enqueue(&queue.keys("order_cancel"), &[job], now_ms()).await? {
//!     match answer {
//!         Enqueued::New(id) => println!("enqueued {id}"),
//!         Enqueued::Duplicate(id) => println!("{id} is already live"),
//!         other => println!("{other:?}"), // Replaced / Running: only with `replace`
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! A job's life is a handful of atomic state changes, each one Lua script in
//! `client/lua/` touching only keys of its topic (passed in KEYS, all with the
//! topic's hash tag): enqueue → (pending) → claim → (leased) → ack | retry →
//! (pending) | bury → (dead). Expired leases are requeued, leases of a runner
//! shutting down are released. Scores are milliseconds; every function takes
//! `now_ms` from its caller so tests control the clock.

mod admin;
mod claim;
pub mod clock;
mod connect;
mod durable;
mod error;
mod inspect;
mod job;
pub mod keys;
pub mod layout;
pub mod outbox;
pub mod record;
mod reply;
pub mod results;
pub mod rollout;
mod runners;
mod scripts;
mod sentinel;
pub mod trace;
mod usage;
mod wait;
mod wake;

use std::time::Duration;

use redis::Value;

pub use admin::{Cancelled, DEAD_BATCH};
pub use claim::RateLimit;
use connect::Conn;
pub use connect::{Endpoint, Servers, Tls, redact};
pub use durable::Durability;
pub use error::QueueError;
pub use inspect::{JobState, JobView};
pub use job::{
    AttemptCost, Burial, Claimed, ClaimedJob, DeadInfo, Done, Enqueued, Failed, Failure, Held,
    KEPT_ATTEMPTS, NewJob, Refusal, Refused, TopicStats, Usage, check_account, check_id,
    with_attempt,
};
pub use keys::{RunnerKeys, TopicKeys, wake_channel};
pub use outbox::{Parked, outbox_token};
pub use record::{CorruptRecord, Record, check_version};
use reply::string;
pub use results::{EndState, JobEnd, Progress, Report, Standing};
pub use rollout::{Canary, Change, Pin, Policy, Role, Rollout, Tally, Verdict, VersionInfo};
pub use runners::{RunnerInfo, TopicMeter};
pub use sentinel::Sentinel;
pub use trace::TraceContext;
pub use usage::{AccountUsage, HOUR_MS, HourlyUsage, USAGE_KEEP, hour_of, totals};
pub use wait::{JobEvent, Waited, Waiters, Watch};
pub use wake::{Wake, listen as listen_for_wakes};

/// The largest payload a job may carry unless configured otherwise: 1 MiB.
pub const DEFAULT_PAYLOAD: u64 = 1 << 20;

/// How many dead letters a topic keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetter {
    /// At most this many; the oldest are dropped first.
    pub keep: u64,
    /// None older than this.
    pub max_age: Duration,
}

/// How long follow-ups parked by an ack wait for their runner to deliver
/// them before a sweep by any runner does.
pub const OUTBOX_SWEEP: Duration = Duration::from_secs(10);

/// A connection to the pipeline of one namespace.
#[derive(Clone)]
pub struct Queue {
    endpoint: Endpoint,
    conn: Conn,
    namespace: String,
    wake: String,
    max_payload: u64,
    durability: Option<Durability>,
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
    fn wake_args(&self, inv: &mut redis::ScriptInvocation<'_>, keys: &TopicKeys) {
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
            let mut inv = scripts::ENQUEUE.prepare_invoke();
            inv.key(&keys.pending)
                .key(&keys.job)
                .key(&keys.dead)
                .key(&keys.dead_info)
                .key(&keys.seq)
                .key(&keys.lease)
                .key(&keys.attempt)
                .key(&keys.error)
                .key(&keys.layout)
                .key(&keys.account)
                .key(&keys.legacy_pending);
            // reservation keys only when a job asks for one: none on the common path
            if chunk.iter().any(|j| j.unique_for_ms > 0) {
                for job in chunk {
                    inv.key(keys.unique(job.id.as_deref().unwrap_or("")));
                }
            }
            self.wake_args(&mut inv, keys);
            for job in chunk {
                let record = Record {
                    max_attempts: job.max_attempts,
                    enqueued_at_ms: now_ms,
                    payload: job.payload.clone(),
                    version: job.version.clone(),
                    parent_result: job.parent_result.clone(),
                    trace: job.trace.clone(),
                };
                inv.arg(job.id.as_deref().unwrap_or(""))
                    .arg(job.due_at_ms)
                    .arg(record.encode())
                    .arg(job.unique_for_ms)
                    .arg(if job.replace { "1" } else { "0" })
                    .arg(job.account.as_deref().unwrap_or(""));
            }
            let reply: Vec<Value> = self.invoke_durable(&inv).await?;
            for pair in reply.chunks(2) {
                match pair {
                    [id, Value::Int(1)] => out.push(Enqueued::New(string(id)?)),
                    [id, Value::Int(0)] => out.push(Enqueued::Duplicate(string(id)?)),
                    [id, Value::Int(2)] => out.push(Enqueued::Replaced(string(id)?)),
                    [id, Value::Int(3)] => out.push(Enqueued::Running(string(id)?)),
                    other => {
                        return Err(QueueError::Protocol(format!("enqueue answered {other:?}")));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Delete finished jobs, parking their follow-ups in the topic's outbox in
    /// the same step. Returns the jobs left alone and why (a newer attempt owns
    /// them, or they are gone); their follow-ups are dropped with them.
    /// Deliver the parked follow-ups afterwards with [`Queue::deliver`].
    /// On a topic that keeps results (`keep`), each job's `end` is kept
    /// that long and announced to its waiters.
    pub async fn ack(
        &self,
        keys: &TopicKeys,
        done: &[Done],
        now_ms: u64,
        keep: Option<Duration>,
    ) -> Result<Vec<Refusal>, QueueError> {
        let mut inv = scripts::ACK.prepare_invoke();
        inv.key(&keys.lease)
            .key(&keys.job)
            .key(&keys.attempt)
            .key(&keys.error)
            .key(&keys.outbox)
            .key(&keys.outbox_due)
            .key(&keys.account)
            .key(&keys.progress);
        if keep.is_some() {
            for d in done {
                inv.key(keys.result(&d.id));
            }
        }
        inv.arg(now_ms + millis(OUTBOX_SWEEP))
            .arg(results::keep_ms(keep))
            .arg(&keys.events);
        for d in done {
            inv.arg(&d.id).arg(d.attempt);
            if d.follow_ups.is_empty() {
                inv.arg("");
            } else {
                inv.arg(outbox::encode(&d.follow_ups));
            }
            match (&d.end, keep) {
                (Some(end), Some(_)) => inv.arg(end.encode()),
                _ => inv.arg(""),
            };
        }
        job::refusals(self.invoke_durable(&inv).await?)
    }

    /// Schedule the next attempts of `failed`; `announce` tells each
    /// failure to the job's waiters (topics that keep results).
    pub async fn retry(
        &self,
        keys: &TopicKeys,
        failed: &[Failed],
        announce: bool,
    ) -> Result<Vec<Refusal>, QueueError> {
        let mut inv = scripts::RETRY.prepare_invoke();
        inv.key(&keys.lease)
            .key(&keys.pending)
            .key(&keys.attempt)
            .key(&keys.error)
            .key(&keys.job);
        self.wake_args(&mut inv, keys);
        inv.arg(if announce { keys.events.as_str() } else { "" });
        for f in failed {
            inv.arg(&f.id)
                .arg(f.attempt)
                .arg(f.next_due_ms)
                .arg(f.failure.encode());
        }
        job::refusals(self.invoke_durable(&inv).await?)
    }

    /// Dead-letter jobs. Enforces `retention`. Returns the jobs left alone,
    /// and why. On a topic that keeps results (`keep`), each job's `end` is
    /// kept that long and announced to its waiters.
    pub async fn bury(
        &self,
        keys: &TopicKeys,
        dead: &[Burial],
        retention: DeadLetter,
        now_ms: u64,
        keep: Option<Duration>,
    ) -> Result<Vec<Refusal>, QueueError> {
        let mut inv = scripts::BURY.prepare_invoke();
        inv.key(&keys.lease)
            .key(&keys.job)
            .key(&keys.attempt)
            .key(&keys.error)
            .key(&keys.dead)
            .key(&keys.dead_info)
            .key(&keys.account)
            .key(&keys.progress);
        if keep.is_some() {
            for d in dead {
                inv.key(keys.result(&d.id));
            }
        }
        let oldest = now_ms.saturating_sub(millis(retention.max_age));
        inv.arg(now_ms)
            .arg(retention.keep)
            .arg(oldest)
            .arg(results::keep_ms(keep))
            .arg(&keys.events);
        for d in dead {
            let json = serde_json::to_string(&d.info).expect("dead info serializes");
            inv.arg(&d.id).arg(d.attempt).arg(json);
            match (&d.end, keep) {
                (Some(end), Some(_)) => inv.arg(end.encode()),
                _ => inv.arg(""),
            };
        }
        job::refusals(self.invoke_durable(&inv).await?)
    }

    /// Return up to `limit` jobs whose lease ended before `now_ms` to pending.
    pub async fn requeue_expired(
        &self,
        keys: &TopicKeys,
        now_ms: u64,
        limit: usize,
    ) -> Result<u64, QueueError> {
        let failure = Failure {
            error: "lease expired: the runner stopped or lost Redis before finishing the attempt"
                .into(),
            handler: None,
            at: now_ms,
            attempts: Vec::new(),
        };
        let mut inv = scripts::REQUEUE.prepare_invoke();
        inv.key(&keys.lease)
            .key(&keys.pending)
            .key(&keys.error)
            .key(&keys.job);
        self.wake_args(&mut inv, keys);
        inv.arg(now_ms).arg(limit).arg(failure.encode());
        Ok(inv.invoke_async(&mut self.conn.clone()).await?)
    }

    /// Give back leased jobs without counting their attempt.
    pub async fn release(
        &self,
        keys: &TopicKeys,
        held: &[Held],
        now_ms: u64,
    ) -> Result<Vec<Refusal>, QueueError> {
        let mut inv = scripts::RELEASE.prepare_invoke();
        inv.key(&keys.lease)
            .key(&keys.pending)
            .key(&keys.attempt)
            .key(&keys.job);
        self.wake_args(&mut inv, keys);
        inv.arg(now_ms);
        for h in held {
            inv.arg(&h.id).arg(h.attempt);
        }
        job::refusals(inv.invoke_async(&mut self.conn.clone()).await?)
    }

    /// Counts for one topic at `now_ms`.
    pub async fn stats(&self, keys: &TopicKeys, now_ms: u64) -> Result<TopicStats, QueueError> {
        let (ready, pending, running, dead, paused): (u64, u64, u64, u64, bool) = scripts::COUNTS
            .key(&keys.pending)
            .key(&keys.job)
            .key(&keys.lease)
            .key(&keys.dead)
            .key(&keys.paused)
            .key(&keys.legacy_pending)
            .arg(now_ms)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(TopicStats {
            scheduled: pending - ready,
            ready,
            running,
            dead,
            paused,
        })
    }

    /// The dead letter `id` of a topic, if there is one.
    pub async fn dead_info(
        &self,
        keys: &TopicKeys,
        id: &str,
    ) -> Result<Option<DeadInfo>, QueueError> {
        Ok(self
            .inspect(keys, id, 0)
            .await?
            .and_then(|view| match view.state {
                JobState::Dead(info) => Some(info),
                _ => None,
            }))
    }

    /// Wait until job `id` of a topic ends, or `timeout` passes (a
    /// subscription of its own: for many waits at once, share a [`Waiters`]).
    /// The topic must keep results (`results` in queues.toml), else every
    /// wait answers [`Waited::Unknown`] once the job is gone.
    pub async fn wait_for(
        &self,
        keys: &TopicKeys,
        id: &str,
        timeout: Duration,
    ) -> Result<Waited, QueueError> {
        Waiters::new(self.clone()).wait_for(keys, id, timeout).await
    }

    /// Round-trip check, used at start-up to fail early with a clear message.
    pub async fn ping(&self) -> Result<(), QueueError> {
        let _: String = redis::cmd("PING")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

use clock::millis;
