//! Flows: a job runs once after every job it depends on has ended, with
//! their results; across topics on a three-master Cluster; `require` and
//! `ignore`; a release left by a runner that died is swept and enqueued
//! once; two ends at the same instant release their dependent once; bad
//! flows are refused whole.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::redis::flow::{Dep, FlowJob, FlowSpec, Policy};
use hourglass::redis::{EndState, JobEnd, Queue};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

fn job(name: &str, topic: &str, payload: Value, after: &[(&str, Policy)]) -> FlowJob {
    FlowJob {
        name: name.into(),
        topic: topic.into(),
        payload: payload.to_string().into_bytes(),
        after: after
            .iter()
            .map(|&(name, policy)| Dep {
                name: name.into(),
                policy,
            })
            .collect(),
        max_attempts: 0,
    }
}

async fn create(queue: &Queue, id: &str, jobs: Vec<FlowJob>) {
    let plan = FlowSpec {
        id: Some(id.into()),
        jobs,
        fail_fast: false,
    }
    .plan(|| unreachable!())
    .unwrap();
    queue.flows().create(&plan, now_ms()).await.unwrap();
}

/// An acked end, now.
fn acked() -> JobEnd {
    JobEnd {
        history: Vec::new(),
        logs: None,
        state: EndState::Acked,
        result: None,
        reason: None,
        version: None,
        attempts: 1,
        at_ms: now_ms(),
    }
}

mod cancel;
mod release;
mod seen;
