//! What a guest sees of the host: the per-job store data, the `log` and
//! `follow-up` imports, the memory limiter, and WASI with only what
//! `queues.toml` grants (by default no files, no network, no environment).

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::Sandbox;
use super::bindings::hourglass::handler::report;
use super::bindings::hourglass::handler::{follow_up, log, types};
use super::context::JobContext;
use super::outbound::{Outbound, OutboundCounts};
use super::output::GuestOutput;
use super::report::{ProgressBoard, Reported, check_detail};
use super::usage::{CpuMeter, Traffic};

/// Most follow-up jobs one attempt may start.
const MAX_FOLLOW_UPS: usize = 1000;
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
}

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
    pub(super) timed_out: bool,
    pub(super) cpu_exceeded: bool,
    may_enqueue: Arc<[String]>,
    max_payload: u64,
    follow_ups: Vec<FollowUp>,
    follow_up_bytes: u64,
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
    ) -> Result<Host, String> {
        // one copy of the job's names for every log line of the attempt
        let ctx = Arc::new(ctx);
        let stdout = GuestOutput::new(ctx.clone(), "stdout");
        let stderr = GuestOutput::new(ctx.clone(), "stderr");
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout.clone()).stderr(stderr.clone());
        for (name, value) in &sandbox.grants.env {
            wasi.env(name, value);
        }
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
            outbound: Outbound::new(sandbox.http.clone(), ctx.clone(), deadline, counts),
            limits: MemoryLimit {
                limit: sandbox.memory,
                exceeded: None,
                held: 0,
                peak: 0,
            },
            ctx,
            stdout,
            stderr,
            timed_out: false,
            cpu_exceeded: false,
            may_enqueue: sandbox.may_enqueue.clone(),
            max_payload: sandbox.max_payload,
            follow_ups: Vec::new(),
            follow_up_bytes: 0,
            result: None,
            reported: false,
            progress,
            parent_result,
            deadline,
            cpu: CpuMeter::new(),
            cpu_limit: sandbox.cpu,
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
    ) {
        let ctx = Arc::new(ctx);
        self.stdout.rearm(ctx.clone());
        self.stderr.rearm(ctx.clone());
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
        self.result = None;
        self.reported = false;
        self.parent_result = parent_result;
        self.deadline = deadline;
        self.cpu = CpuMeter::new();
        self.cpu_limit = sandbox.cpu;
    }

    /// The follow-ups of an attempt that acked.
    pub(super) fn take_follow_ups(&mut self) -> Vec<FollowUp> {
        std::mem::take(&mut self.follow_ups)
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

/// The gist of a trapped guest's stderr.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Said {
    /// An exception nothing caught: its message (Python: with its type).
    Exception(String),
    /// Some other line: a panic, the last words.
    Line(String),
}

fn summarise_stderr(tail: &[String]) -> Option<Said> {
    // Python: "Traceback (most recent call last):", indented frames, then
    // "ValueError: message" (a chained exception starts another traceback)
    if let Some(start) = tail
        .iter()
        .rposition(|l| l.trim_end() == "Traceback (most recent call last):")
        && let Some(line) = tail[start + 1..]
            .iter()
            .find(|l| !l.is_empty() && !l.starts_with(char::is_whitespace))
    {
        return Some(Said::Exception(line.trim().to_owned()));
    }
    let lines: Vec<&str> = tail
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    if let Some(stack) = lines.iter().rposition(|l| *l == "Stack:")
        && let Some(message) = lines[..stack].iter().rev().find(|l| !l.is_empty())
    {
        return Some(Said::Exception((*message).to_owned()));
    }
    let lines: Vec<&str> = lines
        .into_iter()
        .filter(|l| !l.starts_with("Redirecting call to abort()"))
        .collect();
    match lines.iter().rposition(|l| l.contains("panicked at")) {
        Some(i) => Some(Said::Line(
            lines[i..]
                .iter()
                .take(2)
                .copied()
                .collect::<Vec<_>>()
                .join(" "),
        )),
        None => lines.last().map(|l| Said::Line((*l).to_owned())),
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
        self.result = Some(value);
    }

    fn progress(&mut self, percent: Option<u8>, detail: Option<String>) -> Result<(), String> {
        if let Some(detail) = &detail {
            check_detail(detail)?;
        }
        let c = &*self.ctx;
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
}

impl follow_up::Host for Host {
    fn enqueue(&mut self, job: follow_up::NewJob) -> Result<String, String> {
        self.follow_up(job, Duration::ZERO, false)
    }

    fn enqueue_with_result(&mut self, job: follow_up::NewJob) -> Result<String, String> {
        self.follow_up(job, Duration::ZERO, true)
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
}

impl Host {
    /// Check a follow-up and keep it for the ack.
    fn follow_up(
        &mut self,
        job: follow_up::NewJob,
        unique_for: Duration,
        with_result: bool,
    ) -> Result<String, String> {
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
        self.follow_up_bytes += size;
        self.follow_ups.push(FollowUp {
            topic: job.topic,
            id: id.clone(),
            payload: job.payload,
            delay: Duration::from_millis(job.delay_ms.unwrap_or(0)),
            unique_for,
            with_result,
        });
        Ok(id)
    }
}

/// Caps linear memory at the topic's `memory`; going past it traps the guest
/// and is remembered so the failure can say why.
pub struct MemoryLimit {
    limit: u64,
    pub(super) exceeded: Option<usize>,
    /// Linear memory the instance holds now, all its memories together.
    held: u64,
    /// The most it held at once.
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

#[cfg(test)]
mod tests {
    use super::{Said, summarise_stderr};

    fn said(text: &str) -> Option<Said> {
        summarise_stderr(&text.lines().map(str::to_owned).collect::<Vec<_>>())
    }

    #[test]
    fn a_python_traceback_gives_the_exception_that_ended_it() {
        let stderr = "Traceback (most recent call last):\n  File \"/0/app.py\", line 3, in handle\n    \
                      raise KeyError(1)\nKeyError: 1\n\nDuring handling of the above exception, another \
                      exception occurred:\n\nTraceback (most recent call last):\n  File \"/0/app.py\", \
                      line 5, in handle\nValueError: the amount is negative\nthread '<unnamed>' (1) \
                      panicked at runtime/src/lib.rs:1280:25:\nPython function threw an unexpected exception\n";
        assert_eq!(
            said(stderr),
            Some(Said::Exception("ValueError: the amount is negative".into()))
        );
    }

    #[test]
    fn a_javascript_exception_gives_its_message() {
        let stderr = "Error: order 1042 has no customer\nStack:\n  handle@probe.js:22:11\n\
                      Redirecting call to abort() to mozalloc_abort\n";
        assert_eq!(
            said(stderr),
            Some(Said::Exception("Error: order 1042 has no customer".into()))
        );
    }

    #[test]
    fn a_rust_panic_gives_where_and_what() {
        let stderr = "thread '<unnamed>' panicked at src/lib.rs:9:5:\nno order id\nnote: run with \
                      `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            said(stderr),
            Some(Said::Line(
                "thread '<unnamed>' panicked at src/lib.rs:9:5: no order id".into()
            ))
        );
    }
}
