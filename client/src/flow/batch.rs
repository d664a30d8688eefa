//! Batches: a flow whose jobs wait for nothing, with callbacks that run
//! when they have all ended: `on_complete` always, `on_success` only when
//! none was dead-lettered (else it is skipped: ended as cancelled, never
//! enqueued). A batch created open takes more jobs ([`Flows::add`]) until
//! it is sealed ([`Flows::seal`]); its callbacks wait for the seal too.
//!
//! In the flow's hash, beside a flow's fields: `batch` (`open` or
//! `sealed`), `cb` the callbacks' indices, `k:<i>` a callback's kind,
//! `m:<name>` each job's index by name (an added job's name must be new),
//! `bytes` the payload bytes so far.

use std::collections::BTreeMap;

use redis::Value;

use super::plan::{BatchPlan, CallbackKind, FlowJob, Plan, Policy};
use super::spec::{MAX_FLOW_BYTES, MAX_FLOW_JOBS, check_flow_id, check_jobs};
use super::store::{describe, parked, parked_entries};
use crate::clock::millis;
use crate::outbox::{self, Entry, Parked};
use crate::reply::{number, optional_bytes, string};
use crate::{Flows, OUTBOX_SWEEP, QueueError, scripts};

/// A batch as a producer describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchSpec {
    /// The batch's id (a flow id); `None` generates one.
    pub id: Option<String>,
    /// Its jobs (none may wait for another: `after` must be empty).
    pub jobs: Vec<FlowJob>,
    /// Runs when every job has ended, however.
    pub on_complete: Option<Callback>,
    /// Runs when every job has ended and none was dead-lettered.
    pub on_success: Option<Callback>,
    /// Left open: jobs can be added until it is sealed.
    pub open: bool,
}

/// A batch's callback: the job to enqueue when the batch has ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Callback {
    /// The topic it runs in.
    pub topic: String,
    /// The bytes its handler receives.
    pub payload: Vec<u8>,
    /// Attempts; 0 for the topic's default.
    pub max_attempts: u32,
}

/// How a batch stands, as its callback sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchSummary {
    /// The batch's id.
    pub id: String,
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

/// A batch's jobs must wait for nothing.
fn check_members(id: &str, jobs: &[FlowJob]) -> Result<(), String> {
    match jobs.iter().find(|j| !j.after.is_empty()) {
        Some(j) => Err(format!(
            "batch {id}: job {:?} waits for another job: a batch's jobs wait for nothing (use a flow)",
            j.name
        )),
        None => Ok(()),
    }
}

impl BatchSpec {
    /// Check the batch and number its jobs, the callbacks last (named
    /// `on_complete` and `on_success`, names its jobs cannot take). Refused:
    /// a batch with neither jobs nor a callback, a job that waits for
    /// another, and what a flow refuses (names, topics, limits).
    pub fn plan(self, id: impl FnOnce() -> String) -> Result<Plan, String> {
        let id = self.id.unwrap_or_else(id);
        check_flow_id(&id)?;
        check_members(&id, &self.jobs)?;
        let members = self.jobs.len() as u32;
        let mut jobs = self.jobs;
        let mut callbacks = Vec::new();
        for (kind, cb) in [
            (CallbackKind::Complete, self.on_complete),
            (CallbackKind::Success, self.on_success),
        ] {
            if let Some(cb) = cb {
                callbacks.push((jobs.len() as u32, kind));
                jobs.push(FlowJob {
                    name: kind.name().to_owned(),
                    topic: cb.topic,
                    payload: cb.payload,
                    after: Vec::new(),
                    max_attempts: cb.max_attempts,
                });
            }
        }
        if jobs.is_empty() {
            return Err(format!("batch {id}: no jobs and no callback"));
        }
        check_jobs(&id, &jobs)?;
        let n = jobs.len();
        let mut deps = vec![Vec::new(); n];
        let mut dependents = vec![Vec::new(); n];
        let all: Vec<(u32, Policy)> = (0..members).map(|j| (j, Policy::Ignore)).collect();
        for &(c, _) in &callbacks {
            deps[c as usize].clone_from(&all);
            for d in &mut dependents[..members as usize] {
                d.push(c);
            }
        }
        Ok(Plan {
            id,
            jobs,
            deps,
            dependents,
            fail_fast: false,
            batch: Some(BatchPlan {
                callbacks,
                open: self.open,
            }),
        })
    }
}

impl Flows<'_> {
    /// Add `jobs` to the open batch `id`, all of them or none, and enqueue
    /// them. Refused ([`QueueError::Invalid`]): no such batch, a flow that
    /// is not a batch, a sealed or cancelled batch, a name in use, a job
    /// that waits for another, the batch's limits. Answers how many new
    /// jobs each topic got.
    pub async fn add(
        self,
        id: &str,
        jobs: &[FlowJob],
        now_ms: u64,
    ) -> Result<BTreeMap<String, usize>, QueueError> {
        let invalid = |e: String| QueueError::Invalid(e);
        check_flow_id(id).map_err(invalid)?;
        check_members(id, jobs).map_err(invalid)?;
        if jobs.is_empty() {
            return Err(invalid(format!("batch {id}: no jobs to add")));
        }
        check_jobs(id, jobs).map_err(invalid)?;
        let keys = self.keys(id);
        let (first, parked) = loop {
            let n: Option<u32> = redis::cmd("HGET")
                .arg(&keys.flow)
                .arg("n")
                .query_async(&mut self.q.conn.clone())
                .await?;
            let Some(n) = n else {
                return Err(invalid(format!("no batch {id}")));
            };
            let parked: Vec<Parked> = (n..).zip(jobs).map(|(i, job)| parked(id, job, i)).collect();
            let sweep_at = now_ms + millis(OUTBOX_SWEEP);
            let bytes: usize = jobs.iter().map(|j| j.payload.len()).sum();
            let entry = outbox::encode(&parked);
            let mut inv = scripts::FLOW_ADD.on(&keys);
            inv.arg(sweep_at)
                .arg(n)
                .arg(jobs.len())
                .arg(bytes)
                .arg(MAX_FLOW_JOBS)
                .arg(MAX_FLOW_BYTES)
                .arg(&entry);
            for job in jobs {
                inv.arg(&job.name);
            }
            let cb: Option<String> = redis::cmd("HGET")
                .arg(&keys.flow)
                .arg("cb")
                .query_async(&mut self.q.conn.clone())
                .await?;
            for (i, job) in (n..).zip(jobs) {
                inv.arg(format!("x:{i}")).arg(describe(id, job, &[], None));
                if let Some(cb) = cb.as_deref().filter(|cb| !cb.is_empty()) {
                    inv.arg(format!("d:{i}")).arg(cb);
                }
            }
            self.mark(id, sweep_at).await?;
            let reply: Vec<Value> = self.q.invoke_durable(&inv).await?;
            let code = match reply.first() {
                Some(Value::Int(c)) => Some(*c),
                _ => None,
            };
            let detail = || {
                reply
                    .get(1)
                    .map(string)
                    .transpose()
                    .ok()
                    .flatten()
                    .unwrap_or_default()
            };
            let refused = match code {
                Some(1) => break (n, parked),
                Some(0) => continue, // jobs were added meanwhile: number again
                Some(-1) => format!("no batch {id}"),
                Some(-2) => format!("flow {id} is not a batch: jobs cannot be added to it"),
                Some(-3) => format!("batch {id} is sealed: no job can be added"),
                Some(-4) => format!("batch {id} was cancelled: no job can be added"),
                Some(-5) => format!(
                    "batch {id}: {} jobs, over the limit of {MAX_FLOW_JOBS}",
                    detail()
                ),
                Some(-6) => format!(
                    "batch {id}: {} bytes of payloads, over the limit of {MAX_FLOW_BYTES}",
                    detail()
                ),
                Some(-7) => format!("batch {id}: a job named {:?} is in it already", detail()),
                other => return Err(QueueError::Protocol(format!("flow_add answered {other:?}"))),
            };
            return Err(invalid(refused));
        };
        let entries = vec![(
            format!("a:{first}"),
            Entry {
                jobs: parked,
                notices: Vec::new(),
                flows: Vec::new(),
            },
        )];
        self.deliver(&keys, &entries, now_ms).await
    }

    /// Seal batch `id`: no job can be added, and its callbacks run once its
    /// jobs have ended (at once if they have). Sealing a sealed batch changes
    /// nothing. `None` when there is no such flow; refused when it is not a
    /// batch. Answers how many new jobs each topic got.
    pub async fn seal(
        self,
        id: &str,
        now_ms: u64,
    ) -> Result<Option<BTreeMap<String, usize>>, QueueError> {
        let keys = self.keys(id);
        let head: (Option<u32>, Option<String>) = redis::cmd("HMGET")
            .arg(&keys.flow)
            .arg("n")
            .arg("batch")
            .query_async(&mut self.q.conn.clone())
            .await?;
        match head {
            (None, _) => return Ok(None),
            (Some(_), None) => {
                return Err(QueueError::Invalid(format!(
                    "flow {id} is not a batch: there is nothing to seal"
                )));
            }
            _ => {}
        }
        let sweep_at = now_ms + millis(OUTBOX_SWEEP);
        self.mark(id, sweep_at).await?;
        let mut inv = scripts::FLOW_END.on(&keys);
        inv.arg(now_ms)
            .arg(sweep_at)
            .arg(millis(super::RESERVE))
            .arg(&self.q.namespace)
            .arg("seal")
            .arg("")
            .arg("")
            .arg("0");
        let reply: Vec<Value> = self.q.invoke_durable(&inv).await?;
        if let Some(flags) = reply.first() {
            self.count_end(number(flags)?).await?;
        }
        let parked = parked_entries(reply.get(1..).unwrap_or_default())?;
        Ok(Some(self.deliver(&keys, &parked, now_ms).await?))
    }
}

/// The batch counts `flow_read.lua` answers a callback: jobs, acked, dead,
/// cancelled, then each dead job's description.
pub(super) fn summary(id: &str, reply: &[Value]) -> Result<BatchSummary, QueueError> {
    let [jobs, acked, dead, cancelled, described @ ..] = reply else {
        return Err(QueueError::Protocol(format!(
            "flow_read answered {} values for a callback",
            reply.len()
        )));
    };
    let count = |v: &Value| number(v).map(|n| n as u32);
    let mut failed = Vec::with_capacity(described.len());
    for d in described {
        let Some(d) = optional_bytes(d)? else {
            continue;
        };
        let d: super::store::Described = serde_json::from_slice(&d)
            .map_err(|e| QueueError::Protocol(format!("a batch job's description: {e}")))?;
        failed.push(d.id);
    }
    Ok(BatchSummary {
        id: id.to_owned(),
        jobs: count(jobs)?,
        acked: count(acked)?,
        dead: count(dead)?,
        cancelled: count(cancelled)?,
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Dep;

    fn member(name: &str) -> FlowJob {
        FlowJob {
            name: name.into(),
            topic: "t".into(),
            ..Default::default()
        }
    }

    fn cb() -> Option<Callback> {
        Some(Callback {
            topic: "done".into(),
            ..Default::default()
        })
    }

    #[test]
    fn callbacks_come_last_and_wait_for_every_job_and_the_seal() {
        let spec = BatchSpec {
            id: Some("b".into()),
            jobs: vec![member("a"), member("b")],
            on_complete: cb(),
            on_success: cb(),
            open: true,
        };
        let plan = spec.plan(|| unreachable!()).unwrap();
        assert_eq!(plan.jobs[2].name, "on_complete");
        assert_eq!(plan.jobs[3].name, "on_success");
        let batch = plan.batch.as_ref().unwrap();
        assert_eq!(batch.kind(3), Some(CallbackKind::Success));
        assert_eq!(batch.kind(0), None);
        assert_eq!(plan.dependents[0], [2, 3]);
        assert_eq!(plan.roots().collect::<Vec<_>>(), [0, 1]);
        // two jobs, and the seal
        assert_eq!(plan.waits(2), 3);
        // an empty sealed batch runs its callback at once
        let empty = BatchSpec {
            id: Some("e".into()),
            on_complete: cb(),
            ..Default::default()
        };
        assert_eq!(empty.plan(|| unreachable!()).unwrap().roots().count(), 1);
    }

    #[test]
    fn bad_batches_are_refused() {
        let err = |spec: BatchSpec| spec.plan(|| "b".into()).unwrap_err();
        assert_eq!(
            err(BatchSpec::default()),
            "batch b: no jobs and no callback"
        );
        let mut waits = member("x");
        waits.after.push(Dep {
            name: "a".into(),
            policy: crate::flow::Policy::Require,
        });
        let spec = BatchSpec {
            jobs: vec![member("a"), waits],
            ..Default::default()
        };
        assert!(err(spec).contains("job \"x\" waits for another job"));
        let spec = BatchSpec {
            jobs: vec![member("on_complete")],
            on_complete: cb(),
            ..Default::default()
        };
        assert!(err(spec).contains("two jobs are named \"on_complete\""));
    }
}
