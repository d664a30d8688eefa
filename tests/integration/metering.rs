//! What each attempt cost, measured by the host: CPU (thread CPU time of the
//! polls that ran the instance, not wall time), wall time, peak linear
//! memory, instance start and outbound traffic; in the `Ran` event, the
//! metrics, `inspect` and dead letters; and a topic's `cpu` limit, which
//! stops a tight loop long before its wall-clock `timeout`.

use std::time::Duration;

use hourglass::events::{Event, EventKind};
use hourglass::redis::Usage;

const WAIT: Duration = Duration::from_secs(60);

/// The usage the `Ran` event of job `id` of `topic` reported.
fn usage(events: &[Event], topic: &str, id: &str) -> Usage {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Ran { usage } if e.topic == topic && e.id == id => Some(*usage),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Ran event for {id}: {events:?}"))
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// The calling thread's CPU clock.
fn thread_cpu() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}

/// Pin thread `tid` (a thread id, or a process id for all its threads' next
/// runs) to CPU 0.
fn pin_to_cpu0(tid: i32) {
    crate::util::taskset(&["-p", "-c", "0", &tid.to_string()]);
}

/// A thread spinning on CPU 0 until dropped: a thread pinned there beside it
/// gets about half of that CPU, so its wall time is about twice its CPU time
/// however quiet the machine is.
struct Rival(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Rival {
    fn start() -> Rival {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, (tx, rx)) = (stop.clone(), std::sync::mpsc::channel());
        std::thread::spawn(move || {
            pin_to_cpu0(nix::unistd::gettid().as_raw());
            tx.send(()).unwrap();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        rx.recv().expect("the rival is pinned");
        Rival(stop)
    }
}

impl Drop for Rival {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The buckets of `metric` for `topic`: (upper bound, cumulative count).
fn buckets(metrics: &str, metric: &str, topic: &str) -> Vec<(f64, u64)> {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with(&format!("{metric}_bucket{{"))
                && l.contains(&format!("topic=\"{topic}\""))
        })
        .map(|l| {
            let le = l.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
            let count = l.rsplit(' ').next().unwrap();
            (le.parse().unwrap(), count.parse().unwrap())
        })
        .collect()
}

fn at(buckets: &[(f64, u64)], le: f64) -> u64 {
    buckets
        .iter()
        .find(|(b, _)| *b == le)
        .unwrap_or_else(|| panic!("no bucket {le}: {buckets:?}"))
        .1
}

/// Tests that load the machine on purpose: `scripts/test` runs them after the
/// others, one at a time.
mod alone {
    use hourglass::wasm::Runtime;

    use super::thread_cpu;
    use crate::util::Spinner;

    /// The meter against the truth, the attempt's thread's own CPU clock
    /// read around `Runtime::run`, with both cores busy: the attempt's
    /// thread shares CPU 0 with a spinner (its wall time about twice its
    /// CPU time) and another keeps CPU 1 busy. Attempts spin 0.1, 1, 20 and
    /// 200 ms of wall time; each must read within 10% (or 50 µs) of what
    /// its thread spent. A meter that reads the wall clock, before its
    /// first epoch tick or at all, reads up to twice that.
    #[test]
    fn the_cpu_meter_is_the_threads_own_cpu_for_short_attempts_on_a_busy_machine() {
        let runtime = Runtime::new(2, Some(crate::util::shared_compile_cache())).unwrap();
        let probe = runtime
            .load(std::path::Path::new(test_support::components::PROBE))
            .unwrap();
        let sandbox = crate::util::probe_sandbox();
        let input = |us: u64| crate::util::probe_input(&format!(r#"{{"spin_us":{us}}}"#));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // warm: the probe's first instance, off the measure
        rt.block_on(runtime.run(&probe, input(10), &sandbox));
        let this = nix::unistd::gettid().as_raw().to_string();
        crate::util::taskset(&["-p", "-c", "0", &this]);
        let (_rival, _other) = (Spinner::on(0), Spinner::on(1));
        let mut report = Vec::new();
        let mut off = Vec::new();
        for (us, n) in [(100u64, 40), (1_000, 40), (20_000, 10), (200_000, 4)] {
            let mut errors = Vec::new();
            let mut walls = Vec::new();
            for _ in 0..n {
                // the truth: this thread's CPU from the call to its answer
                let (ran, spent) = rt.block_on(async {
                    let before = thread_cpu();
                    let ran = runtime.run(&probe, input(us), &sandbox).await;
                    (ran, thread_cpu() - before)
                });
                assert!(
                    matches!(ran.finish, hourglass::wasm::Finish::Ack(_)),
                    "{:?}",
                    ran.finish
                );
                let truth = spent.as_micros() as i64;
                errors.push((ran.usage.cpu_us as i64 - truth, truth));
                walls.push(ran.usage.wall_us as i64 - truth);
            }
            errors.sort();
            walls.sort();
            // the median and the 90th percentile of the error by size: the
            // truth also holds the executor's own work between an attempt's
            // polls (at each epoch tick), which is not the attempt's
            let mut by_size = errors.clone();
            by_size.sort_by_key(|(e, _)| e.abs());
            for (what, (error, truth)) in [("median", by_size[n / 2]), ("p90", by_size[n * 9 / 10])]
            {
                if error.abs() > (truth / 10).max(50) {
                    off.push(format!(
                        "{us} us spins: the {what} error is {error} us, for {truth} us of the thread's CPU"
                    ));
                }
            }
            report.push(format!(
                "{us} us spins: meter - truth median {} us (min {}, max {}), truth median {} us; wall - truth median {} us",
                by_size[n / 2].0,
                errors[0].0,
                errors[n - 1].0,
                { let mut t: Vec<i64> = errors.iter().map(|e| e.1).collect(); t.sort(); t[n / 2] },
                walls[n / 2]
            ));
        }
        crate::util::taskset(&["-p", "-c", "0-1023", &this]);
        eprintln!("{}", report.join("\n"));
        assert!(
            off.is_empty(),
            "the meter is off the thread's CPU by more than 10% (or 50 us):\n{}\n{}",
            off.join("\n"),
            report.join("\n")
        );
    }
}

mod costs;
mod cpu;
