//! What happens to jobs, as a stream, for Rust callers of
//! [`crate::Runner::subscribe`] (the integration tests and the benchmark
//! read it; the log and `hourglass stats` do not: the committer logs, and
//! stats come from Redis and the heartbeats). `Started` and `Ran` are sent
//! by the attempt as it starts and ends (`worker/watch/events.rs`); the rest
//! by the committer, after the state change they report is committed to Redis.

/// One thing that happened to one attempt of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The job's topic.
    pub topic: String,
    /// The job's id.
    pub id: String,
    /// The attempt (1-based).
    pub attempt: u32,
    /// What happened.
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The handler is about to be called.
    Started {
        /// When the attempt was due (ms).
        due_at_ms: u64,
        /// When the handler was called (ms), never before `due_at_ms`.
        started_at_ms: u64,
        /// The content hash of the handler version running it.
        handler: String,
    },
    /// The handler answered (or was stopped), with what the attempt used.
    /// Sent as the attempt ends, before the state change it asks for is
    /// committed (that follows as `Acked`, `Retried`, `Dead` or `Released`).
    Ran {
        /// What the attempt used.
        usage: crate::redis::Usage,
    },
    /// Acknowledged and deleted.
    Acked,
    /// Rescheduled.
    Retried {
        /// When the next attempt is due (ms).
        next_due_ms: u64,
        /// Why this attempt failed.
        reason: String,
    },
    /// Moved to the dead-letter set.
    Dead {
        /// Why.
        reason: String,
    },
    /// Not started by its deadline: not run, and dead-lettered (reason
    /// `expired: ...`) or, on a topic with `on_expire = "drop"`, deleted.
    Expired {
        /// Why (as the dead letter says).
        reason: String,
        /// Deleted rather than dead-lettered.
        dropped: bool,
    },
    /// Given back without counting the attempt (shutdown, no free instance).
    Released,
    /// A durable handler sleeps or waits for a signal: put back until
    /// `until_ms` (or the signal), the attempt not counted.
    Suspended {
        /// When it wakes if nothing wakes it earlier (ms).
        until_ms: u64,
        /// The signal it waits for, if it waits for one.
        signal: Option<String>,
    },
}

/// The sending side; cheap to clone, free when nobody listens.
pub type EventSender = tokio::sync::broadcast::Sender<Event>;
