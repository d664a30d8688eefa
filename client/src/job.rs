//! A job as the pipeline sees it: what producers send, what a claim hands
//! out, what an ack, retry or burial records.

use super::flow::{FlowRef, Notice};
use super::{AttemptCost, CorruptRecord, Failure, JobEnd, Parked, Record, TraceContext};

/// Job ids are Redis hash fields and zset members and appear in logs:
/// 1 to 512 bytes of printable text. (Scripts rely on the bound: the attempt
/// hash keeps one longer field of its own, see `lua/prelude.lua`.)
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 512 {
        return Err(format!("a job id is 1 to 512 bytes, not {}", id.len()));
    }
    if id.chars().any(char::is_control) {
        return Err(format!("job id {id:?} contains control characters"));
    }
    Ok(())
}

/// An account label is 1 to 64 characters: letters, digits and `_-.:@`
/// (it names a tenant in usage reports; it is not a secret).
pub fn check_account(account: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || "_-.:@".contains(c);
    if account.is_empty() || account.len() > 64 || !account.chars().all(ok) {
        return Err(format!(
            "account {account:?} is not 1 to 64 letters, digits or _-.:@"
        ));
    }
    Ok(())
}

/// Refuse a tenant key that is not 1 to 128 bytes of letters, digits or
/// `_-.:@/` (a job's key for fairness and per-key limits: a customer, a
/// tenant, a partition).
pub fn check_key(key: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || "_-.:@/".contains(c);
    if key.is_empty() {
        return Err("key is empty: leave it out for a job without one".to_owned());
    }
    if key.len() > 128 {
        return Err(format!(
            "key of {} bytes is over 128 bytes ({:?}...)",
            key.len(),
            &key[..key.char_indices().nth(16).map_or(key.len(), |(i, _)| i)]
        ));
    }
    if let Some(bad) = key.chars().find(|c| !ok(*c)) {
        return Err(format!(
            "key {key:?} holds {bad:?}: only letters, digits and _-.:@/ are allowed"
        ));
    }
    Ok(())
}

/// A job to enqueue. `NewJob { payload, due_at_ms, ..Default::default() }`
/// leaves the rest at "no id, the topic's attempts, no reservation".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewJob {
    /// The caller's id, or `None` for a generated one.
    pub id: Option<String>,
    /// The bytes the handler receives.
    pub payload: Vec<u8>,
    /// Not before this (ms since the Unix epoch).
    pub due_at_ms: u64,
    /// Attempts; 0 for the topic's default.
    pub max_attempts: u32,
    /// Keep the id taken this long (ms) from the enqueue, even after the job
    /// is done: a repeat within the window is a duplicate. 0: only while live.
    /// Needs an `id`.
    pub unique_for_ms: u64,
    /// If a job with this id is waiting (scheduled or ready), replace its
    /// payload and due time (attempts start over); a running one is left
    /// alone and reported. Needs an `id`.
    pub replace: bool,
    /// Run every attempt on this handler version (a content hash, as
    /// `hourglass versions` lists), whatever the topic serves; `None`: the
    /// topic's choice.
    pub version: Option<String>,
    /// The account its attempts' usage is summed under (`hourglass usage`),
    /// if any: see [`check_account`].
    pub account: Option<String>,
    /// Its tenant key (a customer, a tenant, a partition): on a topic with
    /// fairness, keys take turns and per-key limits apply; see [`check_key`].
    pub key: Option<String>,
    /// The result of the job that started this one (a follow-up enqueued
    /// with its parent's result), handed to its handler.
    pub parent_result: Option<Vec<u8>>,
    /// The producer's trace context: the job's attempts continue its trace.
    pub trace: Option<TraceContext>,
    /// The job's place in a flow (set by [`crate::Flows`], not by producers).
    pub flow: Option<FlowRef>,
    /// Not started by this time (ms since the Unix epoch), it expires: it is
    /// not run, and is dead-lettered (reason `expired`) or dropped as its
    /// topic's `on_expire` says. Must be after `due_at_ms`. `None`: the
    /// topic's `expire_after`, if it has one.
    pub expires_at_ms: Option<u64>,
    /// Among the topic's due jobs, a higher priority starts first: 0 (the
    /// highest, and the default) to [`LOWEST_PRIORITY`].
    pub priority: u8,
}

/// The lowest priority a job may have (0 is the highest).
pub const LOWEST_PRIORITY: u8 = 9;

/// What becomes of a job that expired (not started by its deadline).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnExpire {
    /// Dead-lettered with reason `expired`: `hourglass dead` lists it.
    #[default]
    Dead,
    /// Deleted: nothing is kept but its end (on a topic that keeps results)
    /// and the count of expired jobs.
    Drop,
}

/// What happened to one [`NewJob`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// Accepted under this id.
    New(String),
    /// A live job already has this id (or it is reserved by a unique-for
    /// enqueue): nothing was changed.
    Duplicate(String),
    /// A waiting job with this id got the new payload and due time.
    Replaced(String),
    /// `replace` found this job running: nothing was changed.
    Running(String),
    /// `replace` found this job waiting with a journal (a durable handler's
    /// steps ran on its payload): nothing was changed.
    Journaled(String),
}

impl Enqueued {
    /// The job's id.
    pub fn id(&self) -> &str {
        match self {
            Enqueued::New(id)
            | Enqueued::Duplicate(id)
            | Enqueued::Replaced(id)
            | Enqueued::Running(id)
            | Enqueued::Journaled(id) => id,
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
    /// How the previous attempt failed, if it did.
    pub last_failure: Option<Failure>,
    /// The account the job is tagged with, if any.
    pub account: Option<String>,
    /// Its tenant key when the topic claims fairly (`Some("")` for a job
    /// without one); `None` from a claim without fairness.
    pub key: Option<String>,
    /// Its journal, if it is a durable handler's job that has one (or why
    /// it could not be read).
    pub journal: Option<Result<super::Journal, String>>,
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
    pub flows: Vec<crate::FlowSpec>,
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
pub(super) fn refusals(flat: Vec<String>) -> Result<Vec<Refusal>, super::QueueError> {
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
            other => Err(super::QueueError::Protocol(format!(
                "a fenced script answered {other:?}"
            ))),
        })
        .collect()
}
