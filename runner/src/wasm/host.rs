//! What a guest sees of the host: the per-job store data, the `log` import,
//! the memory limiter, and WASI with nothing granted.

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::hourglass::handler::{log, types};
use super::output::GuestOutput;

/// Which job an instance is running, for its log lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobContext {
    /// The job's topic.
    pub topic: String,
    /// The job's id.
    pub id: String,
    /// The attempt.
    pub attempt: u32,
}

/// The data of one job's store.
pub struct Host {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) limits: MemoryLimit,
    pub(super) ctx: JobContext,
    stdout: GuestOutput,
    stderr: GuestOutput,
    pub(super) timed_out: bool,
}

impl Host {
    /// A fresh host for one attempt: no files, no network, no environment.
    pub fn new(ctx: JobContext, memory_limit: u64) -> Host {
        let stdout = GuestOutput::new(ctx.clone(), "stdout");
        let stderr = GuestOutput::new(ctx.clone(), "stderr");
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .build();
        Host {
            wasi,
            table: ResourceTable::new(),
            limits: MemoryLimit {
                limit: memory_limit,
                exceeded: None,
            },
            ctx,
            stdout,
            stderr,
            timed_out: false,
        }
    }

    /// Log what the guest left unterminated on stdout and stderr.
    pub(super) fn flush_output(&self) {
        self.stdout.finish();
        self.stderr.finish();
    }

    /// What the guest said on stderr before it trapped: a Rust panic's
    /// location and message when there is one, else its last line.
    pub(super) fn stderr_summary(&self) -> Option<String> {
        let tail = self.stderr.tail();
        let lines: Vec<&str> = tail
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.starts_with("note: run with `RUST_BACKTRACE"))
            .collect();
        match lines.iter().rposition(|l| l.contains("panicked at")) {
            Some(i) => Some(
                lines[i..]
                    .iter()
                    .take(2)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            None => lines.last().map(|l| (*l).to_owned()),
        }
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

impl types::Host for Host {}

impl log::Host for Host {
    fn log(&mut self, level: log::Level, message: String) {
        let JobContext { topic, id, attempt } = &self.ctx;
        match level {
            log::Level::Trace => {
                tracing::trace!(target: "handler", %topic, job_id = %id, attempt, "{message}")
            }
            log::Level::Debug => {
                tracing::debug!(target: "handler", %topic, job_id = %id, attempt, "{message}")
            }
            log::Level::Info => {
                tracing::info!(target: "handler", %topic, job_id = %id, attempt, "{message}")
            }
            log::Level::Warn => {
                tracing::warn!(target: "handler", %topic, job_id = %id, attempt, "{message}")
            }
            log::Level::Error => {
                tracing::error!(target: "handler", %topic, job_id = %id, attempt, "{message}")
            }
        }
    }
}

/// Caps linear memory at the topic's `memory`; going past it traps the guest
/// and is remembered so the failure can say why.
pub struct MemoryLimit {
    limit: u64,
    pub(super) exceeded: Option<usize>,
}

impl ResourceLimiter for MemoryLimit {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.limit {
            self.exceeded = Some(desired);
            wasmtime::bail!("memory limit of {} bytes exceeded", self.limit);
        }
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
