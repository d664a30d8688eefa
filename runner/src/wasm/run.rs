//! One attempt: a fresh store and instance of a handler inside its topic's
//! sandbox, its time, CPU and memory limits, how it ended ([`Finish`]) and
//! what it used ([`Usage`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use wasmtime::{Store, UpdateDeadline};

use super::bindings::hourglass::handler::types as wit;
use super::host::{Host, Said};
use super::usage::{CpuMeter, Metered, Usage};
use super::{Acked, Finish, JobContext, JobInput, LoadedHandler, Runtime, Sandbox, epoch, size};

/// One attempt's end: how, and at what cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempted {
    /// How it ended.
    pub finish: Finish,
    /// What it used.
    pub usage: Usage,
}

impl Runtime {
    /// Run one attempt in a fresh instance inside `sandbox`.
    pub async fn run(
        &self,
        handler: &LoadedHandler,
        job: JobInput,
        sandbox: &Sandbox,
    ) -> Attempted {
        let began = Instant::now();
        let deadline = began + sandbox.timeout;
        let ctx = JobContext {
            topic: job.topic.clone(),
            id: job.id.clone(),
            attempt: job.attempt,
            handler: handler.hash.clone(),
            trace: job.trace,
        };
        let host = match Host::new(
            ctx,
            sandbox,
            deadline,
            self.outbound.clone(),
            self.progress.clone(),
            job.parent_result,
        ) {
            Ok(host) => host,
            Err(why) => {
                return Attempted {
                    finish: Finish::Crashed(why),
                    usage: Usage::default(),
                };
            }
        };
        let cpu = CpuMeter::new();
        let cpu_limit = sandbox.cpu;
        let mut store = Store::new(&self.engine, host);
        store.limiter(|h| &mut h.limits);
        store.set_epoch_deadline(1);
        let ticks = cpu.clone();
        store.epoch_deadline_callback(move |mut cx| {
            if Instant::now() >= deadline {
                cx.data_mut().timed_out = true;
                wasmtime::bail!("time limit exceeded");
            }
            let used = ticks.tick();
            if let Some(limit) = cpu_limit
                && used >= limit
            {
                cx.data_mut().cpu_exceeded = true;
                wasmtime::bail!("CPU limit exceeded");
            }
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ))
        });
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
        // creating the store and host ran on this thread too: charged as CPU
        let setup = began.elapsed();
        let mut started = None;
        let call = async {
            let instance = match handler.pre.instantiate_async(&mut store).await {
                Ok(instance) => instance,
                Err(e) if e.is::<wasmtime::PoolConcurrencyLimitError>() => {
                    return Err(Stop::NoSlot(format!("{e}")));
                }
                Err(e) => return Err(Stop::Trap(e)),
            };
            started = Some(began.elapsed());
            let _alive = self.in_use.enter();
            instance
                .call_handle(&mut store, &input)
                .await
                .map_err(Stop::Trap)
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
        if host.reported {
            host.progress
                .forget(&host.ctx.topic, &host.ctx.id, host.ctx.attempt);
        }
        let traffic = host.traffic();
        let usage = Usage {
            wall_us: wall.as_micros() as u64,
            cpu_us: (setup + cpu.used()).as_micros() as u64,
            memory_peak: host.limits.peak,
            start_us: started.map_or(0, |s| s.as_micros() as u64),
            requests: traffic.requests.load(Ordering::Relaxed) as u32,
            bytes_out: traffic.bytes_out.load(Ordering::Relaxed),
            bytes_in: traffic.bytes_in.load(Ordering::Relaxed),
        };
        let finish = match result {
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
                }),
            },
            Ok(Ok(wit::Outcome::Retry(r))) => Finish::Retry {
                delay: r.delay_ms.map(Duration::from_millis),
                reason: r.reason,
            },
            Ok(Ok(wit::Outcome::Fail(reason))) => Finish::Fail(reason),
            Ok(Err(Stop::NoSlot(why))) => Finish::NotStarted(why),
            Err(_elapsed) => Finish::Crashed(format!(
                "time limit of {} exceeded",
                humantime::format_duration(sandbox.timeout)
            )),
            Ok(Err(Stop::Trap(_))) if host.timed_out => Finish::Crashed(format!(
                "time limit of {} exceeded",
                humantime::format_duration(sandbox.timeout)
            )),
            Ok(Err(Stop::Trap(_))) if host.cpu_exceeded => Finish::Crashed(format!(
                "CPU limit of {} exceeded (used {} ms of CPU in {} ms)",
                humantime::format_duration(sandbox.cpu.unwrap_or_default()),
                usage.cpu_us / 1000,
                usage.wall_us / 1000
            )),
            Ok(Err(Stop::Trap(_))) if host.limits.exceeded.is_some() => Finish::Crashed(format!(
                "memory limit of {} exceeded (the handler asked for {})",
                size(sandbox.memory),
                size(host.limits.exceeded.unwrap_or_default() as u64)
            )),
            Ok(Err(Stop::Trap(e))) => Finish::Crashed(match host.stderr_summary() {
                Some(Said::Exception(message)) => format!("uncaught exception: {message}"),
                Some(Said::Line(line)) => format!("trapped: {}; stderr: {line}", root_cause(&e)),
                None => format!("trapped: {}", root_cause(&e)),
            }),
        };
        Attempted { finish, usage }
    }
}

enum Stop {
    NoSlot(String),
    Trap(wasmtime::Error),
}

fn root_cause(e: &wasmtime::Error) -> String {
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => e.root_cause().to_string(),
    }
}
