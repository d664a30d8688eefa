//! The job a handler receives, with typed accessors for its payload.

use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use crate::Error;
use crate::bindings::hourglass::handler::types as wit;

/// One attempt of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    id: String,
    topic: String,
    payload: Vec<u8>,
    attempt: u32,
    max_attempts: u32,
    enqueued_at_ms: u64,
    due_at_ms: u64,
}

impl Job {
    pub(crate) fn from_wit(job: wit::Job) -> Job {
        Job {
            id: job.id,
            topic: job.topic,
            payload: job.payload,
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            enqueued_at_ms: job.enqueued_at,
            due_at_ms: job.due_at,
        }
    }

    /// The job's id, unique among the live jobs of its topic.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The topic the job was enqueued to.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The payload exactly as enqueued.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The payload as UTF-8 text; invalid UTF-8 is a permanent failure.
    pub fn text(&self) -> Result<&str, Error> {
        core::str::from_utf8(&self.payload)
            .map_err(|e| Error::fail(alloc::format!("payload is not UTF-8: {e}")))
    }

    /// The payload parsed as JSON; a payload that does not parse is a
    /// permanent failure (retrying cannot fix it).
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.payload)
            .map_err(|e| Error::fail(alloc::format!("payload is not the expected JSON: {e}")))
    }

    /// Which attempt this is, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// How many attempts the job gets in all.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Whether this is the last attempt before the job is dead-lettered.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// The result of the job that started this one, if it was enqueued as a
    /// follow-up with [`crate::FollowUp::with_parent_result`] and its parent
    /// acked with one.
    pub fn parent_result(&self) -> Option<Vec<u8>> {
        crate::bindings::hourglass::handler::report::parent_result()
    }

    /// [`Job::parent_result`] parsed as JSON; `None` without one, an error
    /// (permanent) if it is not valid JSON for `T`.
    pub fn parent_json<T: serde::de::DeserializeOwned>(&self) -> Result<Option<T>, Error> {
        self.parent_result()
            .map(|bytes| {
                serde_json::from_slice(&bytes)
                    .map_err(|e| Error::fail(alloc::format!("parent result: {e}")))
            })
            .transpose()
    }

    /// The jobs this one waits for in its flow, each with how it ended, in
    /// the order the flow names them; empty for a job outside a flow. A job
    /// runs once all of them have ended (with `require`, only if each acked).
    pub fn dependencies(&self) -> Vec<Dependency> {
        use crate::bindings::hourglass::handler::report;
        report::dependencies()
            .into_iter()
            .map(|d| Dependency {
                name: d.name,
                topic: d.topic,
                id: d.id,
                ended: match d.ended {
                    report::Ended::Acked => Ended::Acked,
                    report::Ended::Dead => Ended::Dead,
                    report::Ended::Cancelled => Ended::Cancelled,
                },
                result: d.result,
                reason: d.reason,
            })
            .collect()
    }

    /// For a batch's callback (`on_complete`, `on_success`): how the batch
    /// stands (every job of it has ended); `None` for any other job.
    pub fn batch(&self) -> Option<Batch> {
        use crate::bindings::hourglass::handler::report;
        report::batch().map(|b| Batch {
            id: b.id,
            jobs: b.jobs,
            acked: b.acked,
            dead: b.dead,
            cancelled: b.cancelled,
            failed: b.failed,
        })
    }

    /// When the job was accepted, in milliseconds since the Unix epoch.
    pub fn enqueued_at_ms(&self) -> u64 {
        self.enqueued_at_ms
    }

    /// When this attempt became due, in milliseconds since the Unix epoch.
    pub fn due_at_ms(&self) -> u64 {
        self.due_at_ms
    }

    /// How long after its due time this attempt started (zero if the guest
    /// clock reads earlier, which the runner never allows).
    pub fn lateness(&self) -> Duration {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Duration::from_millis(now.saturating_sub(self.due_at_ms))
    }
}

/// How a job of a flow ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its handler acked.
    Acked,
    /// It was dead-lettered.
    Dead,
    /// An operator cancelled it.
    Cancelled,
}

/// How a batch stands when its callback runs ([`Job::batch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The batch's id.
    pub id: String,
    /// Its jobs (the callbacks not counted).
    pub jobs: u32,
    /// How many were acked.
    pub acked: u32,
    /// How many were dead-lettered.
    pub dead: u32,
    /// How many were cancelled.
    pub cancelled: u32,
    /// The ids of the dead-lettered ones (`<batch>/<name>`).
    pub failed: Vec<String>,
}

/// A job this one waits for in its flow ([`Job::dependencies`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    /// Its name in the flow.
    pub name: String,
    /// Its topic.
    pub topic: String,
    /// Its id in that topic (`<flow>/<name>`).
    pub id: String,
    /// How it ended.
    pub ended: Ended,
    /// The result its handler set (an acked job that set one).
    pub result: Option<Vec<u8>>,
    /// Why it is dead, or who cancelled it.
    pub reason: Option<String>,
}

impl Dependency {
    /// [`Dependency::result`] parsed as JSON; `None` without one, an error
    /// (permanent) if it is not valid JSON for `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<Option<T>, Error> {
        self.result
            .as_deref()
            .map(|bytes| {
                serde_json::from_slice(bytes).map_err(|e| {
                    Error::fail(alloc::format!("result of dependency {:?}: {e}", self.name))
                })
            })
            .transpose()
    }
}
