//! What `inspect --json`, `wait --json` and the HTTP API show of a job:
//! typed, so the API's OpenAPI description (feature `openapi`) derives each
//! answer's schema from the very type that is serialized.

use base64::Engine;
use serde::Serialize;

mod flow;
mod journal;

pub use flow::{BatchCounts, DependencyJson, DependentJson, FlowPlace};
pub use journal::{JournalJson, SignalJson, StepJson};

use super::{
    AttemptCost, DeadInfo, EndState, Failure, FlowRef, JobEnd, JobState, JobView, Journal,
    Progress, Queue, QueueError, Record, Standing, Suspension, TopicDefaults, TopicKeys,
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
    /// A job of a flow that its topic does not hold yet: waiting in its
    /// flow for the jobs it depends on.
    InFlow(Box<InFlowJson>),
}

impl JobJson {
    /// Where it stands, as its `state` field says (`scheduled`, `ready`,
    /// `running`, `dead`; `acked`, `cancelled`, `expired` once ended;
    /// `waiting_in_flow`, `released`).
    pub fn state(&self) -> &'static str {
        match self {
            JobJson::Live(live) => live.state,
            JobJson::Ended(end) => end.state.as_str(),
            JobJson::InFlow(flow) => flow.state,
        }
    }
}

/// A job of a flow still waiting in its flow (not yet in its topic).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InFlowJson {
    /// Its topic.
    pub topic: String,
    /// Its id.
    pub id: String,
    /// `waiting_in_flow` (jobs it depends on have not all ended) or
    /// `released` (they have: it is being enqueued into its topic)
    pub state: &'static str,
    /// The names of the jobs it waits for that have not ended.
    pub waiting_for: Vec<String>,
    /// Its place in its flow: the jobs it waits for and those that wait
    /// for it, with how each stands.
    pub flow: FlowPlace,
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
    /// Its story: each attempt so far (the most recent 25), with when and
    /// where it ran, how it ended and what it used.
    pub history: Vec<AttemptCost>,
    /// The bytes of log lines it keeps (`GET .../logs` reads them).
    pub logs_bytes: u64,
    /// The payload in base64, when it is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
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
    /// Its story: each attempt (the most recent 25), when its topic keeps it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<AttemptCost>,
    /// The bytes of log lines kept with its end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs_bytes: Option<usize>,
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
            history: self.history.clone(),
            logs_bytes: self.logs.as_ref().map(Vec::len),
        }
    }

    /// [`JobEnd::shown`] as a JSON value (`hourglass wait --json`).
    pub fn to_json(&self, id: &str) -> serde_json::Value {
        serde_json::to_value(self.shown(id)).expect("an end serializes")
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
            history: v.history.clone(),
            logs_bytes: v.logs_bytes,
            payload_base64: record
                .filter(|r| std::str::from_utf8(&r.payload).is_err())
                .map(|r| base64::engine::general_purpose::STANDARD.encode(&r.payload)),
            progress: v.progress.clone(),
            parent_result_bytes: record.and_then(|r| r.parent_result.as_ref().map(Vec::len)),
            traceparent: record.and_then(|r| r.trace.as_ref().map(|t| t.traceparent.clone())),
            journal: v.journal.as_ref().map(Journal::shown),
            suspended: v.suspension.clone(),
            key: v.key.clone(),
            priority: v.priority,
            // an expired dead letter left the expiry index: its record keeps the deadline
            expires_at_ms: v.expires_at_ms.or(match &v.state {
                JobState::Dead(info) => info.expires_at_ms,
                _ => None,
            }),
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
            Standing::InFlow {
                flow,
                index,
                released,
                waiting_for,
            } => {
                let flow = self.flow_place(&FlowRef { flow, index }).await?;
                Some(JobJson::InFlow(Box::new(InFlowJson {
                    topic: topic.to_owned(),
                    id: id.to_owned(),
                    state: if released {
                        "released"
                    } else {
                        "waiting_in_flow"
                    },
                    waiting_for,
                    flow,
                })))
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
