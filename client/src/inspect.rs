//! Everything Redis holds about one job, read in one round trip: what
//! `hourglass inspect` shows and what `dead` commands look at.

use redis::Value;

use super::record::split_stored;
use super::reply::{bytes, number, optional_string};
use super::{
    AttemptCost, CorruptRecord, DeadInfo, Failure, Journal, Progress, Queue, QueueError, Record,
    Rollout, Suspension, TopicKeys,
};

/// Where a job is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Pending, due at this time (ms), later than now.
    Scheduled(u64),
    /// Pending and due (since this time, ms): waiting for a free runner.
    Ready(u64),
    /// Leased to a runner until this time (ms).
    Running(u64),
    /// Dead-lettered.
    Dead(DeadInfo),
}

/// One job as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    /// The job's id.
    pub id: String,
    /// Where it is.
    pub state: JobState,
    /// Attempts started so far.
    pub attempts: u32,
    /// The stored record (payload, max attempts, enqueued-at), if readable.
    pub record: Option<Result<Record, CorruptRecord>>,
    /// How the last failed attempt failed, if one did.
    pub last_failure: Option<Failure>,
    /// Its story: each attempt so far (the most recent
    /// [`crate::KEPT_ATTEMPTS`]), with how it ended and what it used.
    pub history: Vec<AttemptCost>,
    /// The bytes of log lines it keeps (`Queue::logs` reads them).
    pub logs_bytes: u64,
    /// The latest progress an attempt reported, if any did.
    pub progress: Option<Progress>,
    /// A durable handler's journal, if it has one.
    pub journal: Option<Journal>,
    /// What it waits for, if it is suspended (a durable sleep or wait).
    pub suspension: Option<Suspension>,
    /// Its tenant key, if it has one.
    pub key: Option<String>,
    /// Its priority among its topic's due jobs (0, the highest, to 9).
    pub priority: u8,
    /// Its own deadline (ms), if it was enqueued with one.
    pub expires_at_ms: Option<u64>,
}

/// What a job takes from its topic when it names nothing itself: the
/// effective values [`JobView::shown`] shows.
#[derive(Debug, Default, Clone, Copy)]
pub struct TopicDefaults<'a> {
    /// The topic's `max_attempts` (unknown to a producer whose queues.toml
    /// lacks the topic).
    pub max_attempts: Option<u32>,
    /// The topic's rollout state (stable, canary, pin), if read.
    pub rollout: Option<&'a Rollout>,
}

impl Queue {
    /// The job `id` of a topic as of `now_ms`, or `None` if there is none.
    pub async fn inspect(
        &self,
        keys: &TopicKeys,
        id: &str,
        now_ms: u64,
    ) -> Result<Option<JobView>, QueueError> {
        let reply: Vec<Value> = redis::pipe()
            .zscore(&keys.legacy_pending, id)
            .zscore(&keys.lease, id)
            .hget(&keys.dead_info, id)
            .hget(&keys.job, id)
            .hget(&keys.attempt, id)
            .hget(&keys.error, id)
            .hget(&keys.progress, id)
            .hgetall(keys.journal_of(id))
            .hget(&keys.suspended, id)
            .hget(format!("{}:of", keys.fair), id)
            .hget(&keys.priority, id)
            .zscore(&keys.expire, id)
            .cmd("HSTRLEN")
            .arg(&keys.logs)
            .arg(id)
            .query_async(&mut self.conn.clone())
            .await?;
        let [
            legacy_pending,
            lease,
            dead,
            value,
            attempts,
            failure,
            progress,
            journal,
            suspension,
            key,
            priority,
            deadline,
            logs_bytes,
        ] = &reply[..]
        else {
            return Err(QueueError::Protocol(format!("inspect answered {reply:?}")));
        };
        let score = |v: &Value| match v {
            Value::Nil => Ok(None),
            v => number(v).map(Some),
        };
        let value = match value {
            Value::Nil => None,
            v => Some(bytes(v)?),
        };
        let (stored_due, record) = match &value {
            Some(v) => {
                let (due, record) = split_stored(v);
                (due, Some(record))
            }
            None => (None, None),
        };
        let state = if let Some(json) = optional_string(dead)? {
            JobState::Dead(serde_json::from_str(&json).map_err(|e| {
                QueueError::Protocol(format!("dead letter {id:?} is not readable: {e}"))
            })?)
        } else if let Some(until) = score(lease)? {
            JobState::Running(until)
        } else if let Some(due) = score(legacy_pending)?.or(stored_due) {
            if due > now_ms {
                JobState::Scheduled(due)
            } else {
                JobState::Ready(due)
            }
        } else {
            return Ok(None);
        };
        let attempts = match &state {
            // a burial clears the counter; the dead letter keeps the count
            JobState::Dead(info) => info.attempts,
            _ => score(attempts)?.map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        };
        let failure = optional_string(failure)?.map(Failure::parse);
        let history = match (&state, &failure) {
            (JobState::Dead(info), _) => info.costs.clone(),
            (_, Some(f)) => f.attempts.clone(),
            _ => Vec::new(),
        };
        Ok(Some(JobView {
            id: id.to_owned(),
            state,
            attempts,
            record: record.map(Record::decode),
            // a story with no failure in it (a durable job that slept) is no failure
            last_failure: failure.filter(Failure::failed),
            history,
            logs_bytes: score(logs_bytes)?.unwrap_or(0),
            progress: optional_string(progress)?.and_then(|p| serde_json::from_str(&p).ok()),
            journal: Some(Journal::from_reply(journal)?).filter(|j| *j != Journal::default()),
            suspension: optional_string(suspension)?.and_then(|s| serde_json::from_str(&s).ok()),
            key: optional_string(key)?,
            priority: score(priority)?.map_or(0, |p| u8::try_from(p).unwrap_or(u8::MAX)),
            expires_at_ms: score(deadline)?,
        }))
    }
}
