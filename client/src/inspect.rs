//! Everything Redis holds about one job, read in one round trip: what
//! `hourglass inspect` shows and what `dead` commands look at.

use redis::Value;

use super::record::split_stored;
use super::reply::{bytes, number, optional_string};
use super::{
    CorruptRecord, DeadInfo, Failure, FlowRef, Journal, Progress, Queue, QueueError, Record,
    Rollout, Standing, Suspension, TopicKeys,
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
    /// The latest progress an attempt reported, if any did.
    pub progress: Option<Progress>,
    /// A durable handler's journal, if it has one.
    pub journal: Option<Journal>,
    /// What it waits for, if it is suspended (a durable sleep or wait).
    pub suspension: Option<Suspension>,
    /// Its tenant key, if it has one.
    pub key: Option<String>,
}

/// What a job takes from its topic when it names nothing itself: the
/// effective values [`JobView::to_json`] shows.
#[derive(Debug, Default, Clone, Copy)]
pub struct TopicDefaults<'a> {
    /// The topic's `max_attempts` (unknown to a producer whose queues.toml
    /// lacks the topic).
    pub max_attempts: Option<u32>,
    /// The topic's rollout state (stable, canary, pin), if read.
    pub rollout: Option<&'a Rollout>,
}

impl JobView {
    /// The view as JSON (`hourglass inspect --json`, the HTTP API), with
    /// effective values: `max_attempts` the job's own or the topic's
    /// (`max_attempts_source`), `version` the handler version its next
    /// attempt runs on (`version_source`: `journal` the version that wrote a
    /// durable handler's journal, `job` pinned by `--version`, `pin`
    /// the topic's pin, `stable`, or `stable_or_canary` while a canary takes
    /// a share). The payload as text when it is UTF-8.
    pub fn to_json(&self, topic: &str, defaults: TopicDefaults<'_>) -> serde_json::Value {
        let v = self;
        let (state, at) = match &v.state {
            JobState::Scheduled(t) => ("scheduled", *t),
            JobState::Ready(t) => ("ready", *t),
            JobState::Running(t) => ("running", *t),
            JobState::Dead(info) => ("dead", info.failed_at_ms),
        };
        let record = v.record.as_ref().and_then(|r| r.as_ref().ok());
        let (max_attempts, max_source) = match record.map(|r| r.max_attempts) {
            Some(n) if n > 0 => (Some(n), "job"),
            _ => (defaults.max_attempts, "topic"),
        };
        let rollout = defaults.rollout;
        let journal_version = v.journal.as_ref().and_then(|j| j.version.as_deref());
        let (version, version_source) = match (
            journal_version.or(record.and_then(|r| r.version.as_deref())),
            rollout.and_then(|r| r.pinned.as_ref()),
            rollout.and_then(|r| r.stable.as_deref()),
        ) {
            (Some(v), _, _) if journal_version.is_some() => (Some(v), Some("journal")),
            (Some(v), _, _) => (Some(v), Some("job")),
            (None, Some(pin), _) => (Some(pin.version.as_str()), Some("pin")),
            (None, None, Some(stable)) if rollout.is_some_and(|r| r.canary.is_some()) => {
                (Some(stable), Some("stable_or_canary"))
            }
            (None, None, Some(stable)) => (Some(stable), Some("stable")),
            _ => (None, None),
        };
        serde_json::json!({
            "topic": topic,
            "id": v.id,
            "state": state,
            "at_ms": at,
            "attempts": v.attempts,
            "max_attempts": max_attempts,
            "max_attempts_source": max_source,
            "enqueued_at_ms": record.map(|r| r.enqueued_at_ms),
            "payload_bytes": record.map(|r| r.payload.len()),
            "version": version,
            "version_source": version_source,
            "canary_version": rollout.and_then(|r| r.canary.as_ref()).map(|c| c.version.as_str()),
            "pinned_version": record.and_then(|r| r.version.as_deref()),
            "payload": record.and_then(|r| std::str::from_utf8(&r.payload).ok()),
            "dead": match &v.state { JobState::Dead(info) => serde_json::to_value(info).ok(), _ => None },
            "last_failure": v.last_failure,
            "progress": v.progress,
            "parent_result_bytes": record.and_then(|r| r.parent_result.as_ref().map(Vec::len)),
            "traceparent": record.and_then(|r| r.trace.as_ref().map(|t| t.traceparent.as_str())),
            "journal": v.journal.as_ref().map(Journal::to_json),
            "suspended": v.suspension,
            "key": v.key,
        })
    }
}

impl Queue {
    /// Job `id` of `topic` as `inspect --json` and the API's job view show
    /// it: its view with the effective values (`max_attempts` the topic's
    /// when the job names none, the version from the topic's rollout), or,
    /// once it has left the pipeline, its kept end (a topic with `results`);
    /// `None` if neither.
    pub async fn job_json(
        &self,
        keys: &TopicKeys,
        topic: &str,
        id: &str,
        max_attempts: Option<u32>,
        now_ms: u64,
    ) -> Result<Option<serde_json::Value>, QueueError> {
        if let Some(view) = self.inspect(keys, id, now_ms).await? {
            let rollout = self.rollouts().get(keys).await?;
            let defaults = TopicDefaults {
                max_attempts,
                rollout: Some(&rollout),
            };
            let mut json = view.to_json(topic, defaults);
            if let Some(Ok(Record {
                flow: Some(flow), ..
            })) = &view.record
            {
                json["flow"] = self.flow_json(flow).await?;
            }
            return Ok(Some(json));
        }
        Ok(match self.standing(keys, id).await? {
            Standing::Ended(end) => {
                let mut view = end.to_json(id);
                view["topic"] = topic.into();
                Some(view)
            }
            _ => None,
        })
    }

    /// A flow job's place in its flow, as `inspect --json` shows it: the
    /// flow's id, the job's index, each job it waits for and each job that
    /// waits for it with its state (`null`: not ended); a batch's callback,
    /// the batch's counts.
    pub async fn flow_json(&self, flow: &FlowRef) -> Result<serde_json::Value, QueueError> {
        let upstream = self.flows().dependencies(flow).await?.unwrap_or_default();
        let deps: Vec<serde_json::Value> = upstream
            .dependencies
            .iter()
            .map(|d| {
                serde_json::json!({
                    "name": d.name, "topic": d.topic, "id": d.id, "policy": d.policy,
                    "ended": d.end.as_ref().map(|e| e.state.as_str()),
                })
            })
            .collect();
        let dependents: Vec<serde_json::Value> = self
            .flows()
            .dependents(flow)
            .await?
            .into_iter()
            .map(|(name, ended)| serde_json::json!({ "name": name, "ended": ended }))
            .collect();
        let mut json = serde_json::json!({
            "id": flow.flow, "index": flow.index, "dependencies": deps, "dependents": dependents,
        });
        if let Some(b) = upstream.batch {
            json["batch"] = serde_json::json!({
                "jobs": b.jobs, "acked": b.acked, "dead": b.dead, "cancelled": b.cancelled,
                "failed": b.failed,
            });
        }
        Ok(json)
    }

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
        Ok(Some(JobView {
            id: id.to_owned(),
            state,
            attempts,
            record: record.map(Record::decode),
            last_failure: optional_string(failure)?.map(Failure::parse),
            progress: optional_string(progress)?.and_then(|p| serde_json::from_str(&p).ok()),
            journal: Some(Journal::from_reply(journal)?).filter(|j| *j != Journal::default()),
            suspension: optional_string(suspension)?.and_then(|s| serde_json::from_str(&s).ok()),
            key: optional_string(key)?,
        }))
    }
}
