//! A batch call, the walk after the claim for a topic with `batch`: hold the
//! jobs until the last of them is due, end unrun those that cannot run
//! (`decide::before_run`), run a flow's jobs and jobs pinned to another
//! version one at a time as single attempts, call `handle-batch` once with
//! the rest, and decide each job's end on its own: its own attempts,
//! backoff, dead letter. What the call used is divided evenly among its
//! jobs (each job's usage is its share); each job has its own events and,
//! when spans are exported, its own attempt span.

use std::sync::Arc;

use super::Shared;
use super::attempt::{self, InFlight, Ran, decide, hold_until_due};
use super::decide::{self as decision, Ready};
use super::watch::{Attempt, Ending};
use crate::clock::now_ms;
use crate::redis::{ClaimedJob, Usage};
use crate::wasm::{JobInput, LoadedHandler};

/// Run `jobs` (of one topic, each with its guard in `flights`, the first
/// holding the call's capacity) in one call of `handler`'s `handle-batch`.
/// Returns the first guard: the scheduler drops it (freeing the slot) when
/// it reaps the task.
pub(super) async fn run(
    shared: Arc<Shared>,
    handler: LoadedHandler,
    jobs: Vec<ClaimedJob>,
    mut flights: Vec<InFlight>,
) -> InFlight {
    let latest = jobs.iter().map(|j| j.due_at_ms).max().unwrap_or(0);
    hold_until_due(latest).await;
    let topic = flights[0].topic().clone();
    let cfg = &topic.cfg;
    let mut ready: Vec<(usize, Ready)> = Vec::with_capacity(jobs.len());
    let mut alone: Vec<(usize, ClaimedJob)> = Vec::new();
    for (i, job) in jobs.into_iter().enumerate() {
        let record = job.record.as_ref().ok();
        let pinned = record
            .and_then(|r| r.version.as_deref())
            .is_some_and(|v| v != handler.hash());
        if record.is_some_and(|r| r.flow.is_some()) || pinned {
            alone.push((i, job));
            continue;
        }
        match decision::before_run(cfg, job, now_ms()) {
            Ok(r) => ready.push((i, r)),
            Err(d) => flights[i].complete(d, now_ms()),
        }
    }
    if !ready.is_empty() {
        call(&shared, &handler, ready, &mut flights).await;
    }
    // rare in a batched topic: each as a single attempt, after the call
    let mut flights: Vec<Option<InFlight>> = flights.into_iter().map(Some).collect();
    for (i, job) in alone {
        let flight = flights[i].take().expect("each guard once");
        flights[i] =
            Some(attempt::run(shared.clone(), handler.clone(), false, job, flight, true).await);
    }
    flights.swap_remove(0).expect("the first guard comes back")
}

/// One call of `handle-batch` with the jobs that can run, each one's end
/// decided and handed to its guard.
async fn call(
    shared: &Shared,
    handler: &LoadedHandler,
    mut ready: Vec<(usize, Ready)>,
    flights: &mut [InFlight],
) {
    let topic = flights[0].topic().clone();
    let cfg = &topic.cfg;
    let n = ready.len();
    let started_at_ms = now_ms();
    let spans: Vec<_> = ready
        .iter()
        .map(|(_, r)| shared.telemetry.attempt(r.trace.as_ref()))
        .collect();
    let watchers = shared.watchers();
    // the inputs go to the call; what each job's end needs of them stays
    let inputs: Vec<JobInput> = ready
        .iter_mut()
        .map(|(_, r)| {
            let payload = std::mem::take(&mut r.input.payload);
            JobInput {
                topic: r.input.topic.clone(),
                id: r.input.id.clone(),
                attempt: r.input.attempt,
                payload,
                max_attempts: r.input.max_attempts,
                enqueued_at_ms: r.input.enqueued_at_ms,
                due_at_ms: r.input.due_at_ms,
                parent_result: None,
                trace: None,
                pass_through: None,
                journal: None,
                upstream: Default::default(),
            }
        })
        .collect();
    let ids: Vec<String> = ready
        .iter()
        .map(|(i, _)| flights[*i].id().to_owned())
        .collect();
    let attempt_of = |k: usize| {
        let (_, r) = &ready[k];
        Attempt {
            topic: &cfg.name,
            id: &ids[k],
            number: r.input.attempt,
            version: handler.version(),
            account: r.account.as_deref(),
            key: r.key.as_deref(),
            due_at_ms: r.input.due_at_ms,
            started_at_ms,
            span: spans[k].as_deref(),
            // batch calls always do (scheduler/claim.rs: start_batches)
            pooled: true,
        }
    };
    for k in 0..n {
        watchers.started(&attempt_of(k));
    }
    let (finishes, usage) = shared
        .runtime
        .run_batch(handler, inputs, &topic.sandbox)
        .await;
    shared.meter.batch_call(&cfg.name, n);
    let share = share_of(usage, n);
    let mut decided = Vec::with_capacity(n);
    for (k, mut finish) in finishes.into_iter().enumerate() {
        let attempt = attempt_of(k);
        let (_, r) = &ready[k];
        let ran = Ran {
            usage: share,
            steps: Default::default(),
            signals: &[],
            runner: &shared.runner_id,
        };
        let (mut d, at_ms) = decide(
            cfg,
            &attempt,
            false,
            r.input.max_attempts,
            &mut finish,
            ran,
            r.earlier.clone(),
        );
        d = decision::before_deadline(d, r.deadline, r.input.attempt);
        d.inherit_key(r.key.as_deref());
        let ending = Ending {
            finish: &finish,
            usage: &share,
            decision: &d,
            at_ms,
        };
        watchers.ended(&attempt, &ending);
        decided.push((d, at_ms));
    }
    for ((i, _), (d, at_ms)) in ready.iter().zip(decided) {
        flights[*i].complete(d, at_ms);
    }
}

/// Each job's share of what a call of `n` jobs used: CPU, memory growth
/// and traffic divided evenly; wall time and instance start as the call's.
fn share_of(usage: Usage, n: usize) -> Usage {
    let n64 = n.max(1) as u64;
    Usage {
        wall_us: usage.wall_us,
        cpu_us: usage.cpu_us / n64,
        memory_peak: usage.memory_peak,
        start_us: usage.start_us / n64,
        requests: usage.requests / n.max(1) as u32,
        bytes_out: usage.bytes_out / n64,
        bytes_in: usage.bytes_in / n64,
    }
}
