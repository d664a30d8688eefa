//! What a guest sees of the host: the per-job store data, the `log` and
//! `follow-up` imports, the memory limiter, and WASI with only what
//! `queues.toml` grants (by default no files, no network, no environment).
//! The `follow-up` import is in `host/follow_up.rs`, the `durable` import in
//! `host/durable.rs` (its sleeps, waits and signals in `host/waits.rs`,
//! `patched` in `host/patch.rs`); what a trapped guest said on stderr, in
//! `host/said.rs`. In a replay check (`check.rs`) log lines and progress go
//! to the check's ledger, not to the runner's log and the watchers.

mod durable;
mod follow_up;
mod patch;
mod said;
mod waits;

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::Sandbox;
use super::bindings::hourglass::handler::report;
use super::bindings::hourglass::handler::{log, types};
use super::context::JobContext;
use super::journal::{self as journals, Effects};
use super::logs::LogTap;
use super::outbound::{Outbound, OutboundCounts};
use super::output::GuestOutput;
use super::report::{ProgressBoard, Reported, check_detail};
use super::usage::{CpuMeter, Traffic};

pub(super) use durable::DurableState;
pub use durable::StepCounts;
pub use follow_up::FollowUp;
pub(super) use said::Said;
use said::summarise_stderr;

/// The data of one job's store.
pub struct Host {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    outbound: Outbound,
    pub(super) limits: MemoryLimit,
    pub(super) ctx: Arc<JobContext>,
    stdout: GuestOutput,
    stderr: GuestOutput,
    /// What the attempt logged, kept for its job (`logs.rs`).
    pub(super) logs: LogTap,
    pub(super) timed_out: bool,
    pub(super) cpu_exceeded: bool,
    may_enqueue: Arc<[String]>,
    max_payload: u64,
    follow_ups: Vec<FollowUp>,
    follow_up_bytes: u64,
    /// Flows the handler created, for the ack.
    flows: Vec<crate::redis::FlowSpec>,
    /// The result the handler set, if it did.
    pub(super) result: Option<Vec<u8>>,
    /// Whether it reported progress.
    pub(super) reported: bool,
    pub(super) progress: Arc<ProgressBoard>,
    pub(super) parent_result: Option<Vec<u8>>,
    /// When the attempt must have ended.
    pub(super) deadline: Instant,
    /// The CPU the attempt's polls used, and its limit.
    pub(super) cpu: Arc<CpuMeter>,
    pub(super) cpu_limit: Option<Duration>,
    /// The job's journal, for a durable handler's steps, sleeps and waits.
    pub(super) durable: DurableState,
    /// Its effects journal, on a topic with `journal = "effects"`.
    pub(super) effects: Option<Arc<Effects>>,
}

impl Host {
    /// A fresh host for one attempt with what `sandbox` grants and nothing
    /// else, ending by `deadline`. Fails (naming the directory) when a granted
    /// directory cannot be opened.
    pub fn new(
        ctx: JobContext,
        sandbox: &Sandbox,
        deadline: Instant,
        counts: Arc<OutboundCounts>,
        progress: Arc<ProgressBoard>,
        parent_result: Option<Vec<u8>>,
        durable: DurableState,
    ) -> Result<Host, String> {
        // one copy of the job's names for every log line of the attempt
        let ctx = Arc::new(ctx);
        // a batch call's lines belong to no one job: not kept
        let keep = if ctx.batch > 1 { 0 } else { sandbox.logs };
        let logs = LogTap::new(keep, ctx.attempt);
        let stdout = GuestOutput::new(ctx.clone(), "stdout", logs.clone());
        let stderr = GuestOutput::new(ctx.clone(), "stderr", logs.clone());
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout.clone()).stderr(stderr.clone());
        for (name, value) in &sandbox.grants.env {
            wasi.env(name, value);
        }
        // a journaled attempt's clocks and random bytes replay, then record
        let effects = sandbox.journal.effects.then(|| {
            let e = Effects::new(
                ctx.clone(),
                Some(durable.journal()),
                &sandbox.journal,
                durable.store(),
            );
            wasi.wall_clock(journals::WallClock(e.clone()))
                .monotonic_clock(journals::MonotonicClock(
                    e.clone(),
                    wasmtime_wasi::clocks::MonotonicClock::new(),
                ))
                .secure_random(journals::Random(e.clone(), journals::Kind::Random))
                .insecure_random(journals::Random(e.clone(), journals::Kind::InsecureRandom))
                .insecure_random_seed(journals::seed(&ctx));
            e
        });
        for dir in &sandbox.grants.dirs {
            let perms = if dir.write {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            wasi.preopened_dir(&dir.host, &dir.guest, perms)
                .map_err(|e| {
                    format!(
                        "granted directory {} cannot be opened: {e:#}",
                        dir.host.display()
                    )
                })?;
        }
        Ok(Host {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            outbound: Outbound::new(
                sandbox.http.clone(),
                ctx.clone(),
                deadline,
                counts,
                effects.clone(),
            ),
            limits: MemoryLimit {
                limit: sandbox.memory,
                exceeded: None,
                held: 0,
                peak: 0,
            },
            ctx,
            stdout,
            stderr,
            logs,
            timed_out: false,
            cpu_exceeded: false,
            may_enqueue: sandbox.may_enqueue.clone(),
            max_payload: sandbox.max_payload,
            follow_ups: Vec::new(),
            follow_up_bytes: 0,
            flows: Vec::new(),
            result: None,
            reported: false,
            progress,
            parent_result,
            deadline,
            cpu: CpuMeter::new(),
            cpu_limit: sandbox.cpu,
            durable,
            effects,
        })
    }

    /// Ready a host whose instance served a job for the next one, `ctx`,
    /// in the same sandbox (reuse): the job's names, limits, outbound hooks
    /// and meters are new; the WASI context and the guest's memory are not.
    pub(super) fn rearm(
        &mut self,
        ctx: JobContext,
        sandbox: &Sandbox,
        deadline: Instant,
        parent_result: Option<Vec<u8>>,
        durable: DurableState,
    ) {
        let ctx = Arc::new(ctx);
        self.stdout.rearm(ctx.clone());
        self.stderr.rearm(ctx.clone());
        // (the last job's lines were taken when it ended)
        let _ = self.logs.take(ctx.attempt);
        self.outbound
            .rearm(sandbox.http.clone(), ctx.clone(), deadline);
        self.limits.limit = sandbox.memory;
        self.limits.exceeded = None;
        self.limits.peak = self.limits.held;
        self.ctx = ctx;
        self.timed_out = false;
        self.cpu_exceeded = false;
        self.may_enqueue = sandbox.may_enqueue.clone();
        self.max_payload = sandbox.max_payload;
        self.follow_ups.clear();
        self.follow_up_bytes = 0;
        self.flows.clear();
        self.result = None;
        self.reported = false;
        self.parent_result = parent_result;
        self.deadline = deadline;
        self.cpu = CpuMeter::new();
        self.cpu_limit = sandbox.cpu;
        self.durable = durable;
        // queues.toml refuses `journal = "effects"` with `reuse`
        debug_assert!(
            !sandbox.journal.effects,
            "a journaled topic reuses no instance"
        );
    }

    /// The follow-ups of an attempt that acked.
    pub(super) fn take_follow_ups(&mut self) -> Vec<FollowUp> {
        std::mem::take(&mut self.follow_ups)
    }

    /// The flows an attempt that acked created.
    pub(super) fn take_flows(&mut self) -> Vec<crate::redis::FlowSpec> {
        std::mem::take(&mut self.flows)
    }

    /// The attempt's outbound traffic so far.
    pub(super) fn traffic(&self) -> &Traffic {
        self.outbound.traffic()
    }

    /// Log what the guest left unterminated on stdout and stderr.
    pub(super) fn flush_output(&self) {
        self.stdout.finish();
        self.stderr.finish();
    }

    /// What the guest said on stderr before it trapped: an uncaught
    /// exception of a JavaScript (componentize-js: the message before its
    /// `Stack:`) or Python (componentize-py: the line that ends the last
    /// traceback) handler; a Rust panic's location and message; else the last
    /// line that is not the runtime's own abort notice.
    pub(super) fn stderr_summary(&self) -> Option<Said> {
        summarise_stderr(&self.stderr.tail())
    }
}

impl WasiView for Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for Host {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.outbound,
        }
    }
}

impl types::Host for Host {}

/// A guest's log line at `$level`, tagged with its job, and with the
/// attempt's trace and span ids when spans are exported.
macro_rules! guest_line {
    ($level:ident, $c:expr, $message:expr) => {
        match &$c.trace {
            Some(t) => tracing::$level!(target: "handler", topic = %$c.topic, job_id = %$c.id, attempt = $c.attempt, handler = &*$c.handler, trace_id = %t.trace_id, span_id = %t.span_id, "{}", $message),
            None => tracing::$level!(target: "handler", topic = %$c.topic, job_id = %$c.id, attempt = $c.attempt, handler = &*$c.handler, "{}", $message),
        }
    };
}

impl log::Host for Host {
    fn log(&mut self, level: log::Level, message: String) {
        let c = &*self.ctx;
        let stream = match level {
            log::Level::Trace => "trace",
            log::Level::Debug => "debug",
            log::Level::Info => "info",
            log::Level::Warn => "warn",
            log::Level::Error => "error",
        };
        if let Some(ledger) = &c.check {
            ledger.line(format!("{stream}: {message}"));
            return;
        }
        self.logs.push(stream, &message);
        match level {
            log::Level::Trace => guest_line!(trace, c, message),
            log::Level::Debug => guest_line!(debug, c, message),
            log::Level::Info => guest_line!(info, c, message),
            log::Level::Warn => guest_line!(warn, c, message),
            log::Level::Error => guest_line!(error, c, message),
        }
    }
}

impl report::Host for Host {
    fn set_result(&mut self, value: Vec<u8>) {
        // no error to answer with: a batch call's result is dropped (documented)
        if self.ctx.batch <= 1 {
            self.result = Some(value);
        }
    }

    fn progress(&mut self, percent: Option<u8>, detail: Option<String>) -> Result<(), String> {
        follow_up::in_one_job(&self.ctx, "report progress")?;
        if let Some(detail) = &detail {
            check_detail(detail)?;
        }
        let c = &*self.ctx;
        if c.check.is_some() {
            // a replay check tells no one
            return Ok(());
        }
        self.reported = true;
        self.progress.post(
            &c.topic,
            &c.id,
            Reported {
                attempt: c.attempt,
                percent: percent.map(|p| p.min(100)),
                detail,
                at_ms: crate::clock::now_ms(),
            },
        );
        Ok(())
    }

    fn parent_result(&mut self) -> Option<Vec<u8>> {
        self.parent_result.clone()
    }

    fn dependencies(&mut self) -> Vec<report::Dependency> {
        use crate::redis::EndState;
        self.ctx
            .upstream
            .dependencies
            .iter()
            .filter_map(|d| {
                let end = d.end.as_ref()?;
                Some(report::Dependency {
                    name: d.name.clone(),
                    topic: d.topic.clone(),
                    id: d.id.clone(),
                    ended: match end.state {
                        EndState::Acked => report::Ended::Acked,
                        // the WIT's enum predates expiry: a dropped job reads as
                        // dead, its reason saying it expired
                        EndState::Dead | EndState::Expired => report::Ended::Dead,
                        EndState::Cancelled => report::Ended::Cancelled,
                    },
                    result: end.result.clone(),
                    reason: end.reason.clone(),
                })
            })
            .collect()
    }

    fn batch(&mut self) -> Option<report::BatchSummary> {
        let b = self.ctx.upstream.batch.as_ref()?;
        Some(report::BatchSummary {
            id: b.id.clone(),
            jobs: b.jobs,
            acked: b.acked,
            dead: b.dead,
            cancelled: b.cancelled,
            failed: b.failed.clone(),
        })
    }
}

/// Caps linear memory at the topic's `memory`; going past it traps the guest
/// and is remembered so the failure can say why.
pub struct MemoryLimit {
    limit: u64,
    pub(super) exceeded: Option<usize>,
    /// Linear memory the instance holds now, all its memories together.
    held: u64,
    /// The most it held at once, or asked to hold when the limit refused a
    /// growth (so an attempt the limit stopped shows what it wanted).
    pub(super) peak: u64,
}

impl ResourceLimiter for MemoryLimit {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.limit {
            self.exceeded = Some(desired);
            let asked = self.held + desired.saturating_sub(current) as u64;
            self.peak = self.peak.max(asked);
            wasmtime::bail!("memory limit of {} bytes exceeded", self.limit);
        }
        // every memory of the instance, together (a new one grows from 0)
        self.held += desired.saturating_sub(current) as u64;
        self.peak = self.peak.max(self.held);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}
