//! Write [hourglass](https://example.invalid/hourglass) job handlers in Rust.
//!
//! A handler is a function from a [`Job`] to an outcome, exported with the
//! [`handler!`] macro and compiled to a WebAssembly component
//! (`wasm32-wasip2`). The runner calls it once per attempt, each time in a
//! fresh sandboxed instance.
//!
//! ```no_run
//! use hourglass_sdk::{Job, info};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { order_id: u64 }
//!
//! fn cancel(job: Job) -> hourglass_sdk::Result {
//!     let order: Order = job.json()?;       // a bad payload fails the job for good
//!     info!("cancelling order {}", order.order_id);
//!     Ok(())                                // acknowledged: the job is deleted
//! }
//!
//! hourglass_sdk::handler!(cancel);
//! ```
//!
//! What the function may return (anything that implements [`IntoOutcome`]):
//!
//! | returned                     | the runner does                                     |
//! |------------------------------|-----------------------------------------------------|
//! | `()` / `Ok(())`              | ack: the job and its payload are deleted            |
//! | `Err(e)` for any error       | retry after the topic's backoff, `e` recorded       |
//! | `Err(Error::fail(..))`       | dead-letter now, with the reason                    |
//! | [`Outcome::retry_in`]`(d)`   | retry after `d`                                     |
//! | [`Outcome::fail`]`(reason)`  | dead-letter now                                     |
//! | [`Outcome::ack_with`]`(bytes)` / [`Outcome::ack_json`]`(&v)?` | ack with a result for waiters |
//!
//! A panic, running past the topic's `timeout` or past its `memory` is a
//! failed attempt: retried with backoff, dead-lettered when attempts run out.
//!
//! A handler can start further work with [`FollowUp`]: follow-up jobs are
//! parked with the attempt's ack and enqueued right after it, only if it acks.
//!
//! A long handler can say how far it has got with [`progress`]; a result
//! set with [`Outcome::ack_with`] is kept for producers who wait on the job
//! (topics with `results` in queues.toml) and can be handed to follow-ups
//! ([`FollowUp::with_parent_result`], read with [`Job::parent_result`]).
//!
//! A handler can be a process of steps with [`durable`]: each step's result
//! survives retries, [`durable::sleep`] holds no slot, and
//! [`durable::wait_for_signal`] waits for `hourglass signal`.
//!
//! A handler can call the hosts its topic is granted with [`http`]:
//! `http::post_json(url, &body)?` returns the status and body.
//!
//! Build and deploy with `hourglass build path/to/crate` (see the docs'
//! "Build and deploy a handler, live" page, `docs/src/deploy-live.md`).

extern crate alloc;

// The export macro expands in the handler's crate; it finds the bindings
// and the wit-bindgen runtime through these paths.
extern crate self as hourglass_sdk;

pub mod durable;
mod flow;
mod follow_up;
pub mod http;
mod job;
mod log;
mod outcome;
mod progress;

pub use flow::Flow;
pub use follow_up::FollowUp;
pub use job::{Batch, Dependency, Ended, Job};
pub use log::{Level, log};
pub use outcome::{Error, IntoOutcome, Outcome, Result};
pub use progress::{progress, progress_detail};

/// Generated bindings for `wit/handler.wit`. Not part of the stable API.
#[doc(hidden)]
#[allow(clippy::too_many_arguments, missing_docs)] // generated code
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "handler",
        pub_export_macro: true,
        export_macro_name: "__export_handler",
        default_bindings_module: "::hourglass_sdk::bindings",
        runtime_path: "::hourglass_sdk::__private::wit_bindgen::rt",
    });
}

/// Generated bindings for the world `handler-batch` (a handler that also
/// exports `handle-batch`), sharing [`bindings`]' interfaces. Not part of
/// the stable API.
#[doc(hidden)]
#[allow(clippy::too_many_arguments, missing_docs)] // generated code
pub mod batch_bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "handler-batch",
        pub_export_macro: true,
        export_macro_name: "__export_handler_batch",
        default_bindings_module: "::hourglass_sdk::batch_bindings",
        runtime_path: "::hourglass_sdk::__private::wit_bindgen::rt",
        with: {
            "hourglass:handler/types@0.1.0": crate::bindings::hourglass::handler::types,
            "hourglass:handler/log@0.1.0": crate::bindings::hourglass::handler::log,
            "hourglass:handler/follow-up@0.1.0": crate::bindings::hourglass::handler::follow_up,
            "hourglass:handler/report@0.1.0": crate::bindings::hourglass::handler::report,
            "hourglass:handler/durable@0.1.0": crate::bindings::hourglass::handler::durable,
        },
    });
}

/// Used by [`handler!`]; not part of the stable API.
#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;

    use crate::bindings::hourglass::handler::types as wit;

    /// Turn the guest function's answer into the WIT outcome.
    pub fn run<R: crate::IntoOutcome>(f: fn(crate::Job) -> R, job: wit::Job) -> wit::Outcome {
        f(crate::Job::from_wit(job)).into_outcome().into_wit()
    }

    /// A batch handler's answers as the WIT's outcomes, one per job.
    pub fn run_batch<R: crate::IntoOutcome>(
        f: fn(Vec<crate::Job>) -> Vec<R>,
        jobs: Vec<wit::Job>,
    ) -> Vec<wit::Outcome> {
        let jobs = jobs.into_iter().map(crate::Job::from_wit).collect();
        f(jobs)
            .into_iter()
            .map(|r| r.into_outcome().into_wit())
            .collect()
    }

    /// One job through a batch handler (a topic without `batch`, or a job
    /// run alone): its one answer.
    pub fn run_one<R: crate::IntoOutcome>(
        f: fn(Vec<crate::Job>) -> Vec<R>,
        job: wit::Job,
    ) -> wit::Outcome {
        let mut answers = run_batch(f, vec![job]);
        match answers.len() {
            1 => answers.remove(0),
            n => wit::Outcome::Fail(format!(
                "the batch handler answered {n} outcomes for 1 job: it must answer one per job, in order"
            )),
        }
    }
}

/// Export `f` (a `fn(Vec<Job>) -> Vec<impl IntoOutcome>`) as this
/// component's handler, taking jobs in batches: on a topic with `batch = {
/// max = 100, wait = "50ms" }` the runner calls it with up to `max` due jobs
/// at once and reads one answer per job, in order (each job acks, retries or
/// fails on its own). Elsewhere it is called with one job at a time.
///
/// A batch call cannot enqueue follow-ups, set a result, report progress or
/// use durable steps (they belong to one job): those calls are refused.
/// Use it once per crate, at the top level, instead of [`handler!`].
#[macro_export]
macro_rules! batch_handler {
    ($f:path) => {
        #[doc(hidden)]
        struct __HourglassHandler;

        impl $crate::batch_bindings::Guest for __HourglassHandler {
            fn handle(
                job: $crate::bindings::hourglass::handler::types::Job,
            ) -> $crate::bindings::hourglass::handler::types::Outcome {
                $crate::__private::run_one($f, job)
            }

            fn handle_batch(
                jobs: ::std::vec::Vec<$crate::bindings::hourglass::handler::types::Job>,
            ) -> ::std::vec::Vec<$crate::bindings::hourglass::handler::types::Outcome> {
                $crate::__private::run_batch($f, jobs)
            }
        }

        $crate::batch_bindings::__export_handler_batch!(__HourglassHandler);
    };
}

/// Export `f` (a `fn(Job) -> impl IntoOutcome`) as this component's handler.
///
/// Use it once per crate, at the top level.
#[macro_export]
macro_rules! handler {
    ($f:path) => {
        #[doc(hidden)]
        struct __HourglassHandler;

        impl $crate::bindings::Guest for __HourglassHandler {
            fn handle(
                job: $crate::bindings::hourglass::handler::types::Job,
            ) -> $crate::bindings::hourglass::handler::types::Outcome {
                $crate::__private::run($f, job)
            }
        }

        $crate::bindings::__export_handler!(__HourglassHandler);
    };
}
