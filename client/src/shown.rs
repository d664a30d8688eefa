//! What `inspect --json`, `wait --json` and the HTTP API show of a job:
//! typed, so the API's OpenAPI description (feature `openapi`) derives each
//! answer's schema from the very type that is serialized.

use base64::Engine;
use serde::Serialize;

use super::{
    BatchSummary, DeadInfo, EndState, Failure, FlowRef, JobEnd, JobState, JobView, Journal,
    Progress, Queue, QueueError, Record, Standing, Suspension, TopicDefaults, TopicKeys,
    flow::Policy,
};

/// A job as the API's job view and `inspect --json` show it: while it
/// lives, where it is with its effective values; once it has left the
/// pipeline, its kept end.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum JobJson {
    /// Stored: waiting, running or dead.
    Live(Box<LiveJson>),
    /// Ended and kept (a topic with `results`).
    Ended(EndJson),
}

/// A job stored in its topic.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LiveJson {
    /// Its topic.
    pub topic: String,
    /// Its id.
    pub id: String,
    /// `scheduled`, `ready`, `running` or `dead`
    pub state: &'static str,
    /// Due at (scheduled, ready), leased until (running) or dead since (ms).
    pub at_ms: u64,
    /// Attempts started so far.
    pub attempts: u32,
    /// The attempts it may make (the job's own or its topic's).
    pub max_attempts: Option<u32>,
    /// `job` or `topic`
    pub max_attempts_source: &'static str,
    /// When it was enqueued (ms), if its record is readable.
    pub enqueued_at_ms: Option<u64>,
    /// Its payload's size.
    pub payload_bytes: Option<usize>,
    /// The handler version its next attempt runs on.
    pub version: Option<String>,
    /// `journal` (the version that wrote a durable handler's journal), `job`
    /// (pinned by `--version`), `pin` (the topic's pin), `stable`, or
    /// `stable_or_canary` while a canary takes a share.
    pub version_source: Option<&'static str>,
    /// The canary being rolled out on its topic, if one is.
    pub canary_version: Option<String>,
    /// The version the job itself names.
    pub pinned_version: Option<String>,
    /// The payload as text, when it is UTF-8.
    pub payload: Option<String>,
    /// Why it is dead, if it is.
    pub dead: Option<DeadInfo>,
    /// How its last failed attempt failed.
    pub last_failure: Option<Failure>,
    /// The latest progress an attempt reported.
    pub progress: Option<Progress>,
    /// The size of the result its flow parent left it.
    pub parent_result_bytes: Option<usize>,
    /// The W3C trace context it was enqueued with.
    pub traceparent: Option<String>,
    /// A durable handler's journal.
    pub journal: Option<JournalJson>,
    /// What it waits for, if it is suspended.
    pub suspended: Option<Suspension>,
    /// Its tenant key.
    pub key: Option<String>,
    /// Its priority among its topic's due jobs: 0 (the highest) to 9.
    pub priority: u8,
    /// Its own deadline (ms): not started by then, it expires.
    pub expires_at_ms: Option<u64>,
    /// Its place in its flow, for a flow's job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<FlowPlace>,
}

/// A job's kept end, as the API, `wait --json` and the job view show it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EndJson {
    /// The job's id.
    pub id: String,
    /// Its topic (in the job view).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// How it ended.
    pub state: EndState,
    /// Attempts it took.
    pub attempts: u32,
    /// When it ended (ms).
    pub ended_at_ms: u64,
    /// The JSON its handler returned, if it set a result that is JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// A result that is not JSON, in base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_base64: Option<String>,
    /// Why it is dead, or who cancelled it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The handler version that ran its last attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl JobEnd {
    /// The end as shown: `result` the JSON the handler returned, or
    /// `result_base64` for bytes that are not JSON.
    pub fn shown(&self, id: &str) -> EndJson {
        let (mut result, mut result_base64) = (None, None);
        if let Some(bytes) = &self.result {
            match serde_json::from_slice(bytes) {
                Ok(value) => result = Some(value),
                Err(_) => {
                    result_base64 = Some(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
            }
        }
        EndJson {
            id: id.to_owned(),
            topic: None,
            state: self.state,
            attempts: self.attempts,
            ended_at_ms: self.at_ms,
            result,
            result_base64,
            reason: self.reason.clone(),
            version: self.version.clone(),
        }
    }

    /// [`JobEnd::shown`] as a JSON value (`hourglass wait --json`).
    pub fn to_json(&self, id: &str) -> serde_json::Value {
        serde_json::to_value(self.shown(id)).expect("an end serializes")
    }
}

/// A durable handler's journal as shown: steps in the order they
/// completed, with their sizes (not their values), the signals' names and
/// sizes, the wake times, and the effects.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JournalJson {
    /// The handler version that wrote it.
    pub version: Option<String>,
    /// Its completed steps.
    pub steps: Vec<StepJson>,
    /// Each timer's wake time (ms).
    pub timers: std::collections::BTreeMap<String, u64>,
    /// The signals received.
    pub signals: Vec<SignalJson>,
    /// The effects journal: the requests and follow-ups in the order they
    /// were made (`replays: false` on one the next attempt makes again), the
    /// clock reads and random bytes, and where and why it stopped; null when
    /// it recorded none.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub effects: serde_json::Value,
    /// How `patched(name)` answered the job, by name (`true`: the new path);
    /// left out when it asked none.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub patches: std::collections::BTreeMap<String, bool>,
}

/// One completed step of a durable handler.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepJson {
    /// Its name.
    pub name: String,
    /// The size of what it returned.
    pub bytes: usize,
    /// The attempt that ran it.
    pub attempt: u32,
    /// When it returned (ms).
    pub completed_at_ms: u64,
}

/// One signal a durable job received.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignalJson {
    /// Its name.
    pub name: String,
    /// Its payload's size.
    pub bytes: usize,
}

impl Journal {
    /// As `inspect --json`, `journal --json` and the API show it.
    pub fn shown(&self) -> JournalJson {
        let mut steps: Vec<_> = self.steps.iter().collect();
        steps.sort_by_key(|(name, s)| (s.at_ms, s.attempt, *name));
        JournalJson {
            version: self.version.clone(),
            steps: steps
                .into_iter()
                .map(|(name, s)| StepJson {
                    name: name.clone(),
                    bytes: s.value.len(),
                    attempt: s.attempt,
                    completed_at_ms: s.at_ms,
                })
                .collect(),
            timers: self.timers.clone(),
            signals: self
                .signals
                .iter()
                .map(|(name, p)| SignalJson {
                    name: name.clone(),
                    bytes: p.len(),
                })
                .collect(),
            effects: super::effects::to_json(&self.effects),
            patches: self.patches.clone(),
        }
    }

    /// [`Journal::shown`] as a JSON value.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.shown()).expect("a journal serializes")
    }
}

/// A flow job's place in its flow: the flow's id, the job's index, each job
/// it waits for and each job that waits for it with its state (null: not
/// ended); a batch's callback, the batch's counts.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlowPlace {
    /// The flow's id.
    pub id: String,
    /// The job's index in the flow.
    pub index: u32,
    /// The jobs it waits for.
    pub dependencies: Vec<DependencyJson>,
    /// The jobs that wait for it.
    pub dependents: Vec<DependentJson>,
    /// For a batch's callback: how the batch stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchCounts>,
}

/// A job a flow job waits for.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DependencyJson {
    /// Its name in the flow.
    pub name: String,
    /// Its topic.
    pub topic: String,
    /// Its id in that topic.
    pub id: String,
    /// What its failure does to the dependent.
    pub policy: Policy,
    /// How it ended, if it has.
    pub ended: Option<EndState>,
}

/// A job that waits for a flow job.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DependentJson {
    /// Its name in the flow.
    pub name: String,
    /// How it ended (`acked`, `dead`, `cancelled`), if it has.
    pub ended: Option<String>,
}

/// How a batch stands, for its callback.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchCounts {
    /// Its jobs (the callbacks not counted).
    pub jobs: u32,
    /// How many were acked.
    pub acked: u32,
    /// How many were dead-lettered.
    pub dead: u32,
    /// How many were cancelled.
    pub cancelled: u32,
    /// The ids (in their topics) of the dead-lettered ones.
    pub failed: Vec<String>,
}

impl From<BatchSummary> for BatchCounts {
    fn from(b: BatchSummary) -> BatchCounts {
        BatchCounts {
            jobs: b.jobs,
            acked: b.acked,
            dead: b.dead,
            cancelled: b.cancelled,
            failed: b.failed,
        }
    }
}

impl JobView {
    /// The view as shown, with effective values: `max_attempts` the job's own
    /// or the topic's (`max_attempts_source`), `version` the handler version
    /// its next attempt runs on (`version_source`). The payload as text when
    /// it is UTF-8.
    pub fn shown(&self, topic: &str, defaults: TopicDefaults<'_>) -> LiveJson {
        let v = self;
        let (state, at) = match &v.state {
            JobState::Scheduled(t) => ("scheduled", *t),
            JobState::Ready(t) => ("ready", *t),
            JobState::Running(t) => ("running", *t),
            JobState::Dead(info) => ("dead", info.failed_at_ms),
        };
        let record = v.record.as_ref().and_then(|r| r.as_ref().ok());
        let (max_attempts, max_attempts_source) = match record.map(|r| r.max_attempts) {
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
        LiveJson {
            topic: topic.to_owned(),
            id: v.id.clone(),
            state,
            at_ms: at,
            attempts: v.attempts,
            max_attempts,
            max_attempts_source,
            enqueued_at_ms: record.map(|r| r.enqueued_at_ms),
            payload_bytes: record.map(|r| r.payload.len()),
            version: version.map(str::to_owned),
            version_source,
            canary_version: rollout
                .and_then(|r| r.canary.as_ref())
                .map(|c| c.version.clone()),
            pinned_version: record.and_then(|r| r.version.clone()),
            payload: record.and_then(|r| std::str::from_utf8(&r.payload).ok().map(str::to_owned)),
            dead: match &v.state {
                JobState::Dead(info) => Some(info.clone()),
                _ => None,
            },
            last_failure: v.last_failure.clone(),
            progress: v.progress.clone(),
            parent_result_bytes: record.and_then(|r| r.parent_result.as_ref().map(Vec::len)),
            traceparent: record.and_then(|r| r.trace.as_ref().map(|t| t.traceparent.clone())),
            journal: v.journal.as_ref().map(Journal::shown),
            suspended: v.suspension.clone(),
            key: v.key.clone(),
            priority: v.priority,
            expires_at_ms: v.expires_at_ms,
            flow: None,
        }
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
    ) -> Result<Option<JobJson>, QueueError> {
        if let Some(view) = self.inspect(keys, id, now_ms).await? {
            let rollout = self.rollouts().get(keys).await?;
            let defaults = TopicDefaults {
                max_attempts,
                rollout: Some(&rollout),
            };
            let mut live = view.shown(topic, defaults);
            if let Some(Ok(Record {
                flow: Some(flow), ..
            })) = &view.record
            {
                live.flow = Some(self.flow_place(flow).await?);
            }
            return Ok(Some(JobJson::Live(Box::new(live))));
        }
        Ok(match self.standing(keys, id).await? {
            Standing::Ended(end) => {
                let mut shown = end.shown(id);
                shown.topic = Some(topic.to_owned());
                Some(JobJson::Ended(shown))
            }
            _ => None,
        })
    }

    /// A flow job's place in its flow, as `inspect --json` shows it.
    pub async fn flow_place(&self, flow: &FlowRef) -> Result<FlowPlace, QueueError> {
        let upstream = self.flows().dependencies(flow).await?.unwrap_or_default();
        let dependencies = upstream
            .dependencies
            .into_iter()
            .map(|d| DependencyJson {
                name: d.name,
                topic: d.topic,
                id: d.id,
                policy: d.policy,
                ended: d.end.map(|e| e.state),
            })
            .collect();
        let dependents = self
            .flows()
            .dependents(flow)
            .await?
            .into_iter()
            .map(|(name, ended)| DependentJson { name, ended })
            .collect();
        Ok(FlowPlace {
            id: flow.flow.clone(),
            index: flow.index,
            dependencies,
            dependents,
            batch: upstream.batch.map(BatchCounts::from),
        })
    }
}
