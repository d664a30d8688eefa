//! Spins for `spin_ms` milliseconds (from the JSON payload, default forever):
//! a handler that overruns its time limit and must be stopped by the runtime.

use hourglass_sdk::{Job, info};
use std::time::{Duration, Instant};

#[derive(serde::Deserialize)]
struct Plan {
    spin_ms: Option<u64>,
}

fn slow(job: Job) -> hourglass_sdk::Result {
    let plan: Plan = job.json()?;
    let limit = plan.spin_ms.map(Duration::from_millis).unwrap_or(Duration::MAX);
    let start = Instant::now();
    let mut spins: u64 = 0;
    while start.elapsed() < limit {
        spins = std::hint::black_box(spins.wrapping_add(1));
    }
    info!("slow {} finished after {} spins", job.id(), spins);
    Ok(())
}

hourglass_sdk::handler!(slow);
