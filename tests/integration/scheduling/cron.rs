//! Cron schedules: once per tick across three runners, catching up as told.

use crate::util::{Project, Running, eventually};
use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::NewJob;
use std::time::Duration;

use super::*;

fn schedule_config(missed: &str) -> String {
    format!(
        "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n\
         [[schedule]]\nname = \"tick\"\ntopic = \"echo\"\nevery = \"1s\"\npayload = '{{\"kind\":\"tick\"}}'\nmissed = \"{missed}\"\n"
    )
}

/// Every event the runner has sent so far (without waiting).
fn drain(runner: &mut Running) -> Vec<hourglass::events::Event> {
    let mut seen = Vec::new();
    while let Ok(e) = runner.events.try_recv() {
        seen.push(e);
    }
    seen
}

/// The fire time in a schedule job's id (`tick@<ms>`).
fn tick_of(id: &str) -> u64 {
    id.strip_prefix("tick@")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("not a tick id: {id}"))
}

/// The fire times started (by tick id) among `events`.
fn started_ticks(events: &[hourglass::events::Event]) -> Vec<u64> {
    let mut ticks: Vec<u64> = starts(events).into_iter().map(|(tick, _)| tick).collect();
    ticks.sort_unstable();
    ticks
}

/// Each start among `events`: its fire time (by tick id) and when it was due.
fn starts(events: &[hourglass::events::Event]) -> Vec<(u64, u64)> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Started { due_at_ms, .. } => Some((tick_of(&e.id), due_at_ms)),
            _ => None,
        })
        .collect()
}

/// Stop the runners, then restart one when the schedule has missed at least
/// five fire times; the fire times it caught up (ran due later than their
/// time), and how many had passed with nobody to enqueue them.
async fn missed_while_down(project: &Project, missed: &str) -> (Vec<u64>, usize) {
    project.write_config("concurrency = 4", &schedule_config(missed));
    let queue = project.queue().await;
    let cursor = queue
        .runners()
        .schedule_cursor(&queue.keys("echo"), "tick")
        .await
        .unwrap()
        .unwrap();
    // restart just after a whole second: the fifth after the cursor, or the
    // next one if stopping took longer than that (a loaded CI host)
    let last = (cursor / 1_000 + 5).max(now_ms() / 1_000 + 1) * 1_000;
    // as a runner stopped between enqueueing a fire time ahead and moving
    // the cursor past it leaves it: that job runs once, on time, as enqueued
    let ahead = (cursor / 1_000 + 1) * 1_000;
    let job = NewJob {
        unique_for_ms: 600_000,
        ..keyed(&format!("tick@{ahead}"), r#"{"kind":"tick"}"#, ahead)
    };
    queue
        .enqueue(&queue.keys("echo"), &[job], now_ms())
        .await
        .unwrap();
    // the schedule's fire times are wall-clock seconds the product reads: this
    // lets them pass with no runner up, the very thing under test
    tokio::time::sleep(Duration::from_millis((last + 100).saturating_sub(now_ms()))).await;
    let mut runner = Running::start(project.config()).await;
    // catching up comes first: the missed fire times are due at once, the
    // next regular ones 0.9 s and 1.9 s after the start; once the second of
    // those has run, a catch-up run would have shown long before
    let mut events = runner
        .until(Duration::from_secs(30), |seen| {
            started_ticks(seen).iter().any(|t| *t > last + 1_000)
        })
        .await;
    events.extend(drain(&mut runner));
    runner.stop().await;
    let missed: Vec<(u64, u64)> = starts(&events)
        .into_iter()
        .filter(|(tick, _)| *tick > cursor && *tick <= last)
        .collect();
    // fire times enqueued ahead that the cursor does not cover run on time,
    // as enqueued, and are not owed
    let on_time = missed.iter().filter(|(tick, due)| due == tick).count();
    assert_eq!(
        missed
            .iter()
            .filter(|(tick, _)| *tick == ahead)
            .collect::<Vec<_>>(),
        [&(ahead, ahead)],
        "the fire time enqueued ahead runs once, on time"
    );
    let mut caught: Vec<u64> = missed
        .iter()
        .filter(|(tick, due)| due > tick)
        .map(|(tick, _)| *tick)
        .collect();
    caught.sort_unstable();
    // fire times are whole seconds; the cursor need not be one
    (caught, (last / 1_000 - cursor / 1_000) as usize - on_time)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_fires_once_per_tick_across_three_runners_and_catches_up_as_told() {
    let project = Project::new("concurrency = 4", &schedule_config("latest"));
    let mut runners = Vec::new();
    for _ in 0..3 {
        runners.push(Running::start(project.config()).await);
    }
    // wait for eleven fire times to have run (a deadline, not a speed
    // claim): the ten before the last have had a second for a duplicate to show
    let mut events = Vec::new();
    eventually(Duration::from_secs(60), "11 ticks started", || {
        for r in &mut runners {
            events.extend(drain(r));
        }
        let mut ticks = started_ticks(&events);
        ticks.dedup();
        async move {
            match ticks.len() {
                11.. => Ok(()),
                _ => Err(format!("{ticks:?}")),
            }
        }
    })
    .await;
    for r in runners {
        r.stop().await;
    }
    let ticks = started_ticks(&events);
    let mut unique = ticks.clone();
    unique.dedup();
    assert_eq!(unique, ticks, "a fire time ran twice");
    assert!(
        ticks.len() >= 11,
        "eleven fire times of a per-second schedule: {ticks:?}"
    );
    assert!(
        ticks.windows(2).all(|w| w[1] - w[0] == 1_000),
        "every second, none skipped: {ticks:?}"
    );
    let late: Vec<u64> = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Started {
                due_at_ms,
                started_at_ms,
                ..
            } => Some(started_at_ms - due_at_ms),
            _ => None,
        })
        .collect();
    eprintln!(
        "schedule lateness (tick -> start) over {} ticks: max {} ms",
        late.len(),
        late.iter().max().unwrap()
    );

    // down for five fire times or more: "latest" runs the last of them,
    // "all" each
    let (latest, passed) = missed_while_down(&project, "latest").await;
    assert!(passed >= 4, "{passed} fire times passed");
    assert_eq!(
        latest.len(),
        1,
        "missed = latest, {passed} passed: {latest:?}"
    );
    let (all, passed) = missed_while_down(&project, "all").await;
    assert_eq!(all.len(), passed, "missed = all: {all:?}");
    assert!(all.windows(2).all(|w| w[1] - w[0] == 1_000), "{all:?}");
}
