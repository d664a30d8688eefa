//! Logs the job and acknowledges it.

use hourglass_sdk::{Job, info};

fn echo(job: Job) {
    info!(
        "echo {} attempt {}/{}: {}",
        job.id(),
        job.attempt(),
        job.max_attempts(),
        String::from_utf8_lossy(job.payload())
    );
}

hourglass_sdk::handler!(echo);
