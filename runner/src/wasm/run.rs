//! One attempt: a fresh store and instance of a handler inside its topic's
//! sandbox, its time, CPU and memory limits, how it ended ([`Finish`]) and
//! what it used ([`Usage`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use wasmtime::{Store, UpdateDeadline};

use super::bindings::Handler;
use super::bindings::hourglass::handler::types as wit;
use super::host::{DurableState, Host, Said, StepCounts};
use super::journal::EffectCounts;
use super::usage::{Metered, Usage, thread_cpu_ns};
use super::{Acked, Finish, JobContext, JobInput, LoadedHandler, Runtime, Sandbox, epoch, size};

/// One attempt's end: how, and at what cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempted {
    /// How it ended.
    pub finish: Finish,
    /// What it used.
    pub usage: Usage,
    /// A durable handler's steps: recorded and replayed.
    pub steps: StepCounts,
    /// A journaled topic's effects: recorded, replayed, diverged.
    pub effects: EffectCounts,
    /// What it logged, as its job keeps it (`hourglass_client::logs`; ''
    /// for nothing, or a topic that keeps no logs).
    pub logs: String,
}

impl Runtime {
    /// Run one attempt inside `sandbox`: in a fresh instance, or for a topic
    /// that reuses, in an idle instance of this version when one waits.
    pub async fn run(
        &self,
        handler: &LoadedHandler,
        job: JobInput,
        sandbox: &Sandbox,
    ) -> Attempted {
        let began = Instant::now();
        // the thread's CPU clock from here: the store's set-up is the attempt's
        let began_cpu = thread_cpu_ns();
        let deadline = began + sandbox.timeout;
        let ctx = JobContext {
            topic: job.topic.clone(),
            id: job.id.clone(),
            attempt: job.attempt,
            handler: handler.hash.clone(),
            trace: job.trace,
            pass_through: job.pass_through,
            upstream: job.upstream,
            batch: 1,
            check: None,
        };
        let durable = DurableState::new(job.journal, self.journal_store(), sandbox.journal.max);
        // a topic that reuses takes an idle instance of this version first
        let warm = sandbox
            .reuse
            .and_then(|_| self.warm.take(&job.topic, handler, sandbox));
        let (mut store, instance, served) = match warm {
            Some(mut w) => {
                w.store
                    .data_mut()
                    .rearm(ctx, sandbox, deadline, job.parent_result, durable);
                w.store.set_epoch_deadline(1);
                (w.store, Some(w.instance), w.served)
            }
            None => match self.store(ctx, sandbox, deadline, job.parent_result, durable) {
                Ok(store) => (store, None, 0),
                Err(why) => {
                    return Attempted {
                        finish: Finish::Crashed(why),
                        usage: Usage::default(),
                        steps: StepCounts::default(),
                        effects: EffectCounts::default(),
                        logs: String::new(),
                    };
                }
            },
        };
        let cpu = store.data().cpu.clone();
        cpu.started_at(began_cpu);
        let input = wit::Job {
            id: job.id,
            topic: job.topic,
            payload: job.payload,
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            enqueued_at: job.enqueued_at_ms,
            due_at: job.due_at_ms,
        };
        // Epochs do not interrupt host calls (a guest waiting on a WASI clock):
        // the timer is the second line of defence, dropping the call outright.
        let mut started = None;
        let call = async {
            let instance = match instance {
                Some(instance) => instance,
                None => self.instantiate(handler, &mut store).await?,
            };
            started = Some(began.elapsed());
            let _alive = self.in_use.enter();
            let outcome = instance
                .call_handle(&mut store, &input)
                .await
                .map_err(Stop::Trap)?;
            Ok((instance, outcome))
        };
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
        let logs = host.logs.take(host.ctx.attempt);
        if host.reported {
            host.progress
                .forget(&host.ctx.topic, &host.ctx.id, host.ctx.attempt);
        }
        // CPU once the attempt is done with, below (its store dropped)
        let mut usage = used(host, wall, Duration::ZERO, started);
        // an instance that answered may serve again (a topic that reuses)
        let (result, answered) = match result {
            Ok(Ok((instance, outcome))) => (Ok(Ok(outcome)), Some(instance)),
            Ok(Err(stop)) => (Ok(Err(stop)), None),
            Err(elapsed) => (Err(elapsed), None),
        };
        let mut finish = match result {
            Ok(Ok(wit::Outcome::Ack)) => match host.result.take() {
                Some(r) if r.len() as u64 > sandbox.result_max => Finish::Retry {
                    delay: None,
                    reason: format!(
                        "result of {} bytes is over the topic's results.max ({} bytes)",
                        r.len(),
                        sandbox.result_max
                    ),
                },
                result => Finish::Ack(Acked {
                    follow_ups: host.take_follow_ups(),
                    result,
                    flows: host.take_flows(),
                }),
            },
            Ok(Ok(wit::Outcome::Retry(r))) => Finish::Retry {
                delay: r.delay_ms.map(Duration::from_millis),
                reason: r.reason,
            },
            Ok(Ok(wit::Outcome::Fail(reason))) => Finish::Fail(reason),
            // the CPU so far, for a limit's message
            Ok(Err(stop)) => {
                usage.cpu_us = cpu.tick().as_micros() as u64;
                stopped(host, Some(stop), sandbox, &usage)
            }
            Err(_elapsed) => {
                usage.cpu_us = cpu.tick().as_micros() as u64;
                stopped(host, None, sandbox, &usage)
            }
        };
        let effects = match store.data().effects.clone() {
            // boxed: only journaled attempts flush here; every attempt's
            // future would otherwise carry this one's state. Waiting on
            // Redis is not the attempt's CPU (nor, on a pool, this thread's)
            Some(e) => {
                cpu.pause();
                let counts = Box::pin(end_journal(&e, &mut finish)).await;
                cpu.resume();
                counts
            }
            None => EffectCounts::default(),
        };
        let steps = store.data().durable.counts;
        if let Some(instance) = answered
            && sandbox.reuse.is_some()
        {
            let ctx = store.data().ctx.clone();
            self.warm
                .put(&ctx.topic, handler, sandbox, store, instance, served + 1);
        } else {
            drop(store); // its memory reset is the attempt's work
        }
        usage.cpu_us = cpu.close().as_micros() as u64;
        if started.is_some() {
            handler.recent.observe(usage.cpu_us);
        }
        Attempted {
            finish,
            usage,
            steps,
            effects,
            logs,
        }
    }

    /// A fresh store for one job in `sandbox`, its epoch callback enforcing
    /// the job's time and CPU limits (read from the host, so that a reused
    /// store enforces each job's own).
    pub(super) fn store(
        &self,
        ctx: JobContext,
        sandbox: &Sandbox,
        deadline: Instant,
        parent_result: Option<Vec<u8>>,
        durable: DurableState,
    ) -> Result<Store<Host>, String> {
        let host = Host::new(
            ctx,
            sandbox,
            deadline,
            self.outbound.clone(),
            self.progress.clone(),
            parent_result,
            durable,
        )?;
        let mut store = Store::new(&self.engine, host);
        store.limiter(|h| &mut h.limits);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut cx| {
            let host = cx.data_mut();
            if Instant::now() >= host.deadline {
                host.timed_out = true;
                wasmtime::bail!("time limit exceeded");
            }
            let used = host.cpu.tick();
            if let Some(limit) = host.cpu_limit
                && used >= limit
            {
                host.cpu_exceeded = true;
                wasmtime::bail!("CPU limit exceeded");
            }
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ))
        });
        Ok(store)
    }

    /// A new instance of `handler` in `store`. With no instance slot free,
    /// idle reused instances hold them: they are dropped and it tries again.
    pub(super) async fn instantiate(
        &self,
        handler: &LoadedHandler,
        store: &mut Store<Host>,
    ) -> Result<Handler, Stop> {
        let mut freed = false;
        loop {
            match handler.pre.instantiate_async(&mut *store).await {
                Ok(instance) => return Ok(instance),
                Err(e) if e.is::<wasmtime::PoolConcurrencyLimitError>() => {
                    if !freed && self.warm.drop_idle(true) > 0 {
                        freed = true;
                        continue;
                    }
                    return Err(Stop::NoSlot(format!("{e}")));
                }
                Err(e) => return Err(Stop::Trap(e)),
            }
        }
    }

    /// A new instance of `handler` in `store`, as [`Runtime::instantiate`],
    /// without the world's bindings (a batch call looks `handle-batch` up).
    pub(super) async fn instantiate_raw(
        &self,
        handler: &LoadedHandler,
        store: &mut Store<Host>,
    ) -> Result<wasmtime::component::Instance, Stop> {
        let mut freed = false;
        loop {
            match handler
                .pre
                .instance_pre()
                .instantiate_async(&mut *store)
                .await
            {
                Ok(instance) => return Ok(instance),
                Err(e) if e.is::<wasmtime::PoolConcurrencyLimitError>() => {
                    if !freed && self.warm.drop_idle(true) > 0 {
                        freed = true;
                        continue;
                    }
                    return Err(Stop::NoSlot(format!("{e}")));
                }
                Err(e) => return Err(Stop::Trap(e)),
            }
        }
    }

    /// Drop reused instances idle past their topic's `reuse.idle`.
    pub fn drop_idle_instances(&self) -> usize {
        self.warm.drop_idle(false)
    }
}

/// The end of a journaled attempt: a divergence fails it for good (the
/// job is dead-lettered with its journal), a journal that could not be
/// written makes it a failed attempt; an attempt that did not ack writes
/// the reads still pending, so that its retry replays them.
async fn end_journal(effects: &super::journal::Effects, finish: &mut Finish) -> EffectCounts {
    let (diverged, broken, counts) = effects.end();
    if let Some(why) = diverged {
        *finish = Finish::Fail(why);
    } else if let Some(why) = broken
        && !matches!(finish, Finish::Ack(_))
    {
        *finish = Finish::Crashed(why);
    }
    if !matches!(finish, Finish::Ack(_)) && effects.pending() {
        match tokio::time::timeout(Duration::from_secs(5), effects.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(why)) => tracing::warn!("{why}"),
            Err(_) => tracing::warn!("the effects journal was not written within 5s"),
        }
    }
    counts
}

pub(super) enum Stop {
    NoSlot(String),
    Trap(wasmtime::Error),
}

fn root_cause(e: &wasmtime::Error) -> String {
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => e.root_cause().to_string(),
    }
}

/// How a call that did not answer ended: `stop` (`None`: the timer ran
/// out), read with what the host saw (a suspension, a limit).
pub(super) fn stopped(
    host: &mut Host,
    stop: Option<Stop>,
    sandbox: &Sandbox,
    usage: &Usage,
) -> Finish {
    let time_limit = || {
        Finish::Crashed(format!(
            "time limit of {} exceeded",
            humantime::format_duration(sandbox.timeout)
        ))
    };
    match stop {
        Some(Stop::NoSlot(why)) => Finish::NotStarted(why),
        // a sleep or a wait ended it (the trap is the host's own)
        Some(Stop::Trap(_)) if host.durable.suspend.is_some() => {
            Finish::Suspended(host.durable.suspend.take().expect("checked"))
        }
        None => time_limit(),
        Some(Stop::Trap(_)) if host.timed_out => time_limit(),
        Some(Stop::Trap(_)) if host.cpu_exceeded => Finish::Crashed(format!(
            "CPU limit of {} exceeded (used {} ms of CPU in {} ms)",
            humantime::format_duration(sandbox.cpu.unwrap_or_default()),
            usage.cpu_us / 1000,
            usage.wall_us / 1000
        )),
        Some(Stop::Trap(_)) if host.limits.exceeded.is_some() => Finish::Crashed(format!(
            "memory limit of {} exceeded (the handler asked for {})",
            size(sandbox.memory),
            size(host.limits.exceeded.unwrap_or_default() as u64)
        )),
        Some(Stop::Trap(e)) => Finish::Crashed(match host.stderr_summary() {
            Some(Said::Exception(message)) => format!("uncaught exception: {message}"),
            Some(Said::Line(line)) => format!("trapped: {}; stderr: {line}", root_cause(&e)),
            None => format!("trapped: {}", root_cause(&e)),
        }),
    }
}

/// What a call used: its wall time, its CPU (the store's setup included),
/// when its instance had started, the host's peak memory and traffic.
pub(super) fn used(host: &Host, wall: Duration, cpu: Duration, started: Option<Duration>) -> Usage {
    let traffic = host.traffic();
    Usage {
        wall_us: wall.as_micros() as u64,
        cpu_us: cpu.as_micros() as u64,
        memory_peak: host.limits.peak,
        start_us: started.map_or(0, |s| s.as_micros() as u64),
        requests: traffic.requests.load(Ordering::Relaxed) as u32,
        bytes_out: traffic.bytes_out.load(Ordering::Relaxed),
        bytes_in: traffic.bytes_in.load(Ordering::Relaxed),
    }
}
