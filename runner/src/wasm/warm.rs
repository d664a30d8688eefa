//! Instance reuse (`reuse = { jobs, idle }`, opt-in per topic): the idle
//! instances of topics that reuse, each waiting for its next job.
//!
//! An instance goes back here only after a job it answered (ack, retry or
//! fail); one that trapped or hit a time, CPU or memory limit is dropped.
//! It serves only its own handler version and its topic's sandbox as it was
//! built (a reload makes new sandboxes: the old instances are dropped), one
//! job at a time, at most `jobs` jobs, and is dropped once idle longer than
//! `idle`. Idle instances hold instance slots: when an instance cannot be
//! made for want of one, the idle ones are dropped and it is tried again.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::Store;

use super::bindings::Handler;
use super::host::Host;
use super::{Grants, LoadedHandler, Sandbox};

/// An instance between two jobs.
pub(super) struct Warm {
    pub store: Store<Host>,
    pub instance: Handler,
    /// Jobs it served so far.
    pub served: u32,
    topic: String,
    version: Arc<str>,
    /// The sandbox it was made in (compared by identity).
    grants: Arc<Grants>,
    idle_since: Instant,
    idle: Duration,
}

/// The idle instances of every topic that reuses.
#[derive(Default)]
pub(super) struct WarmPool(Mutex<Vec<Warm>>);

impl WarmPool {
    /// An idle instance of `handler` for `topic` in `sandbox`, if one is
    /// waiting; instances of the topic made in another sandbox or version,
    /// and expired ones, are dropped on the way.
    pub fn take(&self, topic: &str, handler: &LoadedHandler, sandbox: &Sandbox) -> Option<Warm> {
        let now = Instant::now();
        let (found, stale) = {
            let mut idle = self.0.lock().expect("warm pool lock");
            let stale: Vec<Warm> = idle
                .extract_if(.., |w| {
                    now.duration_since(w.idle_since) > w.idle
                        || (w.topic == topic
                            && (w.version != *handler.version()
                                || !Arc::ptr_eq(&w.grants, &sandbox.grants)))
                })
                .collect();
            let found = idle
                .iter()
                .rposition(|w| w.topic == topic)
                .map(|i| idle.swap_remove(i));
            (found, stale)
        };
        // dropping a store resets its slot: not under the lock
        drop(stale);
        found
    }

    /// Keep `store`'s instance of `handler` for the next job of `topic`,
    /// unless it has served its `jobs`.
    pub fn put(
        &self,
        topic: &str,
        handler: &LoadedHandler,
        sandbox: &Sandbox,
        store: Store<Host>,
        instance: Handler,
        served: u32,
    ) {
        let Some(reuse) = sandbox.reuse else { return };
        if served >= reuse.jobs {
            return;
        }
        let warm = Warm {
            store,
            instance,
            served,
            topic: topic.to_owned(),
            version: handler.version().clone(),
            grants: sandbox.grants.clone(),
            idle_since: Instant::now(),
            idle: reuse.idle,
        };
        self.0.lock().expect("warm pool lock").push(warm);
    }

    /// Drop the instances idle past their `idle` (all of them with
    /// `everything`): how many.
    pub fn drop_idle(&self, everything: bool) -> usize {
        let now = Instant::now();
        let stale: Vec<Warm> = self
            .0
            .lock()
            .expect("warm pool lock")
            .extract_if(.., |w| {
                everything || now.duration_since(w.idle_since) > w.idle
            })
            .collect();
        stale.len()
    }
}
