//! Where an attempt's journals are written: [`JournalStore`], Redis
//! through the worker's queue in a runner (`worker/journal.rs`), and
//! [`NoStore`] in a runtime that runs no jobs from Redis.

use std::future::Future;
use std::pin::Pin;

use crate::redis::{Signalled, Step};

/// A boxed future of the journal store.
pub type StoreFuture<T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send>>;

/// Where journals are written: Redis, through the worker's queue.
pub trait JournalStore: Send + Sync {
    /// Record `step` as step `name` of attempt `attempt` of job `id` of
    /// `topic`, run on `version`; `false` when the attempt no longer owns
    /// the job.
    fn record(
        &self,
        topic: &str,
        id: &str,
        attempt: u32,
        version: &str,
        name: &str,
        step: Step,
    ) -> StoreFuture<bool>;

    /// Send signal `name` with `payload` to job `id` of `topic`.
    fn signal(&self, topic: &str, id: &str, name: &str, payload: Vec<u8>)
    -> StoreFuture<Signalled>;

    /// Record batch `batch` of job `id`'s effects journal (`encoded`),
    /// as [`JournalStore::record`] records a step.
    #[allow(clippy::too_many_arguments)]
    fn record_effects(
        &self,
        topic: &str,
        id: &str,
        attempt: u32,
        version: &str,
        batch: u32,
        encoded: Vec<u8>,
    ) -> StoreFuture<bool>;

    /// Record how `patched(name)` answered job `id` (`new_path`), as
    /// [`JournalStore::record`] records a step.
    fn record_patch(
        &self,
        topic: &str,
        id: &str,
        attempt: u32,
        version: &str,
        name: &str,
        new_path: bool,
    ) -> StoreFuture<bool>;
}

/// The store of a runtime that runs no jobs from Redis (`hourglass check`,
/// `build`): every write is refused, saying so.
pub struct NoStore;

impl JournalStore for NoStore {
    fn record(&self, _: &str, _: &str, _: u32, _: &str, _: &str, _: Step) -> StoreFuture<bool> {
        Box::pin(async { Err("no journal here: this runtime is not connected to Redis".into()) })
    }

    fn signal(&self, _: &str, _: &str, _: &str, _: Vec<u8>) -> StoreFuture<Signalled> {
        Box::pin(async { Err("no signals here: this runtime is not connected to Redis".into()) })
    }

    fn record_effects(
        &self,
        _: &str,
        _: &str,
        _: u32,
        _: &str,
        _: u32,
        _: Vec<u8>,
    ) -> StoreFuture<bool> {
        Box::pin(async { Err("no journal here: this runtime is not connected to Redis".into()) })
    }

    fn record_patch(
        &self,
        _: &str,
        _: &str,
        _: u32,
        _: &str,
        _: &str,
        _: bool,
    ) -> StoreFuture<bool> {
        Box::pin(async { Err("no journal here: this runtime is not connected to Redis".into()) })
    }
}
