//! Tests that load the machine on purpose: `scripts/test` runs them after the
//! others, one at a time.

use super::*;
use crate::util::Spinner;

/// This thread's CPU clock (µs).
fn thread_cpu_us() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1_000
}

/// The median CPU (µs) an attempt of the probe doing each of `rounds` of
/// `work` costs its thread, run through the runtime (one of each in turn,
/// 31 times, so that each sees what the others do of the machine): a price
/// per job measured without the meter.
fn prices(runtime: &hourglass::wasm::Runtime, rounds: &[u64]) -> Vec<u64> {
    let probe = runtime
        .load(std::path::Path::new(test_support::components::PROBE))
        .unwrap();
    let sandbox = crate::util::probe_sandbox();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let payloads: Vec<String> = rounds
        .iter()
        .map(|r| format!(r#"{{"work":{r}}}"#))
        .collect();
    let mut costs = vec![Vec::new(); rounds.len()];
    for _ in 0..31 {
        for (payload, costs) in payloads.iter().zip(&mut costs) {
            costs.push(rt.block_on(async {
                let before = thread_cpu_us();
                runtime
                    .run(&probe, crate::util::probe_input(payload), &sandbox)
                    .await;
                thread_cpu_us() - before
            }));
        }
    }
    costs
        .into_iter()
        .map(|mut c| {
            c.sort();
            c[c.len() / 2]
        })
        .collect()
}

/// `share = "cpu"` on a machine whose two cores are busy with other work
/// (the runner's interrupted every 0.7 ms, the other spinning):
/// a tenant whose jobs cost about 20 ms of CPU and one whose jobs cost
/// about 1 ms get the same CPU within 20%, by a measure that owes nothing
/// to the host's meter: each key's jobs done times what one such job
/// costs its thread (priced by the thread's CPU clock beforehand, under the
/// same load, a light and a heavy one in turn: a job interrupted every
/// 0.7 ms beside a busy core costs more CPU than on a quiet machine, and the
/// meter rightly charges that; priced on a quiet machine one run in several
/// read 1.28, under load but one kind after the other 0.86-1.34 over seven
/// runs, in turn 0.86-1.08 over nine). A meter that charged short attempts
/// their wall time would give the light key less (1.4-1.75x less, as a
/// black-box test found).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_cpu_holds_by_an_independent_measure_on_a_loaded_machine() {
    let project = Project::new(
        "concurrency = 2",
        "[defaults]\nmax_attempts = 1\n\n[[topic]]\nname = \"render\"\nhandler = \"probe.wasm\"\n\
         fairness = { by = \"key\", share = \"cpu\" }\n",
    );
    // started before the pinning below: Redis is not pinned
    let queue = project.queue().await;
    // the runner's threads share CPU 0 with a thread that takes it for
    // 0.5 ms every 0.7 ms (a short attempt is interrupted several times,
    // a long one hundreds of times), and a spinner keeps CPU 1 busy; the
    // jobs are priced under the same load
    let pid = std::process::id().to_string();
    crate::util::taskset(&["-a", "-p", "-c", "0", &pid]);
    let _load = (
        Spinner::bursts(0, Duration::from_micros(500), Duration::from_micros(200)),
        Spinner::on(1),
    );
    // rounds of the probe's fixed arithmetic for about 1 and 20 ms
    let runtime =
        hourglass::wasm::Runtime::new(1, Some(crate::util::shared_compile_cache())).unwrap();
    // priced on a thread of their own, off this test's runtime
    let (light_rounds, light, heavy) = std::thread::scope(|s| {
        s.spawn(|| {
            let calibrated = prices(&runtime, &[0, 1_000_000]);
            let million = calibrated[1].saturating_sub(calibrated[0]).max(1);
            let rounds = 1_000_000 * 1_000 / million;
            let priced = prices(&runtime, &[rounds, rounds * 20]);
            (rounds, priced[0], priced[1])
        })
        .join()
        .unwrap()
    });
    println!(
        "a light job costs {light} us of CPU, a heavy one {heavy} us ({light_rounds} and {} rounds)",
        light_rounds * 20
    );
    let mut runner = Running::start(project.config()).await;
    let now = now_ms();
    let work = |rounds: u64| format!(r#"{{"work":{rounds}}}"#);
    put(
        &queue,
        "render",
        &jobs_of("heavy", 600, &work(light_rounds * 20), now),
    )
    .await;
    put(
        &queue,
        "render",
        &jobs_of("light", 12_000, &work(light_rounds), now),
    )
    .await;
    // warm up (costs learned), then a window of about 4 s of CPU
    let _ = runner
        .until(Duration::from_secs(120), |seen| {
            seen.iter()
                .filter(|e| matches!(e.kind, EventKind::Ran { .. }))
                .count()
                >= 200
        })
        .await;
    let window = runner
        .until(Duration::from_secs(300), |seen| {
            let ran = seen.iter().filter_map(|e| match &e.kind {
                EventKind::Ran { usage } => Some(usage.cpu_us),
                _ => None,
            });
            ran.sum::<u64>() >= 4_000_000
        })
        .await;
    runner.stop().await;
    crate::util::taskset(&["-a", "-p", "-c", "0-1023", &pid]);
    let (mut jobs, mut metered): (HashMap<String, u64>, HashMap<String, u64>) = Default::default();
    for e in &window {
        if let EventKind::Ran { usage } = &e.kind {
            *jobs.entry(key_of(&e.id).to_owned()).or_default() += 1;
            *metered.entry(key_of(&e.id).to_owned()).or_default() += usage.cpu_us;
        }
    }
    let spent = |key: &str, price: u64| jobs.get(key).copied().unwrap_or(0) * price;
    let ratio = spent("heavy", heavy) as f64 / spent("light", light).max(1) as f64;
    let by_meter = metered.get("heavy").copied().unwrap_or(0) as f64
        / metered.get("light").copied().unwrap_or(1).max(1) as f64;
    let per_job = |key: &str| {
        metered.get(key).copied().unwrap_or(0) / jobs.get(key).copied().unwrap_or(1).max(1)
    };
    println!(
        "jobs {jobs:?}; metered per job: light {} us, heavy {} us; heavy/light CPU by the independent measure {ratio:.2}, by the meter {by_meter:.2}",
        per_job("light"),
        per_job("heavy")
    );
    assert!(
        (0.8..=1.2).contains(&ratio),
        "the heavy key got {ratio:.2}x the light key's CPU (by the meter: {by_meter:.2}x): jobs {jobs:?}"
    );
}
