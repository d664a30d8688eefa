//! An attempt as the pipeline sees it: what a claim hands out, and what an
//! ack, retry or burial records.

use super::flow::{FlowSpec, Notice};
use super::{
    AttemptCost, CorruptRecord, Failure, JobEnd, Journal, OnExpire, Parked, QueueError, Record,
};

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
    /// How the previous attempt failed, if it did.
    pub last_failure: Option<Failure>,
    /// The account the job is tagged with, if any.
    pub account: Option<String>,
    /// Its tenant key when the topic claims fairly (`Some("")` for a job
    /// without one); `None` from a claim without fairness.
    pub key: Option<String>,
    /// Its journal, if it is a durable handler's job that has one (or why
    /// it could not be read).
    pub journal: Option<Result<Journal, String>>,
    /// Its deadline (ms), if it was enqueued with one: a job claimed at or
    /// past it (a claim takes those first, due or not) is not run.
    pub expires_at_ms: Option<u64>,
}

impl ClaimedJob {
    /// The attempts the job gets: its own, or `topic_default` when it set
    /// none (or its record cannot be read).
    pub fn max_attempts(&self, topic_default: u32) -> u32 {
        match self.record.as_ref().map_or(0, |r| r.max_attempts) {
            0 => topic_default,
            n => n,
        }
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The attempts now leased to the caller.
    pub jobs: Vec<ClaimedJob>,
    /// When the first job still pending is due, if any is.
    pub next_due_ms: Option<u64>,
    /// The topic is paused: nothing was claimed.
    pub paused: bool,
}

/// Counts for one topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopicStats {
    /// Pending, due later.
    pub scheduled: u64,
    /// Pending, due now.
    pub ready: u64,
    /// Leased to a runner.
    pub running: u64,
    /// In the dead-letter set.
    pub dead: u64,
    /// Claims nothing until resumed.
    pub paused: bool,
    /// Of the scheduled: durable handlers' jobs that sleep or wait for a signal.
    pub suspended: u64,
    /// Jobs that expired (not started by their deadline), ever.
    pub expired: u64,
}

/// A dead-lettered job's record of why, stored as JSON.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeadInfo {
    /// Why the job was given up.
    pub reason: String,
    /// Attempts made.
    pub attempts: u32,
    /// When (ms since the Unix epoch).
    pub failed_at_ms: u64,
    /// The content hash of the handler that ran the last attempt, if one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// Its story: each attempt, with what it used (the most recent
    /// [`crate::KEPT_ATTEMPTS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<AttemptCost>,
    /// For a job that expired: the deadline it was not started by (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

/// A finished attempt to acknowledge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// The job's id.
    pub id: String,
    /// The attempt that finished (the lease's fencing token).
    pub attempt: u32,
    /// Follow-up jobs to enqueue with the ack; their ids must be set.
    pub follow_ups: Vec<Parked>,
    /// The job's end to keep, on a topic that keeps results.
    pub end: Option<JobEnd>,
    /// For a job of a flow, its end as the flow is told it.
    pub notice: Option<Notice>,
    /// Flows its handler created, each created once the ack is delivered.
    pub flows: Vec<FlowSpec>,
    /// The attempt's log lines (`logs.rs`; '' for none): kept with its end.
    pub logs: String,
}

/// A failed attempt whose job runs again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retrying {
    /// The job's id.
    pub id: String,
    /// The attempt that failed (the lease's fencing token).
    pub attempt: u32,
    /// When the next attempt is due (ms).
    pub next_due_ms: u64,
    /// What went wrong, with the job's story.
    pub failure: Failure,
    /// The attempt's log lines (`logs.rs`; '' for none).
    pub logs: String,
}

/// An attempt whose job goes to the dead-letter set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Burial {
    /// The job's id.
    pub id: String,
    /// The last attempt (the lease's fencing token).
    pub attempt: u32,
    /// Why it is given up.
    pub info: DeadInfo,
    /// The job's end to keep, on a topic that keeps results.
    pub end: Option<JobEnd>,
    /// For a job of a flow, its end as the flow is told it.
    pub notice: Option<Notice>,
    /// It expired: counted as such, and dropped instead of dead-lettered
    /// when its topic says so.
    pub expired: Option<OnExpire>,
    /// The attempt's log lines (`logs.rs`; '' for none).
    pub logs: String,
}

/// A claimed attempt given back without counting it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The job's id.
    pub id: String,
    /// The attempt (the lease's fencing token).
    pub attempt: u32,
}

/// A fenced state change (ack, retry, dead-letter, release) that did not
/// apply to one job, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The job.
    pub id: String,
    /// Why.
    pub why: Refused,
}

/// Why a fenced state change did not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// A later attempt owns the job: this one's lease expired and the job was
    /// claimed again.
    Newer,
    /// The job is gone: cancelled meanwhile, or this very change went
    /// through on an earlier try whose reply was lost (Redis went away).
    Gone,
}

/// Read a fenced script's reply: id, then `newer` or `gone`, per refused job
/// (`refuse` in `prelude.lua`).
pub(super) fn refusals(flat: Vec<String>) -> Result<Vec<Refusal>, QueueError> {
    flat.chunks(2)
        .map(|pair| match pair {
            [id, why] if why == "newer" => Ok(Refusal {
                id: id.clone(),
                why: Refused::Newer,
            }),
            [id, why] if why == "gone" => Ok(Refusal {
                id: id.clone(),
                why: Refused::Gone,
            }),
            other => Err(QueueError::Protocol(format!(
                "a fenced script answered {other:?}"
            ))),
        })
        .collect()
}
