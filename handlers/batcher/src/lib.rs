//! Takes its jobs in batches (`hourglass_sdk::batch_handler!`): each job's
//! JSON payload says how it ends, `{"fail_first": 2}` asks for a retry on
//! its first two attempts, `{"fail": "why"}` fails it for good, and
//! `{"trap": true}` panics, failing every job of its call, and `{"key": K}`
//! names the job's tenant key: a call whose jobs name two keys fails them
//! all ("a call mixed keys"). The tests count the calls from `/metrics`
//! (`hourglass_batch_calls_total`).

use hourglass_sdk::{Error, Job, info};

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Plan {
    fail_first: u32,
    fail: Option<String>,
    trap: bool,
    key: Option<String>,
}

fn batcher(jobs: Vec<Job>) -> Vec<hourglass_sdk::Result> {
    info!("a batch of {} job(s)", jobs.len());
    let plans: Vec<Plan> = jobs.iter().map(|j| j.json().unwrap_or_default()).collect();
    if plans.iter().any(|p| p.trap) {
        panic!("a job of this batch asked for a trap");
    }
    let mut keys: Vec<&str> = plans.iter().filter_map(|p| p.key.as_deref()).collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.len() > 1 {
        let why = format!("a call mixed keys: {}", keys.join(", "));
        return jobs.iter().map(|_| Err(Error::fail(why.clone()))).collect();
    }
    jobs.iter()
        .zip(plans)
        .map(|(job, plan)| match plan.fail {
            Some(why) => Err(Error::fail(why)),
            None if job.attempt() <= plan.fail_first => Err(Error::retry(format!(
                "job {} failing on attempt {}",
                job.id(),
                job.attempt()
            ))),
            None => Ok(()),
        })
        .collect()
}

hourglass_sdk::batch_handler!(batcher);
