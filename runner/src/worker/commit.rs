//! Commit and report: one task turns finished attempts into Redis state
//! changes, batching everything that finished meanwhile into one script call
//! per topic and kind, then says what happened: an [`EventKind`] per job
//! and a log line per retry, burial and release. Follow-ups parked by an ack
//! are delivered to their topics right after it. A commit that fails is
//! retried for a while; after that the lease expires and the job runs again
//! (at-least-once).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::attempt::Completion;
use super::decide::Decision;
use super::watch::meter::{Meter, Outcome};
use super::{Shared, Topic};
use crate::events::EventKind;
use crate::redis::{
    Burial, Done, EndState, Entry, Held, JobEnd, OnExpire, QueueError, Refusal, Refused, Retrying,
    Suspending,
};

mod bury;
mod deliver;
mod suspend;
use bury::bury;
use deliver::{delivery_spans, tell};
use suspend::suspend;

/// Most completions committed in one round.
const BATCH: usize = 512;
/// How long a commit is retried while Redis is unreachable. A late commit
/// still counts (attempts are fenced by number, not by lease time), so this
/// outlasts ordinary outages; past it, the job runs again.
const PATIENCE: Duration = Duration::from_secs(180);

/// One topic's completions of a round, by kind.
#[derive(Default)]
struct Batch {
    topic: Option<Arc<Topic>>,
    /// Each job and attempt, let go of (`leases.rs`) once committed.
    held: Vec<(String, u32)>,
    acks: Pending<Done>,
    retries: Pending<Retrying>,
    dead: Pending<Burial>,
    releases: Pending<Held>,
    suspends: Pending<Suspending>,
    /// The latest decision time in the batch: the `now` of its scripts.
    at_ms: u64,
}

/// State changes of one kind waiting for their script, each with the
/// handler version whose attempt asked for it (what the change is counted for).
struct Pending<T> {
    items: Vec<T>,
    versions: Vec<Arc<str>>,
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Pending {
            items: Vec::new(),
            versions: Vec::new(),
        }
    }
}

impl<T> Pending<T> {
    fn push(&mut self, item: T, version: Arc<str>) {
        self.items.push(item);
        self.versions.push(version);
    }
}

/// Commit completions until every sender is gone and the channel is drained;
/// how many attempts were released.
pub(super) async fn run(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Completion>) -> usize {
    let mut buf = Vec::with_capacity(BATCH);
    let mut released = 0;
    while rx.recv_many(&mut buf, BATCH).await > 0 {
        let mut by_topic: HashMap<String, Batch> = HashMap::new();
        for c in buf.drain(..) {
            let b = by_topic.entry(c.topic.cfg.name.clone()).or_default();
            b.topic.get_or_insert_with(|| c.topic.clone());
            b.at_ms = b.at_ms.max(c.at_ms);
            b.held.push((c.id.clone(), c.attempt));
            let expired =
                matches!(c.decision, Decision::Expired(_)).then_some(c.topic.cfg.on_expire);
            let logs = c.logs;
            match c.decision {
                Decision::Ack {
                    follow_ups,
                    result,
                    flows,
                    history,
                } => {
                    let (version, attempts, at_ms) = (&c.version, c.attempt, c.at_ms);
                    let end = || JobEnd {
                        state: EndState::Acked,
                        result,
                        reason: None,
                        version: Some(version.to_string()),
                        attempts,
                        at_ms,
                        history,
                        logs: None,
                    };
                    let (end, notice) = tell(c.topic.cfg.results.is_some(), end, c.flow);
                    let done = Done {
                        id: c.id,
                        attempt: c.attempt,
                        follow_ups,
                        end,
                        notice,
                        flows,
                        logs,
                    };
                    b.acks.push(done, c.version);
                }
                Decision::Retry {
                    next_due_ms,
                    failure,
                } => {
                    let failed = Retrying {
                        id: c.id,
                        attempt: c.attempt,
                        next_due_ms,
                        failure,
                        logs,
                    };
                    b.retries.push(failed, c.version);
                }
                Decision::Dead(info) | Decision::Expired(info) => {
                    let state = match expired {
                        Some(OnExpire::Drop) => EndState::Expired,
                        _ => EndState::Dead,
                    };
                    let end = || JobEnd {
                        state,
                        result: None,
                        reason: Some(info.reason.clone()),
                        version: info.handler.clone(),
                        attempts: info.attempts,
                        at_ms: c.at_ms,
                        history: Vec::new(),
                        logs: None,
                    };
                    let (end, notice) = tell(c.topic.cfg.results.is_some(), end, c.flow);
                    let burial = Burial {
                        id: c.id,
                        attempt: c.attempt,
                        info,
                        end,
                        notice,
                        expired,
                        logs,
                    };
                    b.dead.push(burial, c.version);
                }
                Decision::Release => {
                    let held = Held {
                        id: c.id,
                        attempt: c.attempt,
                    };
                    b.releases.push(held, c.version);
                }
                Decision::Suspend { suspension, story } => {
                    let suspending = Suspending {
                        id: c.id,
                        attempt: c.attempt,
                        version: c.version.to_string(),
                        suspension,
                        story,
                        logs,
                    };
                    b.suspends.push(suspending, c.version);
                }
            }
        }
        for (topic, mut batch) in by_topic {
            let held = std::mem::take(&mut batch.held);
            released += commit(&shared, batch).await;
            shared
                .leases
                .let_go(&topic, held.iter().map(|(id, a)| (id.as_str(), *a)));
        }
    }
    released
}

/// Commit one topic's batch and report what was committed; how many were released.
async fn commit(shared: &Shared, b: Batch) -> usize {
    let topic = b.topic.expect("a batch has a topic");
    let (keys, name, now) = (&topic.keys, topic.cfg.name.as_str(), b.at_ms);
    let kept = topic.cfg.kept();
    let q = &shared.queue;
    if !b.acks.items.is_empty()
        && let Some(refused) = persist(&shared.meter, "ack", name, || {
            q.pipeline().ack(keys, &b.acks.items, now, kept)
        })
        .await
    {
        count(shared, name, &b.acks, &refused, |d| &d.id, |_| Outcome::Ack);
        let acked: Vec<Done> = b
            .acks
            .items
            .into_iter()
            .filter(|d| !is_refused(&refused, &d.id))
            .collect();
        for d in &acked {
            tracing::debug!(topic = %name, job_id = %d.id, attempt = d.attempt, follow_ups = d.follow_ups.len(), "done");
            shared.emit(name, &d.id, d.attempt, EventKind::Acked);
        }
        let parked: Vec<(String, Entry)> = acked
            .into_iter()
            .filter(|d| !d.follow_ups.is_empty() || d.notice.is_some() || !d.flows.is_empty())
            .map(|d| {
                let entry = Entry {
                    jobs: d.follow_ups,
                    flows: d.flows,
                    notices: d.notice.into_iter().collect(),
                };
                (crate::redis::outbox_token(d.attempt, &d.id), entry)
            })
            .collect();
        // the ack has parked them; if this fails, a sweep delivers them later
        if !parked.is_empty() {
            let spans = delivery_spans(&shared.telemetry, &parked);
            let delivered = q.pipeline().deliver(keys, &parked, now).await;
            for (span, ended) in spans {
                shared.telemetry.end(&span, ended(&delivered));
            }
            match delivered {
                Ok(new) => shared.meter.enqueued(&new),
                Err(e) => tracing::warn!(
                    topic = name,
                    "follow-ups parked, delivery deferred to the sweep: {e}"
                ),
            }
        }
    }
    if !b.retries.items.is_empty()
        && let Some(refused) = persist(&shared.meter, "retry", name, || {
            q.pipeline().retry(keys, &b.retries.items, kept)
        })
        .await
    {
        count(
            shared,
            name,
            &b.retries,
            &refused,
            |r| &r.id,
            |_| Outcome::Retry,
        );
        for Retrying {
            id,
            attempt,
            next_due_ms,
            failure,
            ..
        } in b
            .retries
            .items
            .into_iter()
            .filter(|r| !is_refused(&refused, &r.id))
        {
            let wait = Duration::from_millis(next_due_ms.saturating_sub(now));
            tracing::warn!(topic = %name, job_id = %id, attempt, handler = failure.handler.as_deref().unwrap_or("-"), "retrying in {}: {}", humantime::format_duration(wait), failure.error);
            shared.emit(
                name,
                &id,
                attempt,
                EventKind::Retried {
                    next_due_ms,
                    reason: failure.error,
                },
            );
        }
    }
    if !b.dead.items.is_empty() {
        bury(shared, &topic, b.dead, now).await;
    }
    if !b.suspends.items.is_empty() {
        suspend(shared, &topic, &b.suspends, now).await;
    }
    let mut released = 0;
    if !b.releases.items.is_empty()
        && let Some(refused) = persist(&shared.meter, "release", name, || {
            q.pipeline().release(keys, &b.releases.items, now)
        })
        .await
    {
        count(
            shared,
            name,
            &b.releases,
            &refused,
            |r| &r.id,
            |_| Outcome::Released,
        );
        for Held { id, attempt } in b
            .releases
            .items
            .iter()
            .filter(|h| !is_refused(&refused, &h.id))
        {
            tracing::debug!(topic = %name, job_id = %id, attempt, "released, not counted as an attempt");
            shared.emit(name, id, *attempt, EventKind::Released);
            released += 1;
        }
    }
    released
}

/// Count what a script accepted of `pending` as `outcome` per version, and
/// what it found gone as cancelled.
fn count<T>(
    shared: &Shared,
    topic: &str,
    pending: &Pending<T>,
    refused: &[Refusal],
    id: impl Fn(&T) -> &String,
    outcome: impl Fn(&T) -> Outcome,
) {
    // runs of one version and outcome count in one step (a batch is mostly one version)
    let mut run: Option<(&Arc<str>, Outcome, usize)> = None;
    for (item, version) in pending.items.iter().zip(&pending.versions) {
        let counted = match refused.iter().find(|r| &r.id == id(item)) {
            None => outcome(item),
            Some(r) if r.why == Refused::Gone => Outcome::Cancelled,
            Some(_) => continue,
        };
        match &mut run {
            Some((v, o, n)) if Arc::ptr_eq(v, version) && *o == counted => *n += 1,
            _ => {
                if let Some((v, o, n)) = run.replace((version, counted, 1)) {
                    shared.meter.ended(topic, v, o, n);
                }
            }
        }
    }
    if let Some((v, o, n)) = run {
        shared.meter.ended(topic, v, o, n);
    }
}

fn is_refused(refused: &[Refusal], id: &str) -> bool {
    refused.iter().any(|r| r.id == id)
}

/// Run `op` until it succeeds or [`PATIENCE`] runs out. On success, the jobs
/// the script left alone and why, logged here as what happened; `None` if it
/// never succeeded.
async fn persist<F, Fut>(meter: &Meter, what: &str, topic: &str, mut op: F) -> Option<Vec<Refusal>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Refusal>, QueueError>>,
{
    let start = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(50);
    // an earlier try ran on the primary but too few replicas confirmed it in time
    let mut ran_unconfirmed = false;
    loop {
        match op().await {
            Ok(mut refused) => {
                if ran_unconfirmed {
                    // this try found them gone because the earlier one went
                    // through (and this try's WAIT covers it): committed
                    refused.retain(|r| !matches!(r.why, Refused::Gone));
                }
                if pause > Duration::from_millis(50) {
                    tracing::info!(
                        topic,
                        "{what} committed after {:.1}s of retries",
                        start.elapsed().as_secs_f64()
                    );
                }
                let retried = pause > Duration::from_millis(50);
                for r in &refused {
                    match r.why {
                        Refused::Newer => {
                            tracing::warn!(topic, job_id = %r.id, "{what} discarded: this attempt lost its lease and a newer attempt owns the job")
                        }
                        // after retries: most likely the first try went through before its reply was lost
                        Refused::Gone if retried => {
                            tracing::info!(topic, job_id = %r.id, "{what} found the job gone: an earlier try of this commit went through before Redis went away (or the job was cancelled)")
                        }
                        Refused::Gone => {
                            tracing::info!(topic, job_id = %r.id, "{what} not applied: the job was cancelled while it ran")
                        }
                    }
                }
                return Some(refused);
            }
            Err(e) if e.is_retryable() && start.elapsed() < PATIENCE => {
                meter.redis_error();
                ran_unconfirmed |= matches!(e, QueueError::NotReplicated { .. });
                if pause == Duration::from_millis(50) {
                    tracing::warn!(
                        topic,
                        "{what} not committed yet, retrying for up to {}s: {e}",
                        PATIENCE.as_secs()
                    );
                } else {
                    tracing::debug!(topic, "{what} not committed yet, retrying: {e}");
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                meter.redis_error();
                tracing::error!(
                    topic,
                    "{what} not committed, giving up (the leases will expire and the jobs run again): {e}"
                );
                return None;
            }
        }
    }
}
