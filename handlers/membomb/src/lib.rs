//! Allocates without bound: stopped by the topic's memory limit.

use hourglass_sdk::{Job, info};

fn membomb(job: Job) {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![1u8; 1 << 20]);
        if hoard.len().is_multiple_of(64) {
            info!("membomb {} holds {} MiB", job.id(), hoard.len());
        }
    }
}

hourglass_sdk::handler!(membomb);
