//! Live reload: `queues.toml` and the handler components change under a
//! running runner.
//!
//! The [`Loader`] knows which version of every handler file is loaded (its
//! size and modification time, and its content hash). A rescan stats every
//! file, reads and hashes only those whose stamp changed, and compiles (off
//! the async executor) only those whose content changed. The result is a
//! [`Snapshot`]: a validated configuration and the handler each topic serves.
//! A file that fails to compile or does not match the contract is rejected
//! and the version already loaded keeps serving; a deleted file leaves its
//! topics without a handler (they stop claiming) until it returns. A new
//! configuration is applied only whole: if it does not parse, or a topic it
//! adds cannot load its handler, the running one stays.
//!
//! Every version that loads is also kept ([`Versions`]): each topic's newest
//! few stay loadable by content hash after their file is replaced, for
//! rollouts, pins and replays.
//!
//! [`watch`] turns file-system events (and, as a safety net, a periodic
//! rescan) into [`Reload`]s for the scheduler: a new snapshot if anything
//! changed, and [`Notice`]s of what happened, which the scheduler publishes
//! once it serves the new state.

mod loader;
mod serving;
mod versions;
mod watch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Config;
use crate::wasm::LoadedHandler;

pub use loader::Loader;
pub use serving::{ReloadRecord, Serving};
pub use versions::{Kept, Versions};
pub use watch::watch;

/// What the runner serves: a configuration and each topic's handler.
#[derive(Clone)]
pub struct Snapshot {
    /// The validated configuration.
    pub config: Arc<Config>,
    /// Topic name → its handler. A topic missing here has no loadable file
    /// and claims nothing.
    pub handlers: HashMap<String, LoadedHandler>,
}

/// What a rescan did, as the runner reports it (see `Runner::subscribe_reloads`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A handler version now serves its topics.
    Loaded {
        /// The handler file.
        path: PathBuf,
        /// Its content hash.
        hash: String,
    },
    /// A handler file cannot serve; the version before it (if any) still does.
    Rejected {
        /// The handler file.
        path: PathBuf,
        /// Why.
        error: String,
    },
    /// A handler file is gone; its topics claim nothing until it returns.
    Missing {
        /// The handler file.
        path: PathBuf,
    },
    /// A changed configuration now applies.
    ConfigApplied,
    /// A changed configuration was refused; the running one stays.
    ConfigRejected {
        /// Why, naming file, line and field where there is one.
        error: String,
    },
}

/// The outcome of a rescan that found something.
pub struct Reload {
    /// What to serve from now on, if it changed.
    pub snapshot: Option<Snapshot>,
    /// What happened, in order.
    pub notices: Vec<Notice>,
}
