//! hourglass integration tests: a real redis-server per test (started on a
//! free port, killed on drop), real wasmtime, real components built from
//! `handlers/` by the `test-support` crate.
//!
//! Index:
//! - `util`: the redis-server guard, project fixtures, runner and event helpers.
//! - `pipeline`: the Redis state changes with a controlled clock (no runner).
//! - `jobs`: ack, delay (never early), retry, dead-letter, idempotent enqueue, end to end.
//! - `limits`: traps, time limit, memory limit; a stopped handler pins no worker.
//! - `priority`: strict priority across topics.
//! - `crash`: a runner killed with SIGKILL mid-job loses nothing; graceful shutdown.
//! - `cli`: the binary: bad queues.toml, check, enqueue.

mod cli;
mod crash;
mod jobs;
mod limits;
mod pipeline;
mod priority;
mod util;
