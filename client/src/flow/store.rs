//! The [`Flows`] handle: create a flow, tell it its jobs' ends, cancel it,
//! sweep the releases a runner left (reading one is in `view.rs`).
//!
//! A flow's hash (`<ns>:{flow:<id>}:flow`, [`Flows::keys`]): `n` jobs,
//! `created`, `ended`, `dead`, `done` (when the last ended), `ff` (fail
//! fast), `cancelled`, `reviving` (revived jobs still to end); per job `i`:
//! `x:i` its description (JSON: name, topic, id, after), `j:i` its outbox
//! entry (a dependent, enqueued when released), `w:i` how many of its
//! dependencies have not ended, `d:i` its dependents (comma-separated),
//! `s:i` and `r:i` how it ended (state, encoded [`JobEnd`]), `b:i` set when
//! it was dead-lettered unrun because of a dependency, `v:i` while revived;
//! `origin` for a flow a handler created: the outbox entry that carried it.

use std::collections::BTreeMap;

use redis::Value;
use serde::{Deserialize, Serialize};

use super::plan::{CallbackKind, FlowJob, Plan, Policy};
use super::spec::FlowSpec;
use super::wire::{FlowRef, Notice};
use super::{BLOCKED, RESERVE, job_id};
use crate::clock::millis;
use crate::outbox::{self, Entry, Parked};
use crate::reply::bytes;
use crate::{JobEnd, NewJob, OUTBOX_SWEEP, Queue, QueueError, TopicKeys, scripts};

/// Flows ([`Queue::flows`]).
#[derive(Clone, Copy)]
pub struct Flows<'q> {
    pub(crate) q: &'q Queue,
}

/// A job's description as its flow keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Described {
    pub(super) name: String,
    pub(super) topic: String,
    pub(super) id: String,
    pub(super) after: Vec<(u32, Policy)>,
    /// Set for a batch's callback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) callback: Option<CallbackKind>,
}

impl Queue {
    /// Flows: create, tell their jobs' ends, show, sweep.
    pub fn flows(&self) -> crate::Flows<'_> {
        crate::Flows { q: self }
    }
}

impl Flows<'_> {
    /// The keys of flow `id`: the pseudo-topic `flow:<id>`, whose `flow`
    /// hash, `outbox` and `outbox_due` share one hash tag.
    pub fn keys(self, id: &str) -> TopicKeys {
        self.q.keys(&format!("flow:{id}"))
    }

    /// The index of flows that may have releases to sweep: id → when.
    pub(super) fn index(self) -> String {
        crate::keys::flows_due(&self.q.namespace)
    }

    /// Create the flow `plan` in one step and enqueue its roots. Refused
    /// with [`QueueError::Exists`] when a flow with its id exists. Answers
    /// how many new jobs each topic got.
    pub async fn create(
        self,
        plan: &Plan,
        now_ms: u64,
    ) -> Result<BTreeMap<String, usize>, QueueError> {
        self.create_from(plan, now_ms, None).await
    }

    async fn create_from(
        self,
        plan: &Plan,
        now_ms: u64,
        origin: Option<&str>,
    ) -> Result<BTreeMap<String, usize>, QueueError> {
        let id = &plan.id;
        let parked = |i: u32| parked(id, &plan.jobs[i as usize], i);
        let roots: Vec<Parked> = plan.roots().map(parked).collect();
        let keys = self.keys(id);
        let sweep_at = now_ms + millis(OUTBOX_SWEEP);
        let mut inv = scripts::FLOW_CREATE.on(&keys);
        inv.arg(now_ms)
            .arg(sweep_at)
            .arg(plan.jobs.len())
            .arg(outbox::encode(&roots))
            .arg(if plan.fail_fast { "1" } else { "0" });
        let callback = |i: u32| plan.batch.as_ref().and_then(|b| b.kind(i));
        for (i, job) in plan.jobs.iter().enumerate() {
            let kind = callback(i as u32);
            // a callback's dependencies (every job of its batch) are counted,
            // not listed
            let after = if kind.is_some() {
                &[][..]
            } else {
                &plan.deps[i][..]
            };
            inv.arg(format!("x:{i}"))
                .arg(describe(id, job, after, kind));
            let waits = plan.waits(i as u32);
            if waits > 0 {
                inv.arg(format!("j:{i}"))
                    .arg(outbox::encode(&[parked(i as u32)]))
                    .arg(format!("w:{i}"))
                    .arg(waits);
            }
            if !plan.dependents[i].is_empty() {
                let list: Vec<String> = plan.dependents[i].iter().map(u32::to_string).collect();
                inv.arg(format!("d:{i}")).arg(list.join(","));
            }
        }
        if let Some(batch) = &plan.batch {
            batch.fields(plan, &mut inv);
        }
        if let Some(origin) = origin {
            inv.arg("origin").arg(origin);
        }
        self.mark(id, sweep_at).await?;
        let created: i64 = self.q.invoke_durable(&inv).await?;
        if created == 0 {
            return Err(QueueError::Exists(format!(
                "a flow with id {id:?} exists: choose another id"
            )));
        }
        self.created(id, now_ms).await?;
        let entries = vec![(
            "roots".to_owned(),
            Entry {
                jobs: roots,
                notices: Vec::new(),
                flows: Vec::new(),
            },
        )];
        self.deliver(&keys, &entries, now_ms).await
    }

    /// Create the flow a handler described (`spec`, its id set), parked
    /// with its ack under `origin`: a second delivery finds the flow its
    /// first created and adds nothing. A flow of another origin with the
    /// same id, or a spec that no longer plans (checked when the handler
    /// made it), is logged and dropped: retrying cannot help it.
    pub async fn create_once(
        self,
        spec: &FlowSpec,
        origin: &str,
        now_ms: u64,
    ) -> Result<BTreeMap<String, usize>, QueueError> {
        let plan = match spec.clone().plan(String::new) {
            Ok(plan) => plan,
            Err(e) => {
                tracing::warn!(origin, "a flow a handler created is refused, dropped: {e}");
                return Ok(BTreeMap::new());
            }
        };
        match self.create_from(&plan, now_ms, Some(origin)).await {
            Err(QueueError::Exists(why)) => {
                let by: Option<String> = redis::cmd("HGET")
                    .arg(self.keys(&plan.id).flow)
                    .arg("origin")
                    .query_async(&mut self.q.conn.clone())
                    .await?;
                if by.as_deref() != Some(origin) {
                    tracing::warn!(origin, "a flow a handler created is dropped: {why}");
                }
                Ok(BTreeMap::new())
            }
            other => other,
        }
    }

    /// Mark flow `id` for the sweep at `at_ms`: before anything is parked
    /// in its outbox, so that nothing parked is left unswept.
    pub(super) async fn mark(self, id: &str, at_ms: u64) -> Result<(), QueueError> {
        let _: i64 = redis::cmd("ZADD")
            .arg(self.index())
            .arg(at_ms)
            .arg(id)
            .query_async(&mut self.q.conn.clone())
            .await?;
        Ok(())
    }

    /// Enqueue the released jobs of `entries` and clear them from the flow's
    /// outbox. A revived job (token `v:<index>`) is enqueued afresh over its
    /// dead letter: without its id's reservation, which would refuse it.
    pub(super) async fn deliver(
        self,
        keys: &TopicKeys,
        entries: &[(String, Entry)],
        now_ms: u64,
    ) -> Result<BTreeMap<String, usize>, QueueError> {
        let p = self.q.pipeline();
        let mut entries = entries.to_vec();
        for (token, entry) in &mut entries {
            if token.starts_with("v:") {
                entry.jobs.iter_mut().for_each(|p| p.job.unique_for_ms = 0);
            }
            // a released job is due when it became ready, now: its lateness
            // (and the due time its handler sees) counts from here
            for p in &mut entry.jobs {
                if p.job.due_at_ms == 0 {
                    p.job.due_at_ms = now_ms;
                }
            }
        }
        let entries = &entries[..];
        let new = p.enqueue_parked(entries, now_ms).await?;
        p.clear(keys, entries).await?;
        Ok(new)
    }

    /// Tell flows the ends in `notices` (`flow_end.lua`) and enqueue the
    /// dependents that became ready. Answers how many new jobs each topic got.
    pub async fn end(
        self,
        notices: &[&Notice],
        now_ms: u64,
    ) -> Result<BTreeMap<String, usize>, QueueError> {
        let mut by_flow: BTreeMap<&str, Vec<&Notice>> = BTreeMap::new();
        for n in notices {
            by_flow.entry(&n.job.flow).or_default().push(n);
        }
        let sweep_at = now_ms + millis(OUTBOX_SWEEP);
        let mut new = BTreeMap::new();
        for (id, notices) in by_flow {
            let keys = self.keys(id);
            self.mark(id, sweep_at).await?;
            let mut inv = scripts::FLOW_END.on(&keys);
            inv.arg(now_ms)
                .arg(sweep_at)
                .arg(millis(RESERVE))
                .arg(&self.q.namespace);
            for n in notices {
                let blocked = n.end.state == crate::EndState::Dead
                    && n.end
                        .reason
                        .as_deref()
                        .is_some_and(|r| r.starts_with(BLOCKED));
                inv.arg(n.job.index)
                    .arg(n.end.state.as_str())
                    .arg(n.end.encode())
                    .arg(if blocked { "1" } else { "0" });
            }
            let reply: Vec<Value> = self.q.invoke_durable(&inv).await?;
            let Some((flags, parked)) = reply.split_first() else {
                return Err(QueueError::Protocol("flow_end answered nothing".into()));
            };
            let flags = crate::reply::number(flags)?;
            self.count_end(flags).await?;
            if flags & 1 == 1 {
                // fail_fast: a job died; the rest of the flow will not
                // start. What this end released stays parked, unsent: the
                // cancel finds it in the outbox and ends it as cancelled.
                Box::pin(self.cancel(id, now_ms, &|_| None)).await?;
                continue;
            }
            let entries = parked_entries(parked)?;
            if !entries.is_empty() {
                for (topic, n) in self.deliver(&keys, &entries, now_ms).await? {
                    *new.entry(topic).or_default() += n;
                }
            }
        }
        Ok(new)
    }

    /// Cancel flow `id`: every job that has not started is cancelled (those
    /// still waiting, here; those enqueued, in their topics, keeping their
    /// end there for `keep(topic)`); running ones finish, their outcome
    /// discarded, as `hourglass cancel` does. `None` when there is no such
    /// flow; else how many jobs were cancelled in their topics.
    pub async fn cancel(
        self,
        id: &str,
        now_ms: u64,
        keep: &(dyn Fn(&str) -> Option<std::time::Duration> + Sync),
    ) -> Result<Option<usize>, QueueError> {
        let end = JobEnd {
            state: crate::EndState::Cancelled,
            result: None,
            reason: Some(format!("flow {id} was cancelled")),
            version: None,
            attempts: 0,
            at_ms: now_ms,
            history: Vec::new(),
            logs: None,
        };
        let reply: Value = scripts::FLOW_CANCEL
            .on(&self.keys(id))
            .arg(now_ms)
            .arg(millis(RESERVE))
            .arg(end.encode())
            .arg(&self.q.namespace)
            .invoke_async(&mut self.q.conn.clone())
            .await?;
        let live: Vec<u32> = match reply {
            Value::Nil => return Ok(None),
            Value::Array(items) => {
                let mut numbers = items
                    .iter()
                    .map(|v| crate::reply::number(v).map(|n| n as u32));
                if numbers.next().transpose()? == Some(1) {
                    self.count("failed", 1).await?;
                }
                numbers.collect::<Result<_, _>>()?
            }
            other => {
                return Err(QueueError::Protocol(format!(
                    "flow_cancel answered {other:?}"
                )));
            }
        };
        let mut by_topic: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for d in self.describe(id, &live).await? {
            by_topic.entry(d.topic).or_default().push(d.id);
        }
        let mut cancelled = 0;
        for (topic, ids) in by_topic {
            let keys = self.q.keys(&topic);
            let was = self
                .q
                .admin()
                .cancel(&keys, &ids, now_ms, keep(&topic))
                .await?;
            cancelled += was.iter().flatten().count();
        }
        Ok(Some(cancelled))
    }

    /// Deliver the releases of up to `limit` flows whose runner did not
    /// deliver them in time (it died between parking and enqueueing).
    /// Answers how many new jobs each topic got.
    pub async fn sweep(
        self,
        now_ms: u64,
        limit: usize,
    ) -> Result<BTreeMap<String, usize>, QueueError> {
        let due: Vec<(String, String)> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.index())
            .arg("-inf")
            .arg(now_ms)
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut self.q.conn.clone())
            .await?;
        let mut new = BTreeMap::new();
        for (id, score) in due {
            let keys = self.keys(&id);
            let taken = self.q.pipeline().take_outbox(&keys, now_ms, 1000).await?;
            if taken.is_empty() {
                // entries another sweeper holds (it may die delivering them):
                // look again when its hold ends, never forget the flow
                let held: u64 = redis::cmd("HLEN")
                    .arg(&keys.outbox)
                    .query_async(&mut self.q.conn.clone())
                    .await?;
                if held > 0 {
                    self.mark(&id, now_ms + millis(OUTBOX_SWEEP)).await?;
                    continue;
                }
                let _: i64 = scripts::FLOW_UNINDEX
                    .bare()
                    .key(self.index())
                    .arg(&id)
                    .arg(&score)
                    .invoke_async(&mut self.q.conn.clone())
                    .await?;
                continue;
            }
            let mut entries = Vec::with_capacity(taken.len());
            for (token, entry) in taken {
                match entry {
                    Ok(entry) => entries.push((token, entry)),
                    // left where it is: the sweep holds it a while and tries again
                    Err(e) => {
                        tracing::warn!(flow = %id, token, "a flow's outbox entry cannot be read: {e}")
                    }
                }
            }
            for (topic, n) in self.deliver(&keys, &entries, now_ms).await? {
                *new.entry(topic).or_default() += n;
            }
        }
        Ok(new)
    }
}

/// Job `i` of flow `id` as its release parks it: enqueued under its fixed
/// id, reserved for [`RESERVE`], carrying its [`FlowRef`].
pub(super) fn parked(id: &str, job: &FlowJob, i: u32) -> Parked {
    Parked {
        topic: job.topic.clone(),
        job: NewJob {
            id: Some(job_id(id, &job.name)),
            payload: job.payload.clone(),
            due_at_ms: 0,
            max_attempts: job.max_attempts,
            unique_for_ms: millis(RESERVE),
            flow: Some(FlowRef {
                flow: id.to_owned(),
                index: i,
            }),
            ..Default::default()
        },
    }
}

/// Job `job` of flow `id` as the flow describes it (`x:<index>`).
pub(super) fn describe(
    id: &str,
    job: &FlowJob,
    after: &[(u32, super::Policy)],
    callback: Option<CallbackKind>,
) -> Vec<u8> {
    let described = Described {
        name: job.name.clone(),
        topic: job.topic.clone(),
        id: job_id(id, &job.name),
        after: after.to_vec(),
        callback,
    };
    serde_json::to_vec(&described).expect("a description serializes")
}

/// The (token, entry) pairs `flow_end.lua` parked.
pub(super) fn parked_entries(reply: &[Value]) -> Result<Vec<(String, Entry)>, QueueError> {
    reply
        .chunks(2)
        .map(|pair| match pair {
            [token, entry] => {
                let token = crate::reply::string(token)?;
                let entry = outbox::decode_entry(&bytes(entry)?)
                    .map_err(|e| QueueError::Protocol(format!("flow release {token}: {e}")))?;
                Ok((token, entry))
            }
            other => Err(QueueError::Protocol(format!("flow_end answered {other:?}"))),
        })
        .collect()
}
