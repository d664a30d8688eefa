//! `[[schedule]]`: every runner enqueues each schedule's fire times a little
//! ahead, so a job is waiting when its time comes; each fire time is enqueued
//! once however many runners do this.
//!
//! Once a second, per schedule: read its cursor (the last fire time handled,
//! in Redis, in the topic's slot), enqueue the fire times after it up to
//! [`LEAD`] from now as jobs with the id `name@<fire time ms>` and a
//! reservation of that id ([`RESERVE`]: two runners racing enqueue one job),
//! then move the cursor forward. Fire times that passed while no runner ran
//! follow the schedule's `missed` policy. The schedules come from the served
//! configuration, so they reload live.

use std::sync::Arc;
use std::time::Duration;

use super::Shared;
use crate::clock::now_ms;
use crate::config::{MAX_CATCH_UP, ScheduleConfig};
use crate::redis::{Enqueued, NewJob, QueueError};

/// How far ahead fire times are enqueued (ms): the job waits in Redis and
/// starts on time.
pub const LEAD: u64 = 2_000;

/// How long a fire time's id stays reserved after its enqueue (ms): longer
/// than any two runners can disagree about the cursor.
const RESERVE: u64 = 10 * 60_000;

/// Most fire times looked at in one pass (a long outage of a per-second schedule).
const MOST_TICKS: usize = 200_000;

/// Serve the schedules until the task is aborted.
pub(super) async fn run(shared: Arc<Shared>) {
    let mut serving = shared.serving.subscribe();
    let mut failing = false;
    loop {
        let config = serving.borrow_and_update().config.clone();
        let now = now_ms();
        let mut failed = None;
        for schedule in &config.schedules {
            if let Err(e) = fire(&shared, schedule, now).await {
                shared.meter.redis_error();
                failed = Some(e);
            }
        }
        match (failed, failing) {
            (Some(e), false) => {
                tracing::warn!("schedules: cannot enqueue fire times, retrying every second: {e}");
                failing = true;
            }
            (None, true) => {
                tracing::info!("schedules: enqueueing fire times again");
                failing = false;
            }
            _ => {}
        }
        // a little after the next whole second, or at once when the configuration changes
        let wait = Duration::from_millis(1_000 - now_ms() % 1_000 + 5);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            changed = serving.changed() => if changed.is_err() { return },
        }
    }
}

/// Enqueue `schedule`'s fire times due by `now + LEAD` not handled yet.
async fn fire(shared: &Shared, schedule: &ScheduleConfig, now: u64) -> Result<(), QueueError> {
    let q = &shared.queue;
    let keys = q.keys(&schedule.topic);
    // never ran: nothing before now is owed
    let after = match q.runners().schedule_cursor(&keys, &schedule.name).await? {
        Some(cursor) => cursor,
        None => now.saturating_sub(1),
    };
    let until = now + LEAD;
    if until <= after {
        return Ok(());
    }
    let mut ticks = schedule.ticks(after, until, MOST_TICKS);
    let capped = ticks.len() == MOST_TICKS;
    if capped {
        // a very long outage: the fire times before these are past anyway
        ticks.drain(..ticks.len() - MAX_CATCH_UP);
    }
    let plan = schedule.plan(&ticks, now);
    if !plan.is_empty() {
        let jobs: Vec<NewJob> = plan
            .iter()
            .map(|(tick, due)| NewJob {
                id: Some(schedule.job_id(*tick)),
                payload: schedule.payload.clone(),
                due_at_ms: *due,
                unique_for_ms: RESERVE,
                ..Default::default()
            })
            .collect();
        let answers = q.enqueue(&keys, &jobs, now).await?;
        let new = answers
            .iter()
            .filter(|a| matches!(a, Enqueued::New(_)))
            .count();
        shared
            .meter
            .enqueued(&[(schedule.topic.clone(), new)].into_iter().collect());
        for (answer, (tick, due)) in answers.iter().zip(&plan) {
            if let Enqueued::New(id) = answer {
                let late = if due > tick {
                    " (missed, runs now)"
                } else {
                    ""
                };
                tracing::debug!(schedule = %schedule.name, topic = %schedule.topic, job_id = %id, "fire time enqueued{late}");
            }
        }
        let caught = plan.iter().filter(|(tick, due)| due > tick).count();
        let missed = ticks.iter().filter(|t| **t < now).count();
        if missed > 0 {
            tracing::info!(
                schedule = %schedule.name,
                "{missed} fire time(s) passed while no runner ran; missed = {:?}: {caught} enqueued now",
                schedule.missed
            );
        }
    }
    // every fire time up to `until` is handled, or (capped) up to the last one seen
    let handled = match ticks.last() {
        Some(last) if capped => *last,
        _ => until,
    };
    q.runners()
        .advance_schedule(&keys, &schedule.name, handled)
        .await
}
