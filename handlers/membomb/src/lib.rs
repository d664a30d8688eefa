//! Allocates without bound: stopped by the topic's memory limit. With a
//! JSON payload `{"grow_mib": N}` it instead grows its linear memory by
//! exactly N MiB (`memory.grow`, no allocator in between) and acks: what
//! the metering tests measure a peak against.

use hourglass_sdk::{Job, info};

#[derive(serde::Deserialize)]
struct Plan {
    grow_mib: usize,
}

fn membomb(job: Job) -> hourglass_sdk::Result {
    if let Ok(plan) = job.json::<Plan>() {
        // 16 pages of 64 KiB per MiB
        let grown = core::arch::wasm32::memory_grow::<0>(plan.grow_mib * 16);
        if grown == usize::MAX {
            return Err(hourglass_sdk::Error::fail(format!(
                "memory.grow by {} MiB refused",
                plan.grow_mib
            )));
        }
        info!("membomb {} grew by {} MiB", job.id(), plan.grow_mib);
        return Ok(());
    }
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![1u8; 1 << 20]);
        if hoard.len().is_multiple_of(64) {
            info!("membomb {} holds {} MiB", job.id(), hoard.len());
        }
    }
}

hourglass_sdk::handler!(membomb);
