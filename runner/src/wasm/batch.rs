//! A batch call: one fresh instance of a handler that exports
//! `handle-batch` (the WIT's world `handler-batch`), called once with up to
//! its topic's `batch.max` jobs, and one [`Finish`] per job from its answer.
//! A trap, a limit or an answer of the wrong length ends every job of the
//! call the same way, as one attempt each. What the call used is the
//! batch's (the caller divides it among the jobs).

use std::time::Instant;

use super::bindings::hourglass::handler::types as wit;
use super::host::DurableState;
use super::run::{Stop, stopped, used};
use super::usage::{Metered, Usage, thread_cpu_ns};
use super::{Acked, Finish, JobContext, JobInput, LoadedHandler, Runtime, Sandbox, epoch};

impl Runtime {
    /// Run one attempt of each of `jobs` (of one topic) in one call of
    /// `handle-batch`, in a fresh instance inside `sandbox`: each job's
    /// finish, in order, and what the whole call used.
    pub async fn run_batch(
        &self,
        handler: &LoadedHandler,
        jobs: Vec<JobInput>,
        sandbox: &Sandbox,
    ) -> (Vec<Finish>, Usage) {
        let n = jobs.len();
        // a version swapped in live without the export (loading refuses it
        // for a batched topic; a reload is checked by its attempts)
        if let Err(why) = handler.fits_batches(true) {
            return (vec![Finish::Crashed(why); n], Usage::default());
        }
        let began = Instant::now();
        // the thread's CPU clock from here: the store's set-up is the attempt's
        let began_cpu = thread_cpu_ns();
        let deadline = began + sandbox.timeout;
        let first = jobs.first().expect("a batch has a job");
        let ctx = JobContext {
            topic: first.topic.clone(),
            id: format!("{} (+{} in its batch)", first.id, n - 1),
            attempt: first.attempt,
            handler: handler.hash.clone(),
            trace: None,
            pass_through: None,
            upstream: Default::default(),
            batch: n.max(2),
            check: None,
        };
        let durable = DurableState::new(None, self.journal_store(), sandbox.journal.max);
        let mut store = match self.store(ctx, sandbox, deadline, None, durable) {
            Ok(store) => store,
            Err(why) => return (vec![Finish::Crashed(why); n], Usage::default()),
        };
        let cpu = store.data().cpu.clone();
        cpu.started_at(began_cpu);
        let inputs: Vec<wit::Job> = jobs
            .into_iter()
            .map(|job| wit::Job {
                id: job.id,
                topic: job.topic,
                payload: job.payload,
                attempt: job.attempt,
                max_attempts: job.max_attempts,
                enqueued_at: job.enqueued_at_ms,
                due_at: job.due_at_ms,
            })
            .collect();
        let mut started = None;
        let call = async {
            let instance = self.instantiate_raw(handler, &mut store).await?;
            started = Some(began.elapsed());
            let _alive = self.in_use.enter();
            let func = instance
                .get_typed_func::<(Vec<wit::Job>,), (Vec<wit::Outcome>,)>(
                    &mut store,
                    "handle-batch",
                )
                .map_err(Stop::Trap)?;
            let (outcomes,) = func
                .call_async(&mut store, (inputs,))
                .await
                .map_err(Stop::Trap)?;
            Ok(outcomes)
        };
        // as a single attempt's: the timer is the second line of defence
        let result = {
            let call = std::pin::pin!(call);
            tokio::time::timeout(
                sandbox.timeout + epoch::TICK * 4,
                Metered::new(call, cpu.clone()),
            )
            .await
        };
        let wall = began.elapsed();
        let host = store.data_mut();
        host.flush_output();
        // the CPU so far (for a limit's message); all of it once the store is dropped
        let mut usage = used(host, wall, cpu.tick(), started);
        let finishes = match result {
            Ok(Ok(outcomes)) if outcomes.len() == n => outcomes.into_iter().map(finish).collect(),
            Ok(Ok(outcomes)) => vec![
                Finish::Crashed(format!(
                    "handle-batch answered {} outcome(s) for {n} job(s): it must answer one per job, in order",
                    outcomes.len()
                ));
                n
            ],
            Ok(Err(stop)) => vec![stopped(host, Some(stop), sandbox, &usage); n],
            Err(_elapsed) => vec![stopped(host, None, sandbox, &usage); n],
        };
        drop(store);
        usage.cpu_us = cpu.close().as_micros() as u64;
        (finishes, usage)
    }
}

/// One job's finish from its outcome in a batch call: an ack carries no
/// follow-ups or result (a batch call cannot make them).
fn finish(outcome: wit::Outcome) -> Finish {
    match outcome {
        wit::Outcome::Ack => Finish::Ack(Acked {
            follow_ups: Vec::new(),
            result: None,
            flows: Vec::new(),
        }),
        wit::Outcome::Retry(r) => Finish::Retry {
            delay: r.delay_ms.map(std::time::Duration::from_millis),
            reason: r.reason,
        },
        wit::Outcome::Fail(reason) => Finish::Fail(reason),
    }
}
