//! A handler compiled and checked: [`LoadedHandler`], a component
//! pre-instantiated against the contract once per file version and named by
//! its content hash ([`content_hash`]); what each of its instances needs
//! ([`Needs`]); and why a file cannot serve ([`LoadError`]). The compiling
//! itself is the runtime's (`runtime.rs`: `Runtime::load`).

use std::sync::Arc;

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
