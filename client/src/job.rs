//! A job as producers send it: its id, payload and options, and what an
//! enqueue answers. What a claim hands out and what ending an attempt
//! records is in `attempt.rs`.

use super::TraceContext;
use super::flow::FlowRef;

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
