//! The debug log lines of an attempt: `started` and `ran`, with what it used.
//! (Retries, burials and releases are logged by the committer, once Redis
//! has them.)

use super::{Attempt, Ending, Watcher};
use crate::wasm::Finish;

/// Logs each attempt's start and end at debug level, and at warn level an
/// attempt that could not start.
pub(super) struct Log;

impl Watcher for Log {
    fn started(&self, a: &Attempt<'_>) {
        tracing::debug!(topic = %a.topic, job_id = %a.id, attempt = a.number, handler = &**a.version, late_ms = a.late_ms(), "started");
    }

    fn ended(&self, a: &Attempt<'_>, e: &Ending<'_>) {
        if let Finish::NotStarted(why) = e.finish {
            tracing::warn!(topic = %a.topic, job_id = %a.id, "attempt not started, released: {why}");
        }
        let usage = e.usage;
        tracing::debug!(
            topic = %a.topic,
            job_id = %a.id,
            attempt = a.number,
            handler = &**a.version,
            wall_us = usage.wall_us,
            cpu_us = usage.cpu_us,
            memory_peak = usage.memory_peak,
            start_us = usage.start_us,
            requests = usage.requests,
            bytes_out = usage.bytes_out,
            bytes_in = usage.bytes_in,
            "ran"
        );
    }
}
