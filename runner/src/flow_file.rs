//! A flow as a file or an API request describes it (JSON, or TOML for a
//! file), turned into the client's [`FlowSpec`] and checked against
//! queues.toml: every job's topic must exist there and its payload fit;
//! and a flow as `flow show --json` and the API show it ([`to_json`]).
//!
//! ```json
//! {"id": "album-7",
//!  "jobs": [{"name": "thumb-1", "topic": "thumbs", "payload": {"photo": 1}},
//!           {"name": "publish", "topic": "albums", "after": ["thumb-1"]}]}
//! ```
//!
//! `after` lists names, or objects `{"name": ..., "policy": "require" |
//! "ignore"}`; `require` is the default. `"fail_fast": true` cancels every
//! job not started once one is dead-lettered. A string payload is stored as is,
//! any other JSON value as JSON text (as `POST /api/topics/{topic}/jobs`).
//!
//! A description with `on_complete` and/or `on_success` (each `{"topic",
//! "payload", "max_attempts"}`) or `"open": true` is a batch: its jobs wait
//! for nothing, its callbacks for all of them (and, while it is open, for
//! its seal).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::Config;
use crate::redis::flow::{
    BatchSpec, Callback, CallbackKind, Dep, FlowJob, FlowJobView, FlowSpec, FlowView, Plan, Policy,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowIn {
    #[serde(default)]
    id: Option<String>,
    jobs: Vec<JobIn>,
    #[serde(default)]
    fail_fast: bool,
    #[serde(default)]
    on_complete: Option<CallbackIn>,
    #[serde(default)]
    on_success: Option<CallbackIn>,
    #[serde(default)]
    open: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallbackIn {
    topic: String,
    #[serde(default)]
    payload: Option<Value>,
    #[serde(default)]
    max_attempts: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddIn {
    jobs: Vec<JobIn>,
}

/// A flow or a batch, as described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Description {
    /// Jobs with dependencies.
    Flow(FlowSpec),
    /// Jobs with callbacks.
    Batch(BatchSpec),
}

impl Description {
    /// Set its id (`--id`).
    pub fn set_id(&mut self, id: String) {
        match self {
            Description::Flow(f) => f.id = Some(id),
            Description::Batch(b) => b.id = Some(id),
        }
    }

    /// Check it and number its jobs (a generated id when it names none).
    pub fn plan(self) -> Result<Plan, String> {
        match self {
            Description::Flow(f) => f.plan(new_id),
            Description::Batch(b) => b.plan(new_id),
        }
    }

    /// Its jobs and callbacks: name, topic, payload bytes.
    fn each(&self) -> Vec<(&str, &str, usize)> {
        let jobs = match self {
            Description::Flow(f) => &f.jobs,
            Description::Batch(b) => &b.jobs,
        };
        let mut out: Vec<_> = jobs
            .iter()
            .map(|j| (j.name.as_str(), j.topic.as_str(), j.payload.len()))
            .collect();
        if let Description::Batch(b) = self {
            for (kind, cb) in [
                (CallbackKind::Complete, &b.on_complete),
                (CallbackKind::Success, &b.on_success),
            ] {
                if let Some(cb) = cb {
                    out.push((kind.name(), cb.topic.as_str(), cb.payload.len()));
                }
            }
        }
        out
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobIn {
    name: String,
    topic: String,
    #[serde(default)]
    payload: Option<Value>,
    #[serde(default)]
    after: Vec<DepIn>,
    #[serde(default)]
    max_attempts: Option<u32>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum DepIn {
    Name(String),
    Full {
        name: String,
        #[serde(default)]
        policy: Policy,
    },
}

/// Read a flow or batch from `text`: TOML when `toml` is set, else JSON.
/// Errors say where (serde's line and column) and what.
pub fn parse(text: &str, toml: bool) -> Result<Description, String> {
    from_value(read(text, toml)?)
}

fn read<T: serde::de::DeserializeOwned>(text: &str, toml: bool) -> Result<T, String> {
    if toml {
        toml::from_str(text).map_err(|e| e.to_string())
    } else {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

/// A flow or batch from a JSON value (an API request's body).
pub fn from_json(value: Value) -> Result<Description, String> {
    from_value(serde_json::from_value(value).map_err(|e| e.to_string())?)
}

/// Jobs to add to a batch (`{"jobs": [...]}`), from `text` as [`parse`]
/// reads it.
pub fn parse_jobs(text: &str, toml: bool) -> Result<Vec<FlowJob>, String> {
    jobs(read::<AddIn>(text, toml)?.jobs)
}

/// Jobs to add to a batch, from an API request's body.
pub fn jobs_from_json(value: Value) -> Result<Vec<FlowJob>, String> {
    jobs(
        serde_json::from_value::<AddIn>(value)
            .map_err(|e| e.to_string())?
            .jobs,
    )
}

fn payload(value: Option<Value>) -> Vec<u8> {
    match value {
        None => Vec::new(),
        Some(Value::String(s)) => s.into_bytes(),
        Some(other) => other.to_string().into_bytes(),
    }
}

fn from_value(flow: FlowIn) -> Result<Description, String> {
    let jobs = jobs(flow.jobs)?;
    if flow.on_complete.is_none() && flow.on_success.is_none() && !flow.open {
        return Ok(Description::Flow(FlowSpec {
            id: flow.id,
            jobs,
            fail_fast: flow.fail_fast,
        }));
    }
    if flow.fail_fast {
        return Err(
            "fail_fast is for flows, not batches (a batch's jobs run whatever the others do)"
                .into(),
        );
    }
    let callback = |name: &str, cb: Option<CallbackIn>| -> Result<Option<Callback>, String> {
        let Some(cb) = cb else { return Ok(None) };
        if cb.max_attempts == Some(0) {
            return Err(format!("{name}: max_attempts must be at least 1"));
        }
        Ok(Some(Callback {
            topic: cb.topic,
            payload: payload(cb.payload),
            max_attempts: cb.max_attempts.unwrap_or(0),
        }))
    };
    Ok(Description::Batch(BatchSpec {
        id: flow.id,
        jobs,
        on_complete: callback("on_complete", flow.on_complete)?,
        on_success: callback("on_success", flow.on_success)?,
        open: flow.open,
    }))
}

fn jobs(jobs: Vec<JobIn>) -> Result<Vec<FlowJob>, String> {
    jobs.into_iter()
        .map(|j| {
            if j.max_attempts == Some(0) {
                return Err(format!("job {:?}: max_attempts must be at least 1", j.name));
            }
            let payload = payload(j.payload);
            let after = j
                .after
                .into_iter()
                .map(|d| match d {
                    DepIn::Name(name) => Dep {
                        name,
                        policy: Policy::Require,
                    },
                    DepIn::Full { name, policy } => Dep { name, policy },
                })
                .collect();
            Ok(FlowJob {
                name: j.name,
                topic: j.topic,
                payload,
                after,
                max_attempts: j.max_attempts.unwrap_or(0),
            })
        })
        .collect()
}

/// Every job's (and callback's) topic is one of `config`'s (when it names
/// any) and its payload fits `[runner] max_payload`; the error names the job.
pub fn check_against(spec: &Description, config: &Config) -> Result<(), String> {
    check_jobs(spec.each(), config)
}

/// [`check_against`] for jobs added to a batch.
pub fn check_added(jobs: &[FlowJob], config: &Config) -> Result<(), String> {
    let each = jobs
        .iter()
        .map(|j| (j.name.as_str(), j.topic.as_str(), j.payload.len()));
    check_jobs(each.collect(), config)
}

fn check_jobs(jobs: Vec<(&str, &str, usize)>, config: &Config) -> Result<(), String> {
    let max = config.runner.max_payload;
    for (name, topic, len) in jobs {
        if !config.topics.is_empty() && config.topic(topic).is_none() {
            let known: Vec<&str> = config.topics.iter().map(|t| t.name.as_str()).collect();
            return Err(format!(
                "job {name:?}: no topic {topic:?} in queues.toml (it has {})",
                known.join(", ")
            ));
        }
        if len as u64 > max {
            return Err(format!(
                "job {name:?}: payload of {len} bytes is over the limit of {max} bytes ([runner] max_payload)"
            ));
        }
    }
    Ok(())
}

/// A job's state as `flow show` names it.
pub fn state(job: &FlowJobView) -> &str {
    match (&job.ended, job.released) {
        (Some(end), _) => end,
        (None, true) => "enqueued",
        (None, false) => "waiting",
    }
}

/// A flow as the API and `flow show --json` give it.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct FlowJson<'a> {
    id: &'a str,
    created_at_ms: u64,
    /// When its last job ended, if all have.
    done_at_ms: Option<u64>,
    cancelled_at_ms: Option<u64>,
    /// For a batch: `open` or `sealed`.
    batch: Option<&'a str>,
    /// Its jobs per state (`waiting`, `enqueued`, `acked`, `dead`, `cancelled`).
    counts: BTreeMap<&'a str, usize>,
    jobs: Vec<FlowJobJson<'a>>,
}

/// One job of a flow.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct FlowJobJson<'a> {
    name: &'a str,
    topic: &'a str,
    id: &'a str,
    /// `waiting` (for its dependencies), `enqueued`, or how it ended
    state: &'a str,
    /// The jobs it waits for.
    after: Vec<AfterJson<'a>>,
    /// For a batch's callback: `on_complete` or `on_success`.
    #[serde(skip_serializing_if = "Option::is_none")]
    callback: Option<&'static str>,
    /// Why a job that did not ack ended so: a skipped `on_success`'s
    /// `skipped: N job(s) of the batch were dead-lettered`, a cancel's, a
    /// dead letter's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

/// A job a flow job waits for.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct AfterJson<'a> {
    name: &'a str,
    policy: Policy,
}

/// The flow as the API and `flow show --json` give it.
pub fn to_json(flow: &FlowView) -> FlowJson<'_> {
    let mut counts = BTreeMap::new();
    let jobs = flow
        .jobs
        .iter()
        .map(|j| {
            *counts.entry(state(j)).or_default() += 1;
            let after = j
                .after
                .iter()
                .map(|&(i, policy)| AfterJson {
                    name: &flow.jobs[i as usize].name,
                    policy,
                })
                .collect();
            FlowJobJson {
                name: &j.name,
                topic: &j.topic,
                id: &j.id,
                state: state(j),
                after,
                callback: j.callback.map(|kind| kind.name()),
                reason: j.reason.as_deref(),
            }
        })
        .collect();
    FlowJson {
        id: &flow.id,
        created_at_ms: flow.created_ms,
        done_at_ms: flow.done_ms,
        cancelled_at_ms: flow.cancelled_ms,
        batch: flow.batch.as_deref(),
        counts,
        jobs,
    }
}

/// A new flow id: `f-` and 16 hex digits of randomness.
pub fn new_id() -> String {
    format!("f-{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_toml_describe_the_same_flow() {
        let json = r#"{"id": "album-7", "jobs": [
            {"name": "t1", "topic": "thumbs", "payload": {"photo": 1}},
            {"name": "t2", "topic": "thumbs", "payload": "raw"},
            {"name": "publish", "topic": "albums",
             "after": ["t1", {"name": "t2", "policy": "ignore"}], "max_attempts": 3}]}"#;
        let toml = r#"
            id = "album-7"
            [[jobs]]
            name = "t1"
            topic = "thumbs"
            payload = { photo = 1 }
            [[jobs]]
            name = "t2"
            topic = "thumbs"
            payload = "raw"
            [[jobs]]
            name = "publish"
            topic = "albums"
            after = ["t1", { name = "t2", policy = "ignore" }]
            max_attempts = 3
        "#;
        let a = parse(json, false).unwrap();
        assert_eq!(a, parse(toml, true).unwrap());
        let Description::Flow(a) = a else {
            panic!("a flow")
        };
        assert_eq!(a.jobs[0].payload, br#"{"photo":1}"#);
        assert_eq!(a.jobs[1].payload, b"raw");
        assert_eq!(a.jobs[2].after[1].policy, Policy::Ignore);
        assert_eq!(a.jobs[2].max_attempts, 3);
    }

    #[test]
    fn callbacks_or_open_make_a_batch() {
        let json = r#"{"id": "imp", "open": true,
            "jobs": [{"name": "c1", "topic": "rows", "payload": "1-100"}],
            "on_success": {"topic": "emails", "payload": {"to": "ops"}, "max_attempts": 2}}"#;
        let Description::Batch(b) = parse(json, false).unwrap() else {
            panic!("a batch")
        };
        assert!(b.open && b.on_complete.is_none());
        let cb = b.on_success.unwrap();
        assert_eq!((cb.topic.as_str(), cb.max_attempts), ("emails", 2));
        assert_eq!(cb.payload, br#"{"to":"ops"}"#);
        let err = |s| parse(s, false).unwrap_err();
        assert!(
            err(r#"{"jobs": [], "open": true, "fail_fast": true}"#)
                .contains("fail_fast is for flows")
        );
        assert!(
            err(r#"{"jobs": [], "on_complete": {"topic": "t", "max_attempts": 0}}"#)
                .contains("on_complete: max_attempts must be at least 1")
        );
        let added = parse_jobs(r#"{"jobs": [{"name": "c2", "topic": "rows"}]}"#, false).unwrap();
        assert_eq!(added[0].name, "c2");
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let err = |s| parse(s, false).unwrap_err();
        assert!(err(r#"{"jobs": [{"name": "a"}]}"#).contains("missing field `topic`"));
        assert!(err(r#"{"jobs": [], "extra": 1}"#).contains("unknown field `extra`"));
        assert!(
            err(r#"{"jobs": [{"name": "a", "topic": "t", "after": [{"name": "b", "policy": "maybe"}]}]}"#)
                .contains("did not match any variant")
        );
        assert!(
            err(r#"{"jobs": [{"name": "a", "topic": "t", "max_attempts": 0}]}"#)
                .contains("max_attempts must be at least 1")
        );
    }
}
