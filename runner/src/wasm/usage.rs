//! What one attempt cost: wall time, the CPU its polls burned, its peak
//! linear memory, how long its instance took to start, and its outbound
//! traffic.
//!
//! CPU is measured per poll of the attempt's future, cheaply: a poll that
//! follows a quick one (the common case: a handler that answers in
//! microseconds, or resumes after a host call) is timed by the monotonic
//! clock (a vDSO read, tens of nanoseconds), because a thread is rarely
//! preempted inside so short a slice. Once the guest has run a whole epoch
//! tick (5 ms) it is "hot": from then on each poll is measured by the
//! thread's own CPU clock (a system call, about 0.7 µs, paid once per tick
//! of guest work), so time the thread spent preempted on a busy machine is
//! not counted as the handler's. The epoch callback reads the same figure to
//! enforce a topic's `cpu` limit.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pub use crate::redis::Usage;

/// The thread's CPU clock, in nanoseconds (0 if it cannot be read).
fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// CPU used by one attempt's polls, shared by the future that polls it
/// ([`Metered`]) and the store's epoch callback ([`CpuMeter::tick`]), which
/// run on the same thread, one after the other.
#[derive(Debug)]
pub(super) struct CpuMeter {
    base: Instant,
    /// Nanoseconds of polls that ended.
    used: AtomicU64,
    /// When the current poll started (ns since `base`).
    poll_start: AtomicU64,
    /// The thread's CPU clock at the start of the current poll, once hot (0: cold).
    poll_cpu: AtomicU64,
    /// Whether the guest has run a whole tick: measure polls by the CPU clock.
    hot: AtomicBool,
}

impl CpuMeter {
    pub(super) fn new() -> Arc<CpuMeter> {
        Arc::new(CpuMeter {
            base: Instant::now(),
            used: AtomicU64::new(0),
            poll_start: AtomicU64::new(0),
            poll_cpu: AtomicU64::new(0),
            hot: AtomicBool::new(false),
        })
    }

    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    fn poll_started(&self) {
        self.poll_start.store(self.now(), Ordering::Relaxed);
        let cpu = if self.hot.load(Ordering::Relaxed) {
            thread_cpu_ns().max(1)
        } else {
            0
        };
        self.poll_cpu.store(cpu, Ordering::Relaxed);
    }

    /// The current poll's use so far.
    fn in_poll(&self) -> u64 {
        match self.poll_cpu.load(Ordering::Relaxed) {
            0 => self
                .now()
                .saturating_sub(self.poll_start.load(Ordering::Relaxed)),
            cpu => thread_cpu_ns().saturating_sub(cpu),
        }
    }

    fn poll_ended(&self) {
        self.used.fetch_add(self.in_poll(), Ordering::Relaxed);
    }

    /// At an epoch tick inside a poll (the guest ran a whole tick): the CPU
    /// used so far, and from the next poll on, measure by the CPU clock.
    pub(super) fn tick(&self) -> Duration {
        let so_far = self.used.load(Ordering::Relaxed) + self.in_poll();
        self.hot.store(true, Ordering::Relaxed);
        Duration::from_nanos(so_far)
    }

    /// CPU used by polls that ended.
    pub(super) fn used(&self) -> Duration {
        Duration::from_nanos(self.used.load(Ordering::Relaxed))
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
        self.meter.poll_ended();
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

    #[tokio::test]
    async fn a_poll_that_spins_is_charged_and_one_that_waits_is_not() {
        let meter = CpuMeter::new();
        let spin = std::pin::pin!(async {
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(30) {
                std::hint::spin_loop();
            }
            tokio::time::sleep(Duration::from_millis(60)).await;
        });
        Metered::new(spin, meter.clone()).await;
        let used = meter.used();
        assert!(
            used >= Duration::from_millis(29) && used < Duration::from_millis(50),
            "{used:?}"
        );
    }

    #[test]
    fn once_hot_polls_are_measured_by_the_thread_cpu_clock() {
        let meter = CpuMeter::new();
        meter.poll_started();
        meter.tick();
        meter.poll_ended();
        meter.poll_started();
        assert_ne!(meter.poll_cpu.load(Ordering::Relaxed), 0);
        // a thread asleep in a hot poll uses (almost) no CPU
        std::thread::sleep(Duration::from_millis(30));
        meter.poll_ended();
        assert!(
            meter.used() < Duration::from_millis(10),
            "{:?}",
            meter.used()
        );
    }
}
