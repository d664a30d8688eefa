//! The `follow-up` import: the jobs a handler asks for while it runs, each
//! checked (target topic in `may_enqueue`, payload size, how many per
//! attempt, its id) and kept on the host as a [`FollowUp`], enqueued only if
//! the attempt acks; and the flows it creates (`enqueue-flow`), checked the
//! same way and planned (a cycle, an unknown dependency refused), kept until
//! the ack parks them.

use std::time::Duration;

use super::Host;
use crate::redis::FlowSpec;
use crate::redis::flow::{Dep, FlowJob, Policy};
use crate::wasm::bindings::hourglass::handler::follow_up;

/// Most follow-up jobs one attempt may start.
const MAX_FOLLOW_UPS: usize = 1000;
/// Most flows one attempt may create.
const MAX_FLOWS: usize = 16;
/// Most follow-up payload bytes one attempt may hold, beyond one `max_payload`.
const FOLLOW_UP_BYTES: u64 = 16 << 20;

/// A follow-up job a handler asked for, enqueued only if its attempt acks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowUp {
    /// The target topic (one of the parent topic's `may_enqueue`).
    pub topic: String,
    /// Its id: the handler's, or one generated here.
    pub id: String,
    /// Its payload.
    pub payload: Vec<u8>,
    /// How long after the ack it is due.
    pub delay: Duration,
    /// How long its id stays taken in the target topic (zero: while live).
    pub unique_for: Duration,
    /// Whether it is handed the parent attempt's result.
    pub with_result: bool,
    /// Its tenant key, when the handler named one (else the parent's).
    pub key: Option<String>,
    /// How long after the ack it expires unstarted, when the handler said.
    pub expires_in: Option<Duration>,
    /// Its priority in the target topic (0, the highest, by default).
    pub priority: u8,
}

impl follow_up::Host for Host {
    fn enqueue(&mut self, job: follow_up::NewJob) -> Result<String, String> {
        self.follow_up(job, Duration::ZERO, false)
    }

    fn enqueue_with_result(&mut self, job: follow_up::NewJob) -> Result<String, String> {
        self.follow_up(job, Duration::ZERO, true)
    }

    fn enqueue_keyed(&mut self, job: follow_up::NewJob, key: String) -> Result<String, String> {
        let options = follow_up::EnqueueOptions {
            key: Some(key),
            unique_for_ms: None,
            with_result: false,
            expires_in_ms: None,
            priority: None,
        };
        self.enqueue_with(job, options)
    }

    fn enqueue_unique(
        &mut self,
        job: follow_up::NewJob,
        unique_for_ms: u64,
    ) -> Result<String, String> {
        if job.id.is_none() {
            return Err("a unique follow-up needs an id".into());
        }
        self.follow_up(job, Duration::from_millis(unique_for_ms), false)
    }

    fn enqueue_with(
        &mut self,
        job: follow_up::NewJob,
        options: follow_up::EnqueueOptions,
    ) -> Result<String, String> {
        if let Some(key) = &options.key {
            crate::redis::check_key(key).map_err(|e| format!("follow-up {e}"))?;
        }
        if options.unique_for_ms.is_some() && job.id.is_none() {
            return Err("a unique follow-up needs an id".into());
        }
        let priority = options.priority.unwrap_or(0);
        if priority > crate::redis::LOWEST_PRIORITY {
            return Err(format!(
                "follow-up priority {priority} is out of range: 0 (the highest) to {}",
                crate::redis::LOWEST_PRIORITY
            ));
        }
        if let Some(ms) = options.expires_in_ms
            && ms <= job.delay_ms.unwrap_or(0)
        {
            return Err(format!(
                "a follow-up that expires {ms} ms after the ack would expire before it is due ({} ms after the ack)",
                job.delay_ms.unwrap_or(0)
            ));
        }
        let unique_for = Duration::from_millis(options.unique_for_ms.unwrap_or(0));
        let id = self.follow_up(job, unique_for, options.with_result)?;
        if let Some(f) = self.follow_ups.last_mut() {
            f.key = options.key;
            f.expires_in = options.expires_in_ms.map(Duration::from_millis);
            f.priority = priority;
        }
        Ok(id)
    }

    fn enqueue_flow(&mut self, flow: follow_up::NewFlow) -> Result<String, String> {
        in_one_job(&self.ctx, "create flows")?;
        if self.flows.len() >= MAX_FLOWS {
            return Err(format!("one attempt may create at most {MAX_FLOWS} flows"));
        }
        let mut bytes = 0;
        for job in &flow.jobs {
            if !self.may_enqueue.contains(&job.topic) {
                return Err(format!(
                    "flow job {:?}: topic {:?} may not enqueue to {:?}: add it to the topic's may_enqueue in queues.toml",
                    job.name, self.ctx.topic, job.topic
                ));
            }
            let size = job.payload.len() as u64;
            if size > self.max_payload {
                return Err(format!(
                    "flow job {:?}: payload of {size} bytes is over the limit of {} bytes ([runner] max_payload)",
                    job.name, self.max_payload
                ));
            }
            bytes += size;
        }
        let budget = FOLLOW_UP_BYTES.max(self.max_payload);
        if self.follow_up_bytes + bytes > budget {
            return Err(format!(
                "one attempt may hand on at most {} MiB of follow-up and flow payloads",
                budget >> 20
            ));
        }
        let spec = FlowSpec {
            id: Some(
                flow.id
                    .unwrap_or_else(|| format!("f-{:016x}", rand::random::<u64>())),
            ),
            jobs: flow
                .jobs
                .into_iter()
                .map(|j| FlowJob {
                    name: j.name,
                    topic: j.topic,
                    payload: j.payload,
                    after: j
                        .after
                        .into_iter()
                        .map(|d| Dep {
                            name: d.name,
                            policy: match d.policy {
                                follow_up::Policy::Require => Policy::Require,
                                follow_up::Policy::Ignore => Policy::Ignore,
                            },
                        })
                        .collect(),
                    max_attempts: j.max_attempts.unwrap_or(0),
                })
                .collect(),
            fail_fast: flow.fail_fast,
        };
        // checked now, so that the handler hears what is wrong; planned again
        // when the ack is delivered
        let id = spec.clone().plan(String::new)?.id;
        self.follow_up_bytes += bytes;
        self.flows.push(spec);
        Ok(id)
    }
}

impl Host {
    /// Check a follow-up and keep it for the ack.
    fn follow_up(
        &mut self,
        job: follow_up::NewJob,
        unique_for: Duration,
        with_result: bool,
    ) -> Result<String, String> {
        in_one_job(&self.ctx, "enqueue follow-ups")?;
        let parent = &self.ctx.topic;
        if !self.may_enqueue.contains(&job.topic) {
            return Err(format!(
                "topic {parent:?} may not enqueue to {:?}: add it to the topic's may_enqueue in queues.toml",
                job.topic
            ));
        }
        let size = job.payload.len() as u64;
        if size > self.max_payload {
            return Err(format!(
                "follow-up payload of {size} bytes is over the limit of {} bytes ([runner] max_payload)",
                self.max_payload
            ));
        }
        if self.follow_ups.len() >= MAX_FOLLOW_UPS
            || self.follow_up_bytes + size > FOLLOW_UP_BYTES.max(self.max_payload)
        {
            return Err(format!(
                "one attempt may start at most {MAX_FOLLOW_UPS} follow-ups and {} MiB of payload",
                FOLLOW_UP_BYTES.max(self.max_payload) >> 20
            ));
        }
        let id = match job.id {
            Some(id) => {
                crate::redis::check_id(&id).map_err(|e| format!("follow-up id: {e}"))?;
                id
            }
            // random, so that a follow-up delivered twice (a crash between
            // enqueueing it and clearing the outbox) is recognised as a duplicate
            None => format!("{:016x}", rand::random::<u64>()),
        };
        // a journaled attempt hands out the id an earlier attempt queued
        let id = match &self.effects {
            Some(e) => e.follow_up(&job.topic, &job.payload, id)?,
            None => id,
        };
        self.follow_up_bytes += size;
        self.follow_ups.push(FollowUp {
            topic: job.topic,
            id: id.clone(),
            payload: job.payload,
            delay: Duration::from_millis(job.delay_ms.unwrap_or(0)),
            unique_for,
            with_result,
            key: None,
            expires_in: None,
            priority: 0,
        });
        Ok(id)
    }
}

/// What belongs to one job's ack (follow-ups, flows, a result, progress,
/// durable steps) cannot be asked for in a batch call: why, if this is one.
pub(crate) fn in_one_job(ctx: &crate::wasm::JobContext, what: &str) -> Result<(), String> {
    if ctx.batch > 1 {
        return Err(format!(
            "a batch call (handle-batch, {} jobs) cannot {what}: they belong to one job's attempt; use a topic without `batch` for jobs that need it",
            ctx.batch
        ));
    }
    Ok(())
}
