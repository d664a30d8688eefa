//! Durable handlers: steps whose results survive retries, sleeps that hold
//! no slot, waits for signals.
//!
//! ```no_run
//! use std::time::Duration;
//! use hourglass_sdk::{Job, durable};
//!
//! fn order(job: Job) -> hourglass_sdk::Result {
//!     let order: u64 = job.json()?;
//!     // run once: a later attempt gets the recorded charge id back
//!     let charge: String = durable::step("charge", || Ok(format!("ch_{order}")))?;
//!     durable::sleep(Duration::from_secs(3600)); // the attempt ends here for an hour
//!     let approved = durable::wait_for_signal("approved", Duration::from_secs(86_400))?;
//!     hourglass_sdk::info!("{charge} approved: {}", approved.is_some());
//!     Ok(())
//! }
//! # hourglass_sdk::handler!(order);
//! ```
//!
//! A step's result is written to the job's journal (JSON, through serde)
//! before [`step`] returns: a later attempt, after a failure, a crash or a
//! sleep, gets it back without running the step. A step that fails is not
//! recorded and fails the attempt as any error does. Names are unique within
//! a job. The handler runs again from the top after every sleep and wait,
//! so what it does outside steps runs again: keep side effects in steps.
//! A job with a journal runs every later attempt on the handler version
//! that wrote it. See the docs' "Durable handlers" page.

use core::time::Duration;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::Error;
use crate::bindings::hourglass::handler::durable as host;

/// Run `f` once for this job as step `name` and record its result; on a
/// later attempt, return the recorded result without running `f`.
///
/// Refused (a permanent failure, since another attempt would do the same):
/// a name used twice in one attempt, an empty name, one over 256 bytes or
/// one starting with `~`. A result over 256 KiB, or a journal past 4 MiB,
/// fails the attempt, naming the limit.
pub fn step<T, F>(name: &str, f: F) -> Result<T, Error>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
    F: FnOnce() -> Result<T, Error>,
{
    if let Some(recorded) = host::begin_step(name).map_err(Error::fail)? {
        return serde_json::from_slice(&recorded).map_err(|e| {
            Error::fail(format!(
                "step {name:?}: its recorded result does not fit this type: {e}"
            ))
        });
    }
    let value = f()?;
    let bytes = serde_json::to_vec(&value)
        .map_err(|e| Error::fail(format!("step {name:?}: result not serializable: {e}")))?;
    host::record_step(name, &bytes).map_err(Error::retry)?;
    Ok(value)
}

/// [`step`] for a result that is bytes, recorded as they are.
pub fn step_bytes<F>(name: &str, f: F) -> Result<Vec<u8>, Error>
where
    F: FnOnce() -> Result<Vec<u8>, Error>,
{
    if let Some(recorded) = host::begin_step(name).map_err(Error::fail)? {
        return Ok(recorded);
    }
    let value = f()?;
    host::record_step(name, &value).map_err(Error::retry)?;
    Ok(value)
}

/// Sleep `duration` without holding a slot: the attempt ends here
/// (suspended; no attempt is used) and the job runs again from the top when
/// the time comes, when this sleep returns at once. Sleeps are told apart
/// by the order they are called in.
pub fn sleep(duration: Duration) {
    host::sleep(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
}

/// [`sleep`] until `at_ms` (ms since the Unix epoch).
pub fn sleep_until(at_ms: u64) {
    host::sleep_until(at_ms);
}

/// Wait for signal `name` for at most `timeout`: its payload, or `None` if
/// the timeout passed first. Like [`sleep`], the attempt ends here while it
/// waits. A signal sent before the wait is kept for it. The same name rules
/// as [`step`].
pub fn wait_for_signal(name: &str, timeout: Duration) -> Result<Option<Vec<u8>>, Error> {
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    host::wait_for_signal(name, ms).map_err(Error::fail)
}

/// [`wait_for_signal`] with a JSON payload, read as `T`.
pub fn wait_for_signal_json<T: serde::de::DeserializeOwned>(
    name: &str,
    timeout: Duration,
) -> Result<Option<T>, Error> {
    match wait_for_signal(name, timeout)? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::fail(format!(
                "signal {name:?}: payload is not the expected JSON: {e}"
            ))
        }),
    }
}

/// Send signal `name` with `payload` to job `id` of `topic` (this topic or
/// one in its `may_enqueue`), now; wrap it in a [`step`] to send it once
/// across retries. Sending a name the job has had already changes nothing.
pub fn signal(topic: &str, id: &str, name: &str, payload: impl Into<Vec<u8>>) -> Result<(), Error> {
    let payload: Vec<u8> = payload.into();
    host::signal(topic, id, name, &payload).map_err(|e: String| Error::retry(e))
}

/// Whether this job takes the new path of the change named `name`: `true`
/// for a job that gets here on code that has the change (a new job, or one
/// past the end of its journal), `false` for one whose journal was written
/// past this point by code without it, which keeps the old path. So a
/// deploy can change durable code that old jobs are in the middle of, and
/// `hourglass upgrade` can move them (its replay check then passes):
///
/// ```no_run
/// # use hourglass_sdk::{durable, Error};
/// # fn reserve() -> Result<bool, Error> { Ok(true) }
/// # fn f() -> Result<(), Error> {
/// let reserved: bool = if durable::patched("reserve-stock")? {
///     durable::step("reserve-stock", reserve)?
/// } else {
///     durable::step("reserve", reserve)? // the old name, for old jobs
/// };
/// # Ok(()) }
/// ```
///
/// The answer is recorded in the journal the first time, so it never
/// changes for a job. Once `hourglass versions` counts no live job on the
/// old path, replace the branch with [`deprecate_patch`]. The same name
/// rules as [`step`] (a bad name fails the job for good; a journal that
/// could not be written retries it).
pub fn patched(name: &str) -> Result<bool, Error> {
    host::patched(name).map_err(|e| {
        if e.contains(" not recorded: ") {
            Error::retry(e)
        } else {
            Error::fail(e)
        }
    })
}

/// The old path of change `name` is gone from this code: what remains of
/// `if patched(name) { new } else { old }` once no job takes `old`. A job
/// that took the old path fails here for good (and the replay check of
/// `hourglass upgrade` does not move such a job to this code).
pub fn deprecate_patch(name: &str) -> Result<(), Error> {
    host::deprecate_patch(name).map_err(Error::fail)
}
