//! The [`Runtime`], one per process: the engine with its instance pool
//! (sized from the runner's concurrency, [`PER_INSTANCE`] each), epoch
//! interruption and the compile cache; the linker with WASI, wasi:http and the
//! handler world; the epoch ticker; compiling a file into a
//! [`LoadedHandler`]; and the count of instances alive ([`InUse`]).

use std::path::Path;
use std::sync::Arc;

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Cache, Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::handler::{LoadError, LoadedHandler, Needs, content_hash};
use super::host::Host;
use super::journal::{JournalStore, NoStore};
use super::outbound::OutboundCounts;
use super::report::ProgressBoard;
use super::{bindings, cache, epoch, warm};
use crate::config::MAX_MEMORY;

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

/// A WebAssembly page, the unit of memory sizes.
const WASM_PAGE: u64 = 64 << 10;

/// Set to `1`, the engine writes `/tmp/perf-<pid>.map`, which names the
/// handlers' compiled functions (`wasm[3]::function[1687]::dlmalloc`) in
/// `perf report` (`docs/src/performance/profiling.md`).
pub const PERFMAP_ENV: &str = "HOURGLASS_PERFMAP";

/// Linear memory kept resident per pool slot between instances, reset by
/// copying back only the pages an instance wrote: a Rust handler's initial
/// memory (about 1.1 MiB) fits, and so do Python's (13.2 MiB) and
/// JavaScript's (9.1 MiB), whose pages would otherwise be copied on write
/// (with a TLB shootdown each) in every instance. Resident memory grows only
/// by the pages handlers actually write.
const KEEP_RESIDENT: usize = 16 << 20;

/// How many handler instances are alive now (a shared count).
#[derive(Debug, Clone, Default)]
pub struct InUse(Arc<std::sync::atomic::AtomicU32>);

impl InUse {
    /// Instances alive now.
    pub fn now(&self) -> u32 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Count one instance until the guard drops.
    pub(super) fn enter(&self) -> InUseGuard {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InUseGuard(self.clone())
    }
}

pub(super) struct InUseGuard(InUse);

impl Drop for InUseGuard {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The engine, linker and epoch ticker shared by all handlers.
pub struct Runtime {
    /// Idle instances of topics that reuse them.
    pub(super) warm: warm::WarmPool,
    pub(super) engine: Engine,
    linker: Linker<Host>,
    cache: Option<Cache>,
    pub(super) outbound: Arc<OutboundCounts>,
    pub(super) progress: Arc<ProgressBoard>,
    /// Where durable handlers' steps are written (set once connected).
    pub(super) journal: std::sync::OnceLock<Arc<dyn JournalStore>>,
    pub(super) in_use: InUse,
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
            journal: std::sync::OnceLock::new(),
            in_use: InUse::default(),
            _ticker: ticker,
        })
    }

    /// Write durable handlers' journals to `store` (once: the first store
    /// set stays). Until then every step is refused, saying why.
    pub fn set_journal_store(&self, store: Arc<dyn JournalStore>) {
        let _ = self.journal.set(store);
    }

    /// The journal store attempts write to.
    pub(super) fn journal_store(&self) -> Arc<dyn JournalStore> {
        match self.journal.get() {
            Some(store) => store.clone(),
            None => Arc::new(NoStore),
        }
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
        prepare_images(name, &component);
        let needs = component.resources_required().map(|r| Needs {
            memories: r.num_memories,
            initial_memory: r
                .max_initial_memory_size
                .unwrap_or(0)
                .saturating_mul(WASM_PAGE),
            tables: r.num_tables,
        });
        let batches = component
            .component_type()
            .exports(&self.engine)
            .any(|(name, _)| name == "handle-batch");
        Ok(LoadedHandler {
            pre,
            hash: content_hash(bytes).into(),
            needs,
            batches,
            recent: Arc::default(),
        })
    }
}

/// Make `component`'s memory images (the copy-on-write source of each new
/// instance's linear memory: a sealed memfd per core module on Linux) while
/// the handler loads, rather than in its first instance, so that no job's
/// attempt pays for them or fails on them. Linux may refuse the seals for a
/// moment (`EBUSY` while the new memfd's pages are still held elsewhere;
/// seen once in a loaded CI run, where it failed the first Python job of a
/// test as a trap): tried three times. If all three fail the handler loads
/// anyway and its first instance tries again, as wasmtime does by itself.
///
/// Callers load on a blocking thread (the loader's, `check`'s, `build`'s),
/// so the pauses hold no async worker.
fn prepare_images(name: &str, component: &Component) {
    let mut failed = None;
    for pause in [0, 50, 250] {
        std::thread::sleep(std::time::Duration::from_millis(pause));
        match component.initialize_copy_on_write_image() {
            Ok(()) => return,
            Err(e) => failed = Some(e),
        }
    }
    if let Some(e) = failed {
        tracing::warn!(
            handler = name,
            "memory image not made at load: {e:#} (its first instance makes it)"
        );
    }
}
