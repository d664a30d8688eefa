//! What one attempt cost: wall time, the CPU its thread spent on it, its
//! peak linear memory, how long its instance took to start, and its
//! outbound traffic.
//!
//! CPU is the attempt's thread's own CPU clock (`CLOCK_THREAD_CPUTIME_ID`),
//! read when the attempt starts (before its store is made), when each poll
//! of its future that did not finish it ends and the next one starts, and
//! once the attempt is done with (its store dropped, which resets its
//! memory): time the thread spent preempted, or running other tasks between
//! polls, is never charged, from the attempt's first instruction on. Each
//! read is a system call (about 0.3 µs on the machines measured), so an
//! attempt that answers within one poll (a no-op handler) pays two; the
//! epoch callback reads the same figure at every tick (5 ms of guest work)
//! to enforce a topic's `cpu` limit.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

pub use crate::redis::Usage;

/// The calling thread's CPU clock, in nanoseconds (at least 1; 1 if it
/// cannot be read).
pub(super) fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
        .max(1)
}

/// CPU used by one attempt, shared by the future that polls it
/// ([`Metered`]) and the store's epoch callback ([`CpuMeter::tick`]), which
/// run on the same thread, one after the other.
#[derive(Debug)]
pub(super) struct CpuMeter {
    /// Nanoseconds of polls (and set-up) that ended.
    used: AtomicU64,
    /// The thread's CPU clock when the current stretch of the attempt's
    /// work started (0: none is under way, the attempt is between polls).
    open: AtomicU64,
}

impl CpuMeter {
    pub(super) fn new() -> Arc<CpuMeter> {
        Arc::new(CpuMeter {
            used: AtomicU64::new(0),
            open: AtomicU64::new(0),
        })
    }

    /// The attempt's work started when the thread's CPU clock read
    /// `cpu_ns` (before its store was made): its set-up and first poll are
    /// one stretch, charged from there.
    pub(super) fn started_at(&self, cpu_ns: u64) {
        self.open.store(cpu_ns, Ordering::Relaxed);
    }

    fn poll_started(&self) {
        // the first poll continues the set-up's stretch
        if self.open.load(Ordering::Relaxed) == 0 {
            self.open.store(thread_cpu_ns(), Ordering::Relaxed);
        }
    }

    /// The current stretch's use so far.
    fn in_poll(&self) -> u64 {
        match self.open.load(Ordering::Relaxed) {
            0 => 0,
            since => thread_cpu_ns().saturating_sub(since),
        }
    }

    fn poll_ended(&self) {
        self.used.fetch_add(self.in_poll(), Ordering::Relaxed);
        self.open.store(0, Ordering::Relaxed);
    }

    /// At an epoch tick inside a poll: the CPU used so far.
    pub(super) fn tick(&self) -> Duration {
        Duration::from_nanos(self.used.load(Ordering::Relaxed) + self.in_poll())
    }

    /// CPU used by polls that ended.
    pub(super) fn used(&self) -> Duration {
        Duration::from_nanos(self.used.load(Ordering::Relaxed))
    }

    /// The attempt waits (off its thread's CPU): end the current stretch.
    pub(super) fn pause(&self) {
        self.poll_ended();
    }

    /// The attempt's work goes on, on this thread.
    pub(super) fn resume(&self) {
        self.poll_started();
    }

    /// End the attempt's last stretch (what followed its last poll on the
    /// same thread: reading its answer, dropping its store, which resets
    /// its memory) and answer everything it used.
    pub(super) fn close(&self) -> Duration {
        self.poll_ended();
        self.used()
    }
}

/// A future whose polls are charged to a [`CpuMeter`]. It takes an `Unpin`
/// future (`std::pin::pin!` one first): no allocation per attempt.
pub(super) struct Metered<F> {
    inner: F,
    meter: Arc<CpuMeter>,
}

impl<F: Future + Unpin> Metered<F> {
    pub(super) fn new(inner: F, meter: Arc<CpuMeter>) -> Metered<F> {
        Metered { inner, meter }
    }
}

impl<F: Future + Unpin> Future for Metered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.meter.poll_started();
        let polled = Pin::new(&mut self.inner).poll(cx);
        // the last poll's stretch goes on until the caller closes it
        // ([`CpuMeter::close`]), having done with the attempt on this thread
        if polled.is_pending() {
            self.meter.poll_ended();
        }
        polled
    }
}

/// An attempt's outbound traffic, counted as it flows (bodies stream while
/// the guest reads and writes them).
#[derive(Debug, Default)]
pub struct Traffic {
    pub(super) requests: AtomicU64,
    pub(super) bytes_out: AtomicU64,
    pub(super) bytes_in: AtomicU64,
}

impl Traffic {
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spin until this thread has used `ms` of CPU.
    fn burn(ms: u64) {
        let from = thread_cpu_ns();
        while thread_cpu_ns() - from < ms * 1_000_000 {
            std::hint::spin_loop();
        }
    }

    #[tokio::test]
    async fn a_poll_that_spins_is_charged_and_one_that_waits_is_not() {
        let meter = CpuMeter::new();
        let spin = std::pin::pin!(async {
            burn(30);
            tokio::time::sleep(Duration::from_millis(60)).await;
            burn(10);
        });
        Metered::new(spin, meter.clone()).await;
        let used = meter.close();
        assert!(
            used >= Duration::from_millis(40) && used < Duration::from_millis(45),
            "{used:?}"
        );
    }

    /// The thread's clock from the first poll on: a thread that does not
    /// run (asleep here, preempted on a busy machine) is not charged, even
    /// in an attempt's first millisecond.
    #[test]
    fn a_first_poll_that_does_not_run_is_not_charged_its_wall_time() {
        let meter = CpuMeter::new();
        meter.poll_started();
        std::thread::sleep(Duration::from_millis(30));
        meter.poll_ended();
        assert!(
            meter.used() < Duration::from_millis(3),
            "{:?}",
            meter.used()
        );
    }

    /// The set-up before the first poll and the first poll are one stretch:
    /// charged from when the attempt started, once.
    #[test]
    fn the_set_up_is_charged_with_the_first_poll() {
        let meter = CpuMeter::new();
        meter.started_at(thread_cpu_ns());
        burn(5);
        meter.poll_started();
        burn(5);
        assert!(
            meter.tick() >= Duration::from_millis(10),
            "{:?}",
            meter.tick()
        );
        meter.poll_ended();
        let used = meter.used();
        assert!(
            used >= Duration::from_millis(10) && used < Duration::from_millis(13),
            "{used:?}"
        );
        // between polls nothing is charged
        burn(5);
        assert_eq!(meter.tick(), used);
    }
}
