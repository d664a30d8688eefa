//! hourglass: delayed and retried jobs on Redis, handled by sandboxed
//! WebAssembly components that can be replaced while the runner runs.
//!
//! # Layout
//!
//! - [`config`]: `queues.toml`, parsed strictly and validated whole.
//! - [`redis`]: the job pipeline in Redis, one Lua script per state change;
//!   the only module that talks to Redis.
//! - [`wasm`]: compiling handlers and running one attempt in a fresh, limited
//!   instance; the only module that touches wasmtime.
//! - [`reload`]: `queues.toml` and handler files changing under a running runner.
//! - [`upgrade`]: moving in-flight journaled jobs to a new handler version
//!   when a replay check of their journal passes.
//! - [`worker`]: the runner: priority scheduling, attempts, the watchers of
//!   attempts, commits, shutdown.
//! - [`events`]: what happened to jobs, as a stream.
//! - [`telemetry`]: spans of jobs exported with OpenTelemetry; the only
//!   module that uses OpenTelemetry's crates.
//! - [`http`]: the API, dashboard and `/metrics` at `[http] listen`;
//!   [`metrics`]: the Prometheus metrics it serves.
//! - [`cli`]: the `hourglass` command line; [`job_options`]: a job's
//!   options as producers write them, checked once for the CLI and the API.
//! - `clock`: time in milliseconds; `private_dir`: folders that hold code the
//!   runner runs.

pub mod cli;
pub mod clock;
pub mod config;
pub mod events;
pub mod flow_file;
pub mod http;
pub mod job_options;
pub mod metrics;
pub mod private_dir;
pub mod redis;
pub mod reload;
pub mod telemetry;
pub mod upgrade;
pub mod wasm;
pub mod worker;

/// This build's version and the commit it was built from (`runner/build.rs`:
/// git's `HEAD`, `HOURGLASS_COMMIT` if set, else "unknown"), as `hourglass
/// --version` and each runner's heartbeat say it: `0.2.0-dev (23054fc1a2b3)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("HOURGLASS_COMMIT"),
    ")"
);

pub use config::Config;
pub use reload::Notice;
pub use worker::Runner;
