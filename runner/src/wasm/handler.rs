//! A handler compiled and checked: [`LoadedHandler`], a component
//! pre-instantiated against the contract once per file version and named by
//! its content hash ([`content_hash`]); what each of its instances needs
//! ([`Needs`]); and why a file cannot serve ([`LoadError`]). The compiling
//! itself is the runtime's (`runtime.rs`: `Runtime::load`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::bindings;
use super::host::Host;
use super::size;

/// A compiled, contract-checked handler, ready to instantiate.
#[derive(Clone)]
pub struct LoadedHandler {
    pub(super) pre: bindings::HandlerPre<Host>,
    pub(super) hash: Arc<str>,
    pub(super) needs: Option<Needs>,
    /// It exports `handle-batch` (the WIT's world `handler-batch`).
    pub(super) batches: bool,
    /// What its recent attempts cost in CPU: where its next ones run.
    pub(super) recent: Arc<RecentCpu>,
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

    /// Whether its recent attempts were light: each took under `bound` of
    /// CPU on average (the store, the instance and the call). Unknown until
    /// one has run: not light. The scheduler runs a light handler's attempts
    /// on its own thread and a heavier one's on the pool (`[runner]
    /// light_cpu`, `worker/scheduler`).
    pub fn light(&self, bound: std::time::Duration) -> bool {
        self.recent.below(bound)
    }

    /// Whether it takes jobs in batches (exports `handle-batch`): a topic
    /// with `batch` refuses a handler that does not, saying why.
    pub fn fits_batches(&self, batched: bool) -> Result<(), String> {
        if batched && !self.batches {
            return Err(format!(
                "handler {} does not export `handle-batch`, and the topic has `batch`: build it with `hourglass_sdk::batch_handler!` (Rust), or remove `batch` from the topic",
                self.hash
            ));
        }
        Ok(())
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

/// The CPU of a handler version's recent attempts, µs: a moving average
/// (each attempt weighs an eighth), unknown (NaN) until the first.
#[derive(Debug)]
pub(super) struct RecentCpu(AtomicU64);

impl Default for RecentCpu {
    fn default() -> Self {
        RecentCpu(AtomicU64::new(f64::NAN.to_bits()))
    }
}

impl RecentCpu {
    /// One more attempt, of `cpu_us`, counted as at most 4 times the
    /// average so far: a short poll is timed by the wall clock (`usage.rs`),
    /// so a light attempt preempted once reads a millisecond, and alone it
    /// should not make its handler heavy; a handler that got costly for good
    /// reads so within a few attempts (the average grows by at least a third
    /// each). Attempts ending on two threads at once may each miss the
    /// other's: an average, not a count.
    pub(super) fn observe(&self, cpu_us: u64) {
        let old = f64::from_bits(self.0.load(Ordering::Relaxed));
        let new = if old.is_nan() {
            cpu_us as f64
        } else {
            old + ((cpu_us as f64).min(4.0 * old) - old) / 8.0
        };
        self.0.store(new.to_bits(), Ordering::Relaxed);
    }

    /// Whether the average is under `bound` (unknown: no).
    fn below(&self, bound: std::time::Duration) -> bool {
        // NaN compares false
        f64::from_bits(self.0.load(Ordering::Relaxed)) < bound.as_secs_f64() * 1e6
    }
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

/// How a handler version is named in logs, `inspect` and dead letters: the
/// first 16 hex digits of the SHA-256 of the file.
pub fn content_hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handler_is_light_once_its_recent_attempts_average_under_the_bound() {
        let bound = std::time::Duration::from_micros(50);
        let recent = RecentCpu::default();
        assert!(!recent.below(bound), "unknown is not light");
        recent.observe(10);
        assert!(recent.below(bound), "one cheap attempt");
        // one preempted attempt among cheap ones counts as 4 times the average
        recent.observe(5_000);
        assert!(recent.below(bound), "10 + 30/8 = 13.75 µs");
        assert!(!recent.below(std::time::Duration::from_micros(13)));
        // costly for good: heavy within a few attempts
        let mut heavy_after = 0;
        while recent.below(bound) {
            recent.observe(300);
            heavy_after += 1;
        }
        assert_eq!(
            heavy_after, 5,
            "13.75, 18.9, 26.0, 35.8, 49.2, then 67.7 µs"
        );
        for _ in 0..8 {
            recent.observe(10);
        }
        assert!(recent.below(bound), "cheap again after a few");
        // a first attempt counts whole
        let costly = RecentCpu::default();
        costly.observe(5_000);
        assert!(!costly.below(std::time::Duration::from_millis(4)));
    }
}
