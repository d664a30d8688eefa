//! Panics on every attempt: a trap, counted as a failed attempt.

use hourglass_sdk::Job;

fn boom(job: Job) {
    panic!("handler panicked on job {} attempt {}", job.id(), job.attempt());
}

hourglass_sdk::handler!(boom);
