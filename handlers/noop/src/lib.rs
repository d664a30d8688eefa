//! Acknowledges every job and does nothing else: no log line, no parsing.
//! The benchmark's no-op for the `hourglass run` process (`echo` logs a
//! line per job, which the binary formats and writes at its default level).

use hourglass_sdk::Job;

fn noop(_job: Job) {}

hourglass_sdk::handler!(noop);
