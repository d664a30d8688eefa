//! What an attempt's host and its outbound requests share about the job's
//! journal, below both: where journals are written ([`JournalStore`],
//! `store.rs`) and a journaled topic's effects journal (`effects.rs`: the
//! state its outbound requests, clocks and random sources answer from and
//! record to, `follow_ups.rs` the ids its follow-ups take; `sources.rs`: the clocks and random sources installed in the
//! attempt's WASI context; `place.rs`: how far an attempt has got through
//! its journal). The `durable` import itself is the host's
//! (`host/durable.rs`), the journaled requests the outbound hook's
//! (`outbound/journaled.rs`).

mod effects;
mod follow_ups;
mod place;
mod sources;
mod store;

pub use effects::EffectCounts;
pub(in crate::wasm) use effects::{Effects, Kind, Ticket, identify};
pub(in crate::wasm) use place::{Place, Reached, wait_step};
pub(in crate::wasm) use sources::{MonotonicClock, Random, WallClock, seed};
pub use store::{JournalStore, NoStore, StoreFuture};
