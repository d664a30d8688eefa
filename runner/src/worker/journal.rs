//! Durable handlers' journals written to Redis: the [`JournalStore`] the
//! runtime's `durable` import writes steps, patch marks and signals through.

use crate::clock::now_ms;
use crate::redis::{Queue, Signalled, Step};
use crate::wasm::{JournalStore, StoreFuture};

/// Steps and signals through the runner's queue.
pub(super) struct RedisJournal(pub Queue);

impl JournalStore for RedisJournal {
    fn record(
        &self,
        topic: &str,
        id: &str,
        attempt: u32,
        version: &str,
        name: &str,
        step: Step,
    ) -> StoreFuture<bool> {
        let (q, keys) = (self.0.clone(), self.0.keys(topic));
        let (id, version, name) = (id.to_owned(), version.to_owned(), name.to_owned());
        Box::pin(async move {
            q.pipeline()
                .record_step(&keys, &id, attempt, &version, &name, &step)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn signal(
        &self,
        topic: &str,
        id: &str,
        name: &str,
        payload: Vec<u8>,
    ) -> StoreFuture<Signalled> {
        let (q, keys) = (self.0.clone(), self.0.keys(topic));
        let (id, name) = (id.to_owned(), name.to_owned());
        Box::pin(async move {
            q.signal(&keys, &id, &name, &payload, now_ms())
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn record_effects(
        &self,
        topic: &str,
        id: &str,
        attempt: u32,
        version: &str,
        batch: u32,
        encoded: Vec<u8>,
    ) -> StoreFuture<bool> {
        let (q, keys) = (self.0.clone(), self.0.keys(topic));
        let (id, version) = (id.to_owned(), version.to_owned());
        Box::pin(async move {
            q.pipeline()
                .record_effects(&keys, &id, attempt, &version, batch, &encoded)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn record_patch(
        &self,
        topic: &str,
        id: &str,
        attempt: u32,
        version: &str,
        name: &str,
        new_path: bool,
    ) -> StoreFuture<bool> {
        let (q, keys) = (self.0.clone(), self.0.keys(topic));
        let (id, version, name) = (id.to_owned(), version.to_owned(), name.to_owned());
        Box::pin(async move {
            q.pipeline()
                .record_patch(&keys, &id, attempt, &version, &name, new_path)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
