//! One attempt of one job, the walk after the claim: run it in a fresh
//! instance, decide what its end asks for, hand that to the committer.
//!
//! An [`InFlight`] is the guard of a claimed job: it holds the job's capacity
//! ([`Slot`]) and owes the committer exactly one [`Completion`]. Dropped
//! without one (its task was stopped at shutdown), it sends a release, so
//! every attempt's end goes through the committer and comes out as an event.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::capacity::Slot;
use super::decide::{self, Decision};
use super::meter::Ran;
use super::{Shared, Topic};
use crate::clock::now_ms;
use crate::events::EventKind;
use crate::redis::{AttemptCost, ClaimedJob, with_attempt};
use crate::telemetry::{AttemptTrace, Ended, event};
use crate::wasm::{Attempted, Finish, LoadedHandler};
use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanKind, Status};

/// A finished attempt on its way to Redis.
pub(super) struct Completion {
    /// The topic version the attempt ran with.
    pub topic: Arc<Topic>,
    /// The job.
    pub id: String,
    /// The attempt's number: the fence its state change is checked against.
    pub attempt: u32,
    /// The handler version that ran it (or would have).
    pub version: Arc<str>,
    /// What it asks for.
    pub decision: Decision,
    /// When it was decided (ms): the time of the ack, burial or release.
    pub at_ms: u64,
}

/// The guard of one claimed job: its capacity, and the one completion it owes.
pub(super) struct InFlight {
    topic: Arc<Topic>,
    id: String,
    attempt: u32,
    version: Arc<str>,
    commits: mpsc::UnboundedSender<Completion>,
    committed: bool,
    _slot: Slot,
}

impl InFlight {
    /// The guard of attempt `attempt` of job `id` on handler `version`, holding `slot`
    /// until it is dropped.
    pub fn new(
        topic: Arc<Topic>,
        id: String,
        attempt: u32,
        version: Arc<str>,
        slot: Slot,
        commits: mpsc::UnboundedSender<Completion>,
    ) -> InFlight {
        InFlight {
            topic,
            id,
            attempt,
            version,
            commits,
            committed: false,
            _slot: slot,
        }
    }

    /// Hand `decision` to the committer (once: the guard keeps only its slot after).
    fn complete(&mut self, decision: Decision, at_ms: u64) {
        self.committed = true;
        let completion = Completion {
            topic: self.topic.clone(),
            id: std::mem::take(&mut self.id),
            attempt: self.attempt,
            version: self.version.clone(),
            decision,
            at_ms,
        };
        if let Err(lost) = self.commits.send(completion) {
            let c = lost.0;
            tracing::error!(topic = %c.topic.cfg.name, job_id = %c.id, attempt = c.attempt, "committer gone; the lease will expire and the job run again");
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.committed {
            // stopped before it could decide (shutdown): give the job back uncounted
            self.complete(Decision::Release, now_ms());
        }
    }
}

/// Run `job` with `handler` (a canary's, if `canary`), decide, and hand the
/// decision to the committer. Returns the guard: the scheduler drops it
/// (freeing the slot) when it reaps the task.
pub(super) async fn run(
    shared: Arc<Shared>,
    handler: LoadedHandler,
    canary: bool,
    job: ClaimedJob,
    mut flight: InFlight,
) -> InFlight {
    // claimed a little ahead (scheduler.rs: CLAIM_AHEAD): never start early.
    // Sleeping whole ms from a whole-ms clock ends at or after the due time;
    // bounded, so that a wall clock stepped back holds no job for long
    let hold = job.due_at_ms.saturating_sub(now_ms());
    if hold > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(hold.min(1_000))).await;
    }
    let topic = flight.topic.clone();
    let cfg = &topic.cfg;
    let decide::Ready {
        mut input,
        pin,
        earlier,
        account,
        trace,
    } = match decide::before_run(cfg, job, now_ms()) {
        Ok(ready) => ready,
        Err(decision) => {
            flight.complete(decision, now_ms());
            return flight;
        }
    };
    // a job pinned to a version runs on it, whatever the topic serves
    let (handler, canary) = match pin {
        Some(version) if version != handler.hash() => match shared.versions.load(&version).await {
            Ok(pinned) => {
                flight.version = pinned.version().clone();
                (pinned, false)
            }
            Err(why) => {
                let now = now_ms();
                flight.complete(
                    decide::pinned_elsewhere(input.attempt, &version, &why, now),
                    now,
                );
                return flight;
            }
        },
        Some(_) => (handler, false),
        None => (handler, canary),
    };
    let (number, max_attempts, due_at_ms) = (input.attempt, input.max_attempts, input.due_at_ms);
    // the attempt's span, when spans are exported: a child of the producer's
    let span = shared
        .telemetry
        .begin(trace.as_ref())
        .map(|span| Arc::new(AttemptTrace::new(span, shared.telemetry.clone())));
    input.trace = span.clone();
    let started_at_ms = now_ms();
    let late_ms = started_at_ms.saturating_sub(due_at_ms);
    shared.meter.started(&cfg.name, late_ms);
    tracing::debug!(topic = %cfg.name, job_id = %flight.id, attempt = number, handler = handler.hash(), late_ms, "started");
    shared.emit(
        &cfg.name,
        &flight.id,
        number,
        EventKind::Started {
            due_at_ms,
            started_at_ms,
            handler: handler.hash().to_owned(),
        },
    );
    let Attempted { finish, usage } = shared.runtime.run(&handler, input, &topic.sandbox).await;
    let how = match &finish {
        Finish::Ack(_) => Some(Ran::Ok),
        Finish::Retry { .. } | Finish::Fail(_) => Some(Ran::Failed),
        Finish::Crashed(_) => Some(Ran::Crashed),
        Finish::NotStarted(why) => {
            tracing::warn!(topic = %cfg.name, job_id = %flight.id, "attempt not started, released: {why}");
            None
        }
    };
    shared.meter.ran(&cfg.name, handler.version(), &usage, how);
    tracing::debug!(
        topic = %cfg.name,
        job_id = %flight.id,
        attempt = number,
        handler = handler.hash(),
        wall_us = usage.wall_us,
        cpu_us = usage.cpu_us,
        memory_peak = usage.memory_peak,
        start_us = usage.start_us,
        requests = usage.requests,
        bytes_out = usage.bytes_out,
        bytes_in = usage.bytes_in,
        "ran"
    );
    shared.emit(&cfg.name, &flight.id, number, EventKind::Ran { usage });
    if let Some(account) = &account
        && !matches!(finish, Finish::NotStarted(_))
    {
        shared.accounts.add(account, now_ms(), &usage);
    }
    // a job that acks keeps nothing; one that fails keeps each attempt's cost
    let costs = match &finish {
        Finish::Ack(_) | Finish::NotStarted(_) => Vec::new(),
        _ => with_attempt(
            earlier,
            AttemptCost {
                attempt: number,
                handler: Some(handler.hash().to_owned()),
                usage,
            },
        ),
    };
    let now = now_ms();
    let on = decide::RanOn {
        version: handler.hash(),
        canary,
    };
    let mut decision = decide::after_run(
        cfg,
        on,
        number,
        max_attempts,
        finish,
        now,
        rand::random::<f64>(),
        costs,
    );
    // follow-ups continue the trace: under this attempt's span, or the job's
    if let Decision::Ack { follow_ups, .. } = &mut decision
        && !follow_ups.is_empty()
    {
        let context = span.as_ref().map(|s| s.span.trace_context()).or(trace);
        for f in follow_ups.iter_mut() {
            f.job.trace = context.clone();
        }
    }
    if let Some(span) = &span {
        let attempt = Attempt {
            topic: &cfg.name,
            id: &flight.id,
            number,
            version: handler.hash(),
            late_ms,
            usage: &usage,
        };
        span.telemetry.end(&span.span, attempt.ended(&decision));
    }
    flight.complete(decision, now);
    flight
}

/// What an attempt's span says.
struct Attempt<'a> {
    topic: &'a str,
    id: &'a str,
    number: u32,
    version: &'a str,
    late_ms: u64,
    usage: &'a crate::wasm::Usage,
}

impl Attempt<'_> {
    /// The attempt's span as it ended with `decision`.
    fn ended(&self, decision: &Decision) -> Ended {
        let (outcome, event, status) = match decision {
            Decision::Ack { .. } => ("acked", None, Status::Ok),
            Decision::Retry {
                next_due_ms,
                failure,
            } => (
                "retry",
                Some(event(
                    "retry",
                    vec![
                        KeyValue::new("hourglass.reason", failure.error.clone()),
                        KeyValue::new("hourglass.next_due_ms", *next_due_ms as i64),
                    ],
                )),
                Status::error(failure.error.clone()),
            ),
            Decision::Dead(info) => (
                "dead",
                Some(event(
                    "dead",
                    vec![KeyValue::new("hourglass.reason", info.reason.clone())],
                )),
                Status::error(info.reason.clone()),
            ),
            Decision::Release => (
                "released",
                Some(event("release", Vec::new())),
                Status::Unset,
            ),
        };
        let u = self.usage;
        Ended {
            name: "hourglass.attempt".into(),
            kind: SpanKind::Consumer,
            attributes: vec![
                KeyValue::new("messaging.system", "hourglass"),
                KeyValue::new("messaging.destination.name", self.topic.to_owned()),
                KeyValue::new("messaging.message.id", self.id.to_owned()),
                KeyValue::new("hourglass.attempt", i64::from(self.number)),
                KeyValue::new("hourglass.handler.version", self.version.to_owned()),
                KeyValue::new("hourglass.outcome", outcome),
                KeyValue::new("hourglass.lateness_ms", self.late_ms as i64),
                KeyValue::new("hourglass.cpu_us", u.cpu_us as i64),
                KeyValue::new("hourglass.wall_us", u.wall_us as i64),
                KeyValue::new("hourglass.memory_peak_bytes", u.memory_peak as i64),
                KeyValue::new("hourglass.start_us", u.start_us as i64),
                KeyValue::new("hourglass.http.requests", i64::from(u.requests)),
            ],
            events: event.into_iter().collect(),
            status,
        }
    }
}
