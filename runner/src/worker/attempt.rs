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
use crate::redis::{ClaimedJob, DeadInfo, Failure, NewJob, Parked};
use crate::wasm::{Answer, Finish, FollowUp, JobContext, JobInput, LoadedHandler};

/// Run `job` with `handler` and send its completion; hands its permits back to the scheduler.
pub(super) async fn run(
    shared: Arc<Shared>,
    commits: mpsc::Sender<Completion>,
    topic: Arc<Topic>,
    handler: LoadedHandler,
    job: ClaimedJob,
    permits: Permits,
) -> Permits {
    let cfg = &topic.cfg;
    let ClaimedJob {
        id,
        due_at_ms,
        attempt,
        record,
        last_failure,
    } = job;
    let decision = match record {
        Err(corrupt) => Decision::Dead(dead(attempt, format!("cannot run: {corrupt}"), None)),
        Ok(record) => {
            let max_attempts = if record.max_attempts == 0 {
                cfg.max_attempts
            } else {
                record.max_attempts
            };
            if attempt > max_attempts {
                // the last attempt lost its lease (its runner died or overran): nothing left to try
                let (last, handler) = match last_failure {
                    Some(f) => (f.error, f.handler),
                    None => ("lease expired".into(), None),
                };
                Decision::Dead(dead(
                    attempt - 1,
                    format!(
                        "attempts exhausted ({max_attempts}/{max_attempts}); last error: {last}"
                    ),
                    handler,
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
                        handler: handler.hash().to_owned(),
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
                let finish = shared.runtime.run(&handler, input, &topic.sandbox).await;
                decide(
                    &topic,
                    handler.hash(),
                    attempt,
                    max_attempts,
                    finish,
                    rand::random::<f64>(),
                )
            }
        }
    };
    match &decision {
        Decision::Ack(follow_ups) => {
            tracing::debug!(topic = %cfg.name, job_id = %id, attempt, follow_ups = follow_ups.len(), "done")
        }
        Decision::Retry {
            next_due_ms,
            failure,
        } => {
            let wait = Duration::from_millis(next_due_ms.saturating_sub(now_ms()));
            tracing::warn!(topic = %cfg.name, job_id = %id, attempt, handler = failure.handler.as_deref().unwrap_or("-"), "retrying in {}: {}", humantime::format_duration(wait), failure.error);
        }
        Decision::Dead(DeadInfo {
            reason, handler, ..
        }) => {
            tracing::warn!(topic = %cfg.name, job_id = %id, attempt, handler = handler.as_deref().unwrap_or("-"), "dead-lettered: {reason}")
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

/// What to do with an attempt of `handler` (a content hash) that ended with `finish`.
pub(super) fn decide(
    topic: &Topic,
    handler: &str,
    attempt: u32,
    max_attempts: u32,
    finish: Finish,
    unit: f64,
) -> Decision {
    let now = now_ms();
    let (delay, reason) = match finish {
        Finish::Answered(Answer::Ack(follow_ups)) => {
            return Decision::Ack(follow_ups.into_iter().map(|f| park(f, now)).collect());
        }
        Finish::Answered(Answer::Fail(reason)) => {
            return Decision::Dead(dead(
                attempt,
                format!("failed: {reason}"),
                Some(handler.to_owned()),
            ));
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
            Some(handler.to_owned()),
        ));
    }
    let delay = delay.unwrap_or_else(|| topic.cfg.backoff.delay(attempt, unit));
    Decision::Retry {
        next_due_ms: now.saturating_add(millis(delay)),
        failure: Failure {
            error: reason,
            handler: Some(handler.to_owned()),
            at: now,
        },
    }
}

/// A follow-up of an attempt acked at `now`, ready for the outbox.
fn park(f: FollowUp, now: u64) -> Parked {
    Parked {
        topic: f.topic,
        job: NewJob {
            id: Some(f.id),
            payload: f.payload,
            due_at_ms: now.saturating_add(millis(f.delay)),
            max_attempts: 0,
        },
    }
}

fn dead(attempts: u32, reason: String, handler: Option<String>) -> DeadInfo {
    DeadInfo {
        reason,
        attempts,
        failed_at_ms: now_ms(),
        handler,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 4)
}
