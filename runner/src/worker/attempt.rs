//! One attempt of one job, the walk after the claim: hold it until it is
//! due, prepare its input, pick the version it runs on, run it in a fresh
//! instance, decide what its end asks for, tell the watchers (`watch/`),
//! hand the decision to the committer.
//!
//! An [`InFlight`] is the guard of a claimed job: it holds the job's capacity
//! ([`Slot`]) and owes the committer exactly one [`Completion`]. Dropped
//! without one (its task was stopped at shutdown), it sends a release, so
//! every attempt's end goes through the committer and comes out as an event.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::capacity::Slot;
use super::decide::{self, Decision};
use super::watch::{Attempt, Ending};
use super::{Shared, Topic};
use crate::clock::now_ms;
use crate::config::TopicConfig;
use crate::redis::flow::Policy;
use crate::redis::{AttemptCost, ClaimedJob, EndState, FlowRef, Upstream, Usage};
use crate::wasm::{Attempted, Finish, LoadedHandler, StepCounts};

/// A finished attempt on its way to Redis.
pub(super) struct Completion {
    /// The topic version the attempt ran with.
    pub topic: Arc<Topic>,
    /// The job.
    pub id: String,
    /// The attempt's number: the fence its state change is checked against.
    pub attempt: u32,
    /// The handler version that ran it (or would have).
    pub version: Arc<str>,
    /// What it asks for.
    pub decision: Decision,
    /// When it was decided (ms): the time of the ack, burial or release.
    pub at_ms: u64,
    /// The flow the job belongs to, told of its end.
    pub flow: Option<FlowRef>,
    /// What the attempt logged, as its job keeps it ('' for nothing).
    pub logs: String,
}

/// The guard of one claimed job: its capacity, and the one completion it owes.
pub(super) struct InFlight {
    topic: Arc<Topic>,
    id: String,
    attempt: u32,
    version: Arc<str>,
    flow: Option<FlowRef>,
    /// What the attempt logged, handed on with its decision.
    logs: String,
    commits: mpsc::UnboundedSender<Completion>,
    committed: bool,
    /// The capacity it holds: every job's own, or for a batch call the
    /// first job's for the whole call (`batch.rs`).
    _slot: Option<Slot>,
}

impl InFlight {
    /// The guard of attempt `attempt` of job `id` on handler `version`, holding `slot`
    /// until it is dropped (none: a job of a batch call, whose first job's
    /// guard holds the call's).
    pub fn new(
        topic: Arc<Topic>,
        id: String,
        attempt: u32,
        version: Arc<str>,
        slot: Option<Slot>,
        commits: mpsc::UnboundedSender<Completion>,
    ) -> InFlight {
        InFlight {
            topic,
            id,
            attempt,
            version,
            flow: None,
            logs: String::new(),
            commits,
            committed: false,
            _slot: slot,
        }
    }

    /// The topic version it runs with.
    pub(super) fn topic(&self) -> &Arc<Topic> {
        &self.topic
    }

    /// The job's id.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// Hand what the attempt logged on with its decision.
    pub(super) fn logged(&mut self, logs: String) {
        self.logs = logs;
    }

    /// Hand `decision` to the committer (once: the guard keeps only its slot after).
    pub(super) fn complete(&mut self, decision: Decision, at_ms: u64) {
        self.committed = true;
        let completion = Completion {
            topic: self.topic.clone(),
            id: std::mem::take(&mut self.id),
            attempt: self.attempt,
            version: self.version.clone(),
            decision,
            at_ms,
            flow: self.flow.take(),
            logs: std::mem::take(&mut self.logs),
        };
        if let Err(lost) = self.commits.send(completion) {
            let c = lost.0;
            tracing::error!(topic = %c.topic.cfg.name, job_id = %c.id, attempt = c.attempt, "committer gone; the lease will expire and the job run again");
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.committed {
            // stopped before it could decide (shutdown): give the job back uncounted
            self.complete(Decision::Release, now_ms());
        }
    }
}

/// Run `job` with `handler` (a canary's, if `canary`), decide, and hand the
/// decision to the committer; `pooled`: it runs on the pool (for metrics).
/// Returns the guard: the scheduler drops it (freeing the slot) when it
/// reaps the task.
pub(super) async fn run(
    shared: Arc<Shared>,
    handler: LoadedHandler,
    canary: bool,
    job: ClaimedJob,
    mut flight: InFlight,
    pooled: bool,
) -> InFlight {
    hold_until_due(job.due_at_ms).await;
    let topic = flight.topic.clone();
    let cfg = &topic.cfg;
    flight.flow = job.record.as_ref().ok().and_then(|r| r.flow.clone());
    let mut ready = match decide::before_run(cfg, job, now_ms()) {
        Ok(ready) => ready,
        Err(decision) => {
            flight.complete(decision, now_ms());
            return flight;
        }
    };
    if let Some(flow) = &flight.flow {
        // boxed: only flow jobs wait here, and the attempt's task (every
        // job's) should not carry this wait's state
        match Box::pin(dependencies(&shared, &cfg.name, flow, ready.input.attempt)).await {
            Ok(upstream) => ready.input.upstream = upstream,
            Err(decision) => {
                flight.complete(decision, now_ms());
                return flight;
            }
        }
    }
    let Some((handler, canary)) = pick_version(&shared, &mut flight, handler, canary, &ready).await
    else {
        return flight;
    };
    let (mut input, earlier, account, key) = (ready.input, ready.earlier, ready.account, ready.key);
    let signals = ready.signals;
    let deadline = ready.deadline;
    // the attempt's span, when spans are exported: a child of the producer's
    let (span, trace) = (shared.telemetry.attempt(ready.trace.as_ref()), ready.trace);
    if span.is_none() {
        input.pass_through.clone_from(&trace);
    }
    input.trace = span.clone();
    let (number, max_attempts) = (input.attempt, input.max_attempts);
    let attempt = Attempt {
        topic: &cfg.name,
        id: &flight.id,
        number,
        version: handler.version(),
        account: account.as_deref(),
        key: key.as_deref(),
        due_at_ms: input.due_at_ms,
        started_at_ms: now_ms(),
        span: span.as_deref(),
        pooled,
    };
    let watchers = shared.watchers();
    watchers.started(&attempt);
    let Attempted {
        mut finish,
        usage,
        steps,
        effects,
        logs,
    } = Box::pin(shared.runtime.run(&handler, input, &topic.sandbox)).await;
    // (boxed: the attempt's task then carries 2.9 KB instead of 5 KB of
    // state, which measured 0.95x the runner CPU per job against 1.13x)
    shared.meter.steps(&cfg.name, steps);
    shared.meter.effects(&cfg.name, effects);
    let ran = Ran {
        usage,
        steps,
        signals: &signals,
        runner: &shared.runner_id,
    };
    let (mut decision, at_ms) = decide(
        cfg,
        &attempt,
        canary,
        max_attempts,
        &mut finish,
        ran,
        earlier,
    );
    // a retry due at or after the job's deadline would never start: it expires now
    decision = decide::before_deadline(decision, deadline, number);
    // follow-ups continue the trace: under this attempt's span, or the job's
    decision.continue_trace(|| span.as_ref().map(|s| s.span.trace_context()).or(trace));
    decision.inherit_key(key.as_deref());
    let ending = Ending {
        finish: &finish,
        usage: &usage,
        decision: &decision,
        at_ms,
    };
    watchers.ended(&attempt, &ending);
    flight.logged(logs);
    flight.complete(decision, at_ms);
    flight
}

/// What the job's story keeps of an attempt besides how it ended.
pub(super) struct Ran<'a> {
    /// What it used.
    pub usage: Usage,
    /// A durable handler's steps it recorded and replayed.
    pub steps: StepCounts,
    /// The signals its journal held as it started.
    pub signals: &'a [String],
    /// The runner it ran on.
    pub runner: &'a str,
}

/// What `attempt` (on a canary's version if `canary`; number of
/// `max_attempts`), which ended with `finish` having `ran` so, asks for now,
/// with a fresh jitter draw; `earlier` is the job's story before it.
/// Returns the decision and its time.
pub(super) fn decide(
    cfg: &TopicConfig,
    attempt: &Attempt<'_>,
    canary: bool,
    max_attempts: u32,
    finish: &mut Finish,
    ran: Ran<'_>,
    earlier: Vec<AttemptCost>,
) -> (Decision, u64) {
    let number = attempt.number;
    let (at_ms, unit) = (now_ms(), rand::random::<f64>());
    let this = || {
        let mut a = AttemptCost::new(number, Some(attempt.version.to_string()), ran.usage);
        a.due_at_ms = attempt.due_at_ms;
        a.started_at_ms = attempt.started_at_ms;
        a.ended_at_ms = at_ms;
        a.runner = Some(ran.runner.to_owned());
        a.steps_recorded = ran.steps.recorded;
        a.steps_replayed = ran.steps.replayed;
        a.signals = ran.signals.to_vec();
        a
    };
    let costs = decide::costs(earlier, finish, this, cfg.results.is_some());
    let on = decide::RanOn {
        version: attempt.version,
        canary,
    };
    let decision = decide::after_run(cfg, on, number, max_attempts, finish, at_ms, unit, costs);
    (decision, at_ms)
}

/// What a flow job's attempt needs of its flow: its dependencies, each with
/// how it ended; or the decision instead: dead-lettered unrun when one it
/// requires did not ack, released (uncounted) when Redis did not answer.
async fn dependencies(
    shared: &Shared,
    topic: &str,
    flow: &FlowRef,
    attempt: u32,
) -> Result<Upstream, Decision> {
    let read = shared.queue.flows().dependencies(flow);
    let upstream = match tokio::time::timeout(std::time::Duration::from_secs(10), read).await {
        Ok(Ok(Some(upstream))) => upstream,
        Ok(Ok(None)) => {
            tracing::warn!(topic, flow = %flow.flow, "the job's flow is gone (expired or purged): it runs without its dependencies");
            return Ok(Upstream::default());
        }
        Ok(Err(e)) => {
            tracing::warn!(topic, flow = %flow.flow, "the job's flow was not read, released to run later: {e}");
            return Err(Decision::Release);
        }
        Err(_) => {
            tracing::warn!(topic, flow = %flow.flow, "the job's flow was not read within 10s, released to run later");
            return Err(Decision::Release);
        }
    };
    let failed = upstream.dependencies.iter().find(|d| {
        d.policy == Policy::Require && d.end.as_ref().is_none_or(|e| e.state != EndState::Acked)
    });
    match failed {
        Some(dep) => Err(decide::dependency_failed(attempt, dep, now_ms())),
        None => Ok(upstream),
    }
}

/// Claimed a little ahead (scheduler.rs: CLAIM_AHEAD): never start early.
/// Sleeping whole ms from a whole-ms clock ends at or after the due time;
/// bounded, so that a wall clock stepped back holds no job for long.
pub(super) async fn hold_until_due(due_at_ms: u64) {
    let hold = due_at_ms.saturating_sub(now_ms());
    if hold > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(hold.min(1_000))).await;
    }
}

/// The version to run `ready` on, and whether it runs as a canary: a job
/// pinned to a version runs on it, whatever the topic serves (never as a
/// canary). `None` when the pinned version cannot be loaded here: the job is
/// then dead-lettered, through `flight`.
async fn pick_version(
    shared: &Shared,
    flight: &mut InFlight,
    handler: LoadedHandler,
    canary: bool,
    ready: &decide::Ready,
) -> Option<(LoadedHandler, bool)> {
    match &ready.pin {
        Some(version) if version != handler.hash() => match pinned(shared, flight, version).await {
            Ok(pinned) => {
                flight.version = pinned.version().clone();
                Some((pinned, false))
            }
            Err(why) => {
                let now = now_ms();
                let decision = decide::pinned_elsewhere(ready.input.attempt, version, &why, now);
                flight.complete(decision, now);
                None
            }
        },
        Some(_) => Some((handler, false)),
        None => Some((handler, canary)),
    }
}

/// The handler of `version` for a job of `flight`'s topic pinned to it: only
/// a version the topic keeps, as `hourglass versions` lists it (its newest
/// `keep_versions` and any serving), whatever other topics keep. Read from
/// Redis each time: pinned jobs are few, and a copy would go stale.
async fn pinned(
    shared: &Shared,
    flight: &InFlight,
    version: &str,
) -> Result<LoadedHandler, String> {
    let topic = &flight.topic.cfg.name;
    let keys = shared.queue.keys(topic);
    match shared.queue.rollouts().kept_versions(&keys).await {
        Ok(kept) if !kept.iter().any(|v| v == version) => {
            return Err(format!(
                "topic {topic:?} no longer keeps version {version} (`hourglass versions {topic}` lists what it keeps: the newest [runner] keep_versions and any serving)"
            ));
        }
        Ok(_) => {}
        // Redis away: the attempt's own commit will wait for it; the version
        // is loaded if this runner keeps it, as before the check
        Err(e) => tracing::debug!(topic, "kept versions not read: {e}"),
    }
    shared.versions.load(version).await
}
