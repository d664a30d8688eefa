//! One attempt of one job: run it in a fresh instance, turn how it ended
//! into a [`Decision`], hand that to the committer.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::commit::{Completion, Decision};
use super::scheduler::Permits;
use super::{Shared, Topic};
use crate::clock::now_ms;
use crate::events::EventKind;
use crate::redis::{ClaimedJob, DeadInfo};
use crate::wasm::{Answer, Finish, JobContext, JobInput, Limits};

/// Run `job` and send its completion; hands its permits back to the scheduler.
pub(super) async fn run(
    shared: Arc<Shared>,
    commits: mpsc::Sender<Completion>,
    topic: Arc<Topic>,
    job: ClaimedJob,
    permits: Permits,
) -> Permits {
    let cfg = &topic.cfg;
    let ClaimedJob {
        id,
        due_at_ms,
        attempt,
        record,
        last_error,
    } = job;
    let decision = match record {
        Err(corrupt) => Decision::Dead(dead(attempt, format!("cannot run: {corrupt}"))),
        Ok(record) => {
            let max_attempts = if record.max_attempts == 0 {
                cfg.max_attempts
            } else {
                record.max_attempts
            };
            if attempt > max_attempts {
                // the last attempt lost its lease (its runner died or overran): nothing left to try
                let last = last_error.unwrap_or_else(|| "lease expired".into());
                Decision::Dead(dead(
                    attempt - 1,
                    format!(
                        "attempts exhausted ({max_attempts}/{max_attempts}); last error: {last}"
                    ),
                ))
            } else {
                let started_at_ms = now_ms();
                shared.emit(
                    &topic.cfg.name,
                    &id,
                    attempt,
                    EventKind::Started {
                        due_at_ms,
                        started_at_ms,
                    },
                );
                let input = JobInput {
                    ctx: JobContext {
                        topic: cfg.name.clone(),
                        id: id.clone(),
                        attempt,
                    },
                    payload: record.payload,
                    max_attempts,
                    enqueued_at_ms: record.enqueued_at_ms,
                    due_at_ms,
                };
                let finish = shared
                    .runtime
                    .run(
                        &topic.handler,
                        input,
                        Limits {
                            timeout: cfg.timeout,
                            memory: cfg.memory,
                        },
                    )
                    .await;
                decide(&topic, attempt, max_attempts, finish, rand::random::<f64>())
            }
        }
    };
    match &decision {
        Decision::Ack => tracing::debug!(topic = %cfg.name, job_id = %id, attempt, "done"),
        Decision::Retry {
            next_due_ms,
            reason,
        } => {
            let wait = Duration::from_millis(next_due_ms.saturating_sub(now_ms()));
            tracing::warn!(topic = %cfg.name, job_id = %id, attempt, "retrying in {}: {reason}", humantime::format_duration(wait));
        }
        Decision::Dead(DeadInfo { reason, .. }) => {
            tracing::warn!(topic = %cfg.name, job_id = %id, attempt, "dead-lettered: {reason}")
        }
        Decision::Release => {}
    }
    let completion = Completion {
        topic: topic.clone(),
        id: id.clone(),
        attempt,
        decision,
    };
    if commits.send(completion).await.is_err() {
        tracing::error!(topic = %cfg.name, job_id = %id, attempt, "committer gone; the lease will expire and the job run again");
    }
    shared
        .inflight
        .lock()
        .expect("inflight lock")
        .remove(&(cfg.name.clone(), id));
    permits
}

/// What to do with an attempt that ended with `finish`.
pub(super) fn decide(
    topic: &Topic,
    attempt: u32,
    max_attempts: u32,
    finish: Finish,
    unit: f64,
) -> Decision {
    let (delay, reason) = match finish {
        Finish::Answered(Answer::Ack) => return Decision::Ack,
        Finish::Answered(Answer::Fail(reason)) => {
            return Decision::Dead(dead(attempt, format!("failed: {reason}")));
        }
        Finish::NotStarted(why) => {
            tracing::warn!(topic = %topic.cfg.name, "attempt not started, released: {why}");
            return Decision::Release;
        }
        Finish::Answered(Answer::Retry { delay, reason }) => (delay, reason),
        Finish::Failed(reason) => (None, reason),
    };
    if attempt >= max_attempts {
        return Decision::Dead(dead(
            attempt,
            format!("attempts exhausted ({attempt}/{max_attempts}); last error: {reason}"),
        ));
    }
    let delay = delay.unwrap_or_else(|| topic.cfg.backoff.delay(attempt, unit));
    let next_due_ms =
        now_ms() + u64::try_from(delay.max(Duration::ZERO).as_millis()).unwrap_or(u64::MAX / 2);
    Decision::Retry {
        next_due_ms,
        reason,
    }
}

fn dead(attempts: u32, reason: String) -> DeadInfo {
    DeadInfo {
        reason,
        attempts,
        failed_at_ms: now_ms(),
    }
}
