//! Asks for a retry on the first `fail_first` attempts (from the JSON payload),
//! then acknowledges: shows retries with backoff end to end.

use hourglass_sdk::{Error, Job, info};

#[derive(serde::Deserialize)]
struct Plan {
    fail_first: u32,
}

fn flaky(job: Job) -> hourglass_sdk::Result {
    let plan: Plan = job.json()?;
    if job.attempt() <= plan.fail_first {
        return Err(Error::retry(format!("flaking on attempt {}", job.attempt())));
    }
    info!("flaky {} succeeded on attempt {}", job.id(), job.attempt());
    Ok(())
}

hourglass_sdk::handler!(flaky);
