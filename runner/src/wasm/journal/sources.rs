//! The clocks and random sources a journaled attempt's WASI context gets
//! in place of the host's: each read goes through its [`Effects`].

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

use super::effects::{Effects, Kind};
use crate::redis::effects::Entry;
use crate::wasm::JobContext;

/// The `insecure-seed` of a journaled job's attempts: the same for each
/// (derived from its topic and id), so nothing needs recording.
pub(in crate::wasm) fn seed(ctx: &JobContext) -> u128 {
    let hash = Sha256::digest(format!("{}/{}", ctx.topic, ctx.id));
    u128::from_le_bytes(hash[..16].try_into().expect("16 bytes"))
}

/// The wall clock of a journaled attempt.
pub(in crate::wasm) struct WallClock(pub Arc<Effects>);

impl HostWallClock for WallClock {
    fn resolution(&self) -> Duration {
        wasmtime_wasi::clocks::WallClock.resolution()
    }

    fn now(&self) -> Duration {
        let live = wasmtime_wasi::clocks::WallClock.now().as_nanos() as u64;
        let attempt = self.0.ctx.attempt;
        Duration::from_nanos(self.0.state().clock(Kind::Wall, live, attempt))
    }
}

/// The monotonic clock of a journaled attempt: replayed reads, then live
/// ones that never fall below them.
pub(in crate::wasm) struct MonotonicClock(
    pub Arc<Effects>,
    pub wasmtime_wasi::clocks::MonotonicClock,
);

impl HostMonotonicClock for MonotonicClock {
    fn resolution(&self) -> u64 {
        self.1.resolution()
    }

    fn now(&self) -> u64 {
        let live = self.1.now();
        let attempt = self.0.ctx.attempt;
        let mut s = self.0.state();
        let shifted = live.saturating_add(s.mono_offset).max(s.mono_last);
        let v = s.clock(Kind::Monotonic, shifted, attempt);
        if v > shifted {
            s.mono_offset += v - shifted;
        }
        s.mono_last = s.mono_last.max(v);
        s.mono_last
    }
}

/// A random source of a journaled attempt: replayed bytes, then live ones.
pub(in crate::wasm) struct Random(pub Arc<Effects>, pub Kind);

impl rand_core10::TryRng for Random {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        let mut b = [0; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let mut b = [0; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        self.0.random(self.1, dst, |live| rand::fill(live));
        Ok(())
    }
}

impl Effects {
    /// Fill `dst` from the journal's bytes of `kind`, then from `live`
    /// (recorded).
    fn random(&self, kind: Kind, dst: &mut [u8], live: impl FnOnce(&mut [u8])) {
        let mut s = self.state();
        let (scope, at) = s.next(kind, dst.len() as u64);
        let n = match s.replay.random.get(&(scope.clone(), kind)) {
            Some(r) => {
                let recorded = r.get(at as usize..).unwrap_or(&[]);
                let n = recorded.len().min(dst.len());
                dst[..n].copy_from_slice(&recorded[..n]);
                n
            }
            None => 0,
        };
        if n > 0 {
            s.counts.replayed[2] += 1;
        }
        if n == dst.len() {
            return;
        }
        live(&mut dst[n..]);
        if s.admit(dst.len() - n, self.ctx.attempt) {
            s.counts.recorded[2] += 1;
            s.pending.push(Entry::Random {
                scope,
                kind,
                offset: at + n as u64,
                bytes: dst[n..].to_vec(),
            });
        }
    }
}
