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

use serde::Deserialize;
use serde_json::Value;

use crate::Config;
use crate::redis::flow::{Dep, FlowJob, FlowJobView, FlowSpec, FlowView, Policy};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowIn {
    #[serde(default)]
    id: Option<String>,
    jobs: Vec<JobIn>,
    #[serde(default)]
    fail_fast: bool,
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

/// Read a flow from `text`: TOML when `toml` is set, else JSON. Errors
/// say where (serde's line and column) and what.
pub fn parse(text: &str, toml: bool) -> Result<FlowSpec, String> {
    let flow: FlowIn = if toml {
        toml::from_str(text).map_err(|e| e.to_string())?
    } else {
        serde_json::from_str(text).map_err(|e| e.to_string())?
    };
    from_value(flow)
}

/// A flow from a JSON value (an API request's body).
pub fn from_json(value: Value) -> Result<FlowSpec, String> {
    from_value(serde_json::from_value(value).map_err(|e| e.to_string())?)
}

fn from_value(flow: FlowIn) -> Result<FlowSpec, String> {
    let jobs = flow
        .jobs
        .into_iter()
        .map(|j| {
            if j.max_attempts == Some(0) {
                return Err(format!("job {:?}: max_attempts must be at least 1", j.name));
            }
            let payload = match j.payload {
                None => Vec::new(),
                Some(Value::String(s)) => s.into_bytes(),
                Some(other) => other.to_string().into_bytes(),
            };
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
        .collect::<Result<_, String>>()?;
    Ok(FlowSpec {
        id: flow.id,
        jobs,
        fail_fast: flow.fail_fast,
    })
}

/// Every job's topic is one of `config`'s (when it names any) and its
/// payload fits `[runner] max_payload`; the error names the job.
pub fn check_against(spec: &FlowSpec, config: &Config) -> Result<(), String> {
    let max = config.runner.max_payload;
    for job in &spec.jobs {
        if !config.topics.is_empty() && config.topic(&job.topic).is_none() {
            let known: Vec<&str> = config.topics.iter().map(|t| t.name.as_str()).collect();
            return Err(format!(
                "job {:?}: no topic {:?} in queues.toml (it has {})",
                job.name,
                job.topic,
                known.join(", ")
            ));
        }
        if job.payload.len() as u64 > max {
            return Err(format!(
                "job {:?}: payload of {} bytes is over the limit of {max} bytes ([runner] max_payload)",
                job.name,
                job.payload.len()
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

/// The flow as the API and `flow show --json` give it.
pub fn to_json(flow: &FlowView) -> serde_json::Value {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    let jobs: Vec<serde_json::Value> = flow
        .jobs
        .iter()
        .map(|j| {
            *counts.entry(state(j)).or_default() += 1;
            let after: Vec<serde_json::Value> = j
                .after
                .iter()
                .map(|&(i, policy)| {
                    serde_json::json!({"name": flow.jobs[i as usize].name, "policy": policy})
                })
                .collect();
            serde_json::json!({
                "name": j.name, "topic": j.topic, "id": j.id,
                "state": state(j), "after": after,
            })
        })
        .collect();
    serde_json::json!({
        "id": flow.id,
        "created_at_ms": flow.created_ms,
        "done_at_ms": flow.done_ms,
        "cancelled_at_ms": flow.cancelled_ms,
        "counts": counts,
        "jobs": jobs,
    })
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
        assert_eq!(a.jobs[0].payload, br#"{"photo":1}"#);
        assert_eq!(a.jobs[1].payload, b"raw");
        assert_eq!(a.jobs[2].after[1].policy, Policy::Ignore);
        assert_eq!(a.jobs[2].max_attempts, 3);
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
