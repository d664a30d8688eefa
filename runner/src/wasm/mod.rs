//! The WebAssembly host: the only module that touches wasmtime.
//!
//! One [`Runtime`] per process holds the engine (pooling allocator sized from
//! the runner's concurrency, epoch interruption, the compile cache), the
//! linker and the epoch ticker. A [`LoadedHandler`] is a component compiled,
//! checked against the contract and pre-instantiated once per file version,
//! named by its content hash. Every attempt runs in a fresh store and
//! instance inside its topic's [`Sandbox`]: time, CPU and memory limits, the
//! granted environment and directories, the follow-up rules. A guest past its
//! time limit is stopped at its next epoch check, and a host call that hangs
//! is cut off by a timer as well.

mod cache;
mod context;
mod epoch;
mod host;
mod outbound;
mod output;
mod report;
mod run;
mod usage;
mod warm;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Cache, Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::config::{Grants, MAX_MEMORY, Reuse, TopicConfig};
pub use cache::CacheError;
pub use context::JobContext;
pub use host::FollowUp;
use host::Host;
pub use outbound::{HttpPolicy, OutboundCounts, is_public};
pub use report::{MAX_DETAIL, ProgressBoard, Reported, check_detail};
pub use run::Attempted;
pub use usage::Usage;

/// Bindings generated from `wit/handler.wit`.
#[allow(missing_docs)]
pub mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "handler",
        exports: { default: async },
    });
}

/// A handler file that cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not a valid WebAssembly component.
    #[error("{path} is not a valid WebAssembly component: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// What wasmtime said.
        reason: String,
    },
    /// The engine could not be created (bad limits, no virtual memory).
    #[error("cannot create the WebAssembly engine: {0}")]
    Engine(String),
    /// A component that needs more per instance than the pool gives one.
    #[error("{path} needs more per instance than the runner's instance pool allows: {reason}")]
    Unfit {
        /// The file.
        path: String,
        /// What wasmtime said (what, how many, the limit).
        reason: String,
    },
    /// A component that does not implement the handler world.
    #[error("{path} does not implement the hourglass handler contract (wit/handler.wit): {reason}")]
    Incompatible {
        /// The file.
        path: String,
        /// What does not match.
        reason: String,
    },
}

/// How one attempt ended: the handler's answer, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// The handler acked.
    Ack(Acked),
    /// The handler asked for another attempt, after `delay` or the topic's backoff.
    Retry {
        /// The handler's choice of delay.
        delay: Option<Duration>,
        /// Why.
        reason: String,
    },
    /// The handler gave up for good.
    Fail(String),
    /// The attempt failed without an answer: trap, time limit or memory
    /// limit; the reason says which.
    Crashed(String),
    /// The attempt could not start for a reason that is not the job's fault
    /// (no instance slot free): release it without counting the attempt.
    NotStarted(String),
}

/// What an attempt that acked leaves behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acked {
    /// Follow-up jobs to enqueue after the ack.
    pub follow_ups: Vec<FollowUp>,
    /// The result the handler set, if any.
    pub result: Option<Vec<u8>>,
}

/// What one attempt of a topic's handler may use.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Wall-clock time.
    pub timeout: Duration,
    /// CPU time, if limited.
    pub cpu: Option<Duration>,
    /// Linear memory in bytes.
    pub memory: u64,
    /// The granted environment and directories.
    pub grants: Arc<Grants>,
    /// Topics follow-up jobs may go to.
    pub may_enqueue: Arc<[String]>,
    /// The largest follow-up payload, in bytes.
    pub max_payload: u64,
    /// Where outbound HTTP may go, with its limits.
    pub http: Arc<HttpPolicy>,
    /// The largest result an attempt may set, in bytes.
    pub result_max: u64,
    /// Whether an instance serves several jobs, and how many.
    pub reuse: Option<Reuse>,
}

impl Sandbox {
    /// The sandbox `topic` sets, with the runner's payload limit.
    pub fn for_topic(topic: &TopicConfig, max_payload: u64) -> Sandbox {
        let grants = Arc::new(topic.grants.clone());
        Sandbox {
            timeout: topic.timeout,
            cpu: topic.cpu,
            memory: topic.memory,
            grants: grants.clone(),
            may_enqueue: topic.may_enqueue.iter().cloned().collect(),
            max_payload,
            http: Arc::new(HttpPolicy::new(grants, topic.http.clone())),
            result_max: topic.results.as_ref().map_or(DEFAULT_RESULT_MAX, |r| r.max),
            reuse: topic.reuse,
        }
    }
}

/// The largest result of a topic without `results` (which keeps none, but
/// may hand its result to follow-ups): 64 KiB.
pub const DEFAULT_RESULT_MAX: u64 = 64 << 10;

/// The input of one attempt.
#[derive(Debug, Clone)]
pub struct JobInput {
    /// The job's topic.
    pub topic: String,
    /// The job's id.
    pub id: String,
    /// Which attempt this is (1 for the first).
    pub attempt: u32,
    /// The payload.
    pub payload: Vec<u8>,
    /// Attempts in all.
    pub max_attempts: u32,
    /// When accepted (ms).
    pub enqueued_at_ms: u64,
    /// When due (ms).
    pub due_at_ms: u64,
    /// The result of the job that started this one, if it handed it on.
    pub parent_result: Option<Vec<u8>>,
    /// The attempt's span, when spans are exported.
    pub trace: Option<Arc<crate::telemetry::AttemptTrace>>,
}

/// The most one instance of a handler may hold. Every component that loads
/// fits it (a bigger one is refused at load, with wasmtime's message naming
/// the limit), so the pool, `slots` times this, always has room for `slots`
/// instances of any handlers at once: no job waits or is released for want
/// of an instance. Core instances cost nothing until used (the pool only
/// counts them): a Python handler (componentize-py) makes 14, JavaScript
/// (componentize-js) 4, Rust 1 to 3. Memories and tables are pool slots,
/// address space until used: each of those needs 1 memory and 2 tables.
pub const PER_INSTANCE: PerInstance = PerInstance {
    core_instances: 64,
    memories: 4,
    tables: 8,
};

/// Limits of one instance in the pool.
#[derive(Debug, Clone, Copy)]
pub struct PerInstance {
    /// Core module instances.
    pub core_instances: u32,
    /// Linear memories.
    pub memories: u32,
    /// Tables.
    pub tables: u32,
}

/// What a handler asks of each instance, as far as the component says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// Linear memories it defines.
    pub memories: u32,
    /// Its largest memory at start, in bytes.
    pub initial_memory: u64,
    /// Tables it defines.
    pub tables: u32,
}

/// A WebAssembly page, the unit of memory sizes.
const WASM_PAGE: u64 = 64 << 10;

/// Set to `1`, the engine writes `/tmp/perf-<pid>.map`, which names the
/// handlers' compiled functions (`wasm[3]::function[1687]::dlmalloc`) in
/// `perf report` (README: Profiling).
pub const PERFMAP_ENV: &str = "HOURGLASS_PERFMAP";

/// Linear memory kept resident per pool slot between instances, reset by
/// copying back only the pages an instance wrote: a Rust handler's initial
/// memory (about 1.1 MiB) fits, and so do Python's (13.2 MiB) and
/// JavaScript's (9.1 MiB), whose pages would otherwise be copied on write
/// (with a TLB shootdown each) in every instance. Resident memory grows only
/// by the pages handlers actually write.
const KEEP_RESIDENT: usize = 16 << 20;

/// A compiled, contract-checked handler, ready to instantiate.
#[derive(Clone)]
pub struct LoadedHandler {
    pre: bindings::HandlerPre<Host>,
    hash: Arc<str>,
    needs: Option<Needs>,
}

impl LoadedHandler {
    /// The content hash of the file it was compiled from (see [`content_hash`]).
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The same, shared (what metrics and completions carry).
    pub fn version(&self) -> &Arc<str> {
        &self.hash
    }

    /// What each instance needs; `None` when the component does not say (it
    /// instantiates modules it imports).
    pub fn needs(&self) -> Option<Needs> {
        self.needs
    }

    /// Whether an instance can start within a memory limit of `limit` bytes:
    /// why not, if it cannot (every attempt would fail at once).
    pub fn fits_memory(&self, limit: u64) -> Result<(), String> {
        match self.needs {
            Some(needs) if needs.initial_memory > limit => Err(format!(
                "handler {} starts with {} of linear memory, more than the topic's memory limit of {}: raise the topic's `memory`",
                self.hash,
                size(needs.initial_memory),
                size(limit)
            )),
            _ => Ok(()),
        }
    }
}

/// How a handler version is named in logs, `inspect` and dead letters: the
/// first 16 hex digits of the SHA-256 of the file.
pub fn content_hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// How many handler instances are alive now (a shared count).
#[derive(Debug, Clone, Default)]
pub struct InUse(Arc<std::sync::atomic::AtomicU32>);

impl InUse {
    /// Instances alive now.
    pub fn now(&self) -> u32 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Count one instance until the guard drops.
    fn enter(&self) -> InUseGuard {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InUseGuard(self.clone())
    }
}

struct InUseGuard(InUse);

impl Drop for InUseGuard {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The engine, linker and epoch ticker shared by all handlers.
pub struct Runtime {
    /// Idle instances of topics that reuse them.
    warm: warm::WarmPool,
    engine: Engine,
    linker: Linker<Host>,
    cache: Option<Cache>,
    outbound: Arc<OutboundCounts>,
    progress: Arc<ProgressBoard>,
    in_use: InUse,
    _ticker: epoch::EpochTicker,
}

impl Runtime {
    /// An engine whose instance pool has room for `slots` instances at once,
    /// caching compiled handlers in `cache_dir` when given. A cache that cannot
    /// be used is logged and skipped: handlers are then compiled every start.
    pub fn new(slots: u32, cache_dir: Option<&Path>) -> Result<Runtime, LoadError> {
        Runtime::with_limits(slots, PER_INSTANCE, cache_dir)
    }

    /// Like [`Runtime::new`] with other per-instance limits (tests).
    pub fn with_limits(
        slots: u32,
        per_instance: PerInstance,
        cache_dir: Option<&Path>,
    ) -> Result<Runtime, LoadError> {
        let engine_error = |e: wasmtime::Error| LoadError::Engine(format!("{e:#}"));
        let mut pool = PoolingAllocationConfig::default();
        // Every handler that loads fits PER_INSTANCE (a bigger one is refused
        // at load), so `slots` instances of any handlers at once always fit.
        pool.total_component_instances(slots)
            .total_core_instances(slots.saturating_mul(per_instance.core_instances))
            .max_core_instances_per_component(per_instance.core_instances)
            .total_memories(slots.saturating_mul(per_instance.memories))
            .max_memories_per_component(per_instance.memories)
            .total_tables(slots.saturating_mul(per_instance.tables))
            .max_tables_per_component(per_instance.tables)
            .total_stacks(slots)
            // Every slot reserves 4 GiB of address space anyway (no bounds checks
            // needed); allowing it all lets a reload raise a topic's `memory`
            // live. The per-store limiter enforces each topic's own limit.
            .max_memory_size(usize::try_from(MAX_MEMORY).unwrap_or(usize::MAX))
            // Resetting a slot with madvise costs a TLB shootdown (an IPI to every
            // core) per instance; most of the per-job kernel time was that. Keep
            // the first pages resident and reset only the dirtied ones (PAGEMAP_SCAN
            // where the kernel has it, Linux 6.7+), and batch what is decommitted.
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(64 << 10)
            .async_stack_keep_resident(64 << 10)
            .pagemap_scan(wasmtime::Enabled::Auto)
            .decommit_batch_size(slots.div_ceil(2).max(1) as usize);
        let cache = cache_dir.and_then(|dir| match cache::open(dir) {
            Ok(cache) => Some(cache),
            Err(e) => {
                tracing::warn!("{e}; compiling handlers without a cache");
                None
            }
        });
        let mut config = Config::new();
        config
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
            .wasm_backtrace_max_frames(None)
            .cache(cache.clone());
        if std::env::var_os(PERFMAP_ENV).is_some_and(|v| v == "1") {
            // /tmp/perf-<pid>.map names every compiled function for `perf report`
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config).map_err(engine_error)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_error)?;
        // every handler may import wasi:http; what it reaches is decided per request
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(engine_error)?;
        bindings::Handler::add_to_linker::<Host, HasSelf<Host>>(&mut linker, |h| h)
            .map_err(engine_error)?;
        let ticker = epoch::EpochTicker::start(engine.clone());
        Ok(Runtime {
            warm: warm::WarmPool::default(),
            engine,
            linker,
            cache,
            outbound: Arc::default(),
            progress: Arc::default(),
            in_use: InUse::default(),
            _ticker: ticker,
        })
    }

    /// Outbound HTTP requests so far, per (topic, status).
    pub fn outbound_counts(&self) -> Arc<OutboundCounts> {
        self.outbound.clone()
    }

    /// Where attempts post their progress, for the worker to write.
    pub fn progress(&self) -> Arc<ProgressBoard> {
        self.progress.clone()
    }

    /// The count of instances alive now.
    pub fn in_use(&self) -> &InUse {
        &self.in_use
    }

    /// Compile-cache (hits, misses) so far, if there is a cache.
    pub fn cache_stats(&self) -> Option<(usize, usize)> {
        self.cache
            .as_ref()
            .map(|c| (c.cache_hits(), c.cache_misses()))
    }

    /// Compile `path` and check it against the contract. Blocking (compiling
    /// takes milliseconds): call it off the async executor.
    pub fn load(&self, path: &Path) -> Result<LoadedHandler, LoadError> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: shown.clone(),
            source,
        })?;
        self.load_bytes(&shown, &bytes)
    }

    /// Compile `bytes` (read from `name`) and check them against the contract.
    pub fn load_bytes(&self, name: &str, bytes: &[u8]) -> Result<LoadedHandler, LoadError> {
        let component = Component::from_binary(&self.engine, bytes).map_err(|e| {
            let reason = format!("{e:#}");
            // the pool's per-instance limits are checked as the component is made
            if reason.contains("in the pooling allocator") {
                LoadError::Unfit {
                    path: name.to_owned(),
                    reason,
                }
            } else {
                LoadError::Invalid {
                    path: name.to_owned(),
                    reason,
                }
            }
        })?;
        let incompatible = |e: wasmtime::Error| LoadError::Incompatible {
            path: name.to_owned(),
            reason: format!("{e:#}"),
        };
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(incompatible)?;
        let pre = bindings::HandlerPre::new(pre).map_err(incompatible)?;
        let needs = component.resources_required().map(|r| Needs {
            memories: r.num_memories,
            initial_memory: r
                .max_initial_memory_size
                .unwrap_or(0)
                .saturating_mul(WASM_PAGE),
            tables: r.num_tables,
        });
        Ok(LoadedHandler {
            pre,
            hash: content_hash(bytes).into(),
            needs,
        })
    }
}

/// `16 MiB` for whole mebibytes (how limits are written), else `16.1 MiB`.
fn size(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        bytesize::ByteSize(bytes).display().iec().to_string()
    }
}
