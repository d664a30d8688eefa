//! Decide: what an attempt's end means for its job. Pure: the time and the
//! random draw for jitter are arguments, so tests pin both.
//!
//! Two questions, both here: can the claimed job run at all ([`before_run`]:
//! a corrupt record or attempts already used up dead-letter it unrun), and
//! what does the way it ended ask for ([`after_run`]: ack, retry with
//! backoff, dead-letter, or release uncounted).

use crate::config::TopicConfig;
use crate::redis::{
    AttemptCost, AttemptOutcome, DeadInfo, Failure, NewJob, Parked, Suspension, TraceContext,
    with_attempt,
};
use crate::wasm::{Acked, Finish, FollowUp};

/// The state change an attempt asks for.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Decision {
    /// Done; these follow-ups are parked with the ack and delivered after
    /// it, and the result is kept if the topic keeps results.
    Ack {
        /// Parked with the ack.
        follow_ups: Vec<Parked>,
        /// What the handler set.
        result: Option<Vec<u8>>,
        /// Flows the handler created, parked with the ack.
        flows: Vec<crate::redis::FlowSpec>,
        /// The job's story, this attempt included, when the topic keeps
        /// ends (else empty: nothing would keep it).
        history: Vec<AttemptCost>,
    },
    /// Try again at `next_due_ms`.
    Retry {
        /// When the next attempt is due.
        next_due_ms: u64,
        /// What went wrong this time.
        failure: Failure,
    },
    /// Move to the dead-letter set.
    Dead(DeadInfo),
    /// Not started by its deadline: dead-lettered or dropped, as the topic's
    /// `on_expire` says, and counted as expired.
    Expired(DeadInfo),
    /// Give the job back without counting the attempt (not started, or
    /// stopped at shutdown).
    Release,
    /// A durable handler sleeps or waits for a signal: put the job back
    /// until then, the attempt not counted.
    Suspend {
        /// What it waits for.
        suspension: Suspension,
        /// The job's story, this attempt included.
        story: Vec<AttemptCost>,
    },
}

mod before;

pub(super) use before::{Ready, before_deadline, before_run, dependency_failed, pinned_elsewhere};

/// The handler version an attempt ran on, and whether it ran as a canary.
#[derive(Debug, Clone, Copy)]
pub(super) struct RanOn<'a> {
    /// The version (content hash).
    pub version: &'a str,
    /// It was a canary's attempt: a failure the handler calls permanent is
    /// retried (on the stable version) instead of dead-lettered, so a bad
    /// canary costs retries, not dead letters.
    pub canary: bool,
}

impl RanOn<'_> {
    /// An attempt on a version that is no canary.
    #[cfg(test)]
    fn stable(version: &str) -> RanOn<'_> {
        RanOn {
            version,
            canary: false,
        }
    }
}

/// What an attempt (number `attempt` of `max_attempts`) on `on` that ended
/// with `finish` at `now` asks for; `unit` is a random draw in 0..1 for the
/// backoff's jitter; `costs` is the job's story, this attempt last
/// ([`costs`]; empty when nothing keeps it), kept with a retry's failure, a
/// suspension, a dead letter or a kept end, this attempt's outcome set here.
/// An ack's follow-ups and result are taken out of `finish` (into the
/// decision); what is left still says how the attempt ended, for its watchers.
#[allow(clippy::too_many_arguments)]
pub(super) fn after_run(
    cfg: &TopicConfig,
    on: RanOn<'_>,
    attempt: u32,
    max_attempts: u32,
    finish: &mut Finish,
    now: u64,
    unit: f64,
    costs: Vec<AttemptCost>,
) -> Decision {
    let handler = on.version;
    let (delay, reason) = match finish {
        Finish::Ack(acked) => {
            let Acked {
                follow_ups,
                result,
                flows,
            } = std::mem::take(acked);
            let follow_ups = follow_ups
                .into_iter()
                .map(|f| park(f, result.as_deref(), now))
                .collect();
            return Decision::Ack {
                follow_ups,
                result,
                flows,
                history: told(costs, AttemptOutcome::Ack, None),
            };
        }
        Finish::Fail(reason) if on.canary => (
            None,
            format!(
                "failed on canary {}: {reason} (retried on the stable version)",
                on.version
            ),
        ),
        Finish::Fail(reason) => {
            let reason = format!("failed: {reason}");
            let story = told(costs, AttemptOutcome::Dead, Some(&reason));
            return Decision::Dead(dead(attempt, reason, Some(handler.to_owned()), now, story));
        }
        Finish::NotStarted(_) => return Decision::Release,
        Finish::Suspended(s) => {
            let mut story = told(costs, AttemptOutcome::Suspend, None);
            if let Some(this) = story.last_mut() {
                this.waits_until_ms = Some(s.until_ms);
                this.waits_for.clone_from(&s.signal);
            }
            return Decision::Suspend {
                suspension: s.clone(),
                story,
            };
        }
        Finish::Retry { delay, reason } => (*delay, reason.clone()),
        Finish::Crashed(reason) => (None, reason.clone()),
    };
    if attempt >= max_attempts {
        let reason = format!("attempts exhausted ({attempt}/{max_attempts}); last error: {reason}");
        let story = told(costs, AttemptOutcome::Dead, Some(&reason));
        return Decision::Dead(dead(attempt, reason, Some(handler.to_owned()), now, story));
    }
    let delay = delay.unwrap_or_else(|| cfg.backoff.delay(attempt, unit));
    Decision::Retry {
        next_due_ms: now.saturating_add(crate::clock::millis(delay)),
        failure: Failure {
            attempts: told(costs, AttemptOutcome::Retry, Some(&reason)),
            error: reason,
            handler: Some(handler.to_owned()),
            at: now,
        },
    }
}

/// The job's story a decision keeps: its `earlier` attempts and this one
/// (made by `this` only when kept). An attempt that did not start keeps
/// none, nor one that acks on a topic that keeps no ends (`keep_acked`
/// false): nothing would hold it, and the common ack allocates nothing.
pub(super) fn costs(
    earlier: Vec<AttemptCost>,
    finish: &Finish,
    this: impl FnOnce() -> AttemptCost,
    keep_acked: bool,
) -> Vec<AttemptCost> {
    match finish {
        Finish::NotStarted(_) => Vec::new(),
        Finish::Ack(_) if !keep_acked => Vec::new(),
        _ => with_attempt(earlier, this()),
    }
}

/// `story` with its last attempt (this one) ended as `outcome`, failing
/// with `error`.
fn told(
    mut story: Vec<AttemptCost>,
    outcome: AttemptOutcome,
    error: Option<&str>,
) -> Vec<AttemptCost> {
    if let Some(this) = story.last_mut() {
        this.ended_as(outcome, error);
    }
    story
}

impl Decision {
    /// Give an ack's follow-ups their parent's tenant `key` (when they
    /// set none): work a tenant's job starts is that tenant's.
    pub(super) fn inherit_key(&mut self, key: Option<&str>) {
        if let (Decision::Ack { follow_ups, .. }, Some(key)) = (self, key.filter(|k| !k.is_empty()))
        {
            for f in follow_ups.iter_mut().filter(|f| f.job.key.is_none()) {
                f.job.key = Some(key.to_owned());
            }
        }
    }

    /// Give an ack's follow-ups the trace `context` makes (computed only
    /// when there are follow-ups), so they continue the attempt's trace.
    pub(super) fn continue_trace(&mut self, context: impl FnOnce() -> Option<TraceContext>) {
        if let Decision::Ack { follow_ups, .. } = self
            && !follow_ups.is_empty()
        {
            let context = context();
            for f in follow_ups.iter_mut() {
                f.job.trace = context.clone();
            }
        }
    }
}

/// A follow-up of an attempt acked at `now` with `result`, ready for the outbox.
fn park(f: FollowUp, result: Option<&[u8]>, now: u64) -> Parked {
    Parked {
        topic: f.topic,
        job: NewJob {
            id: Some(f.id),
            payload: f.payload,
            due_at_ms: now.saturating_add(crate::clock::millis(f.delay)),
            max_attempts: 0,
            unique_for_ms: crate::clock::millis(f.unique_for),
            parent_result: result.filter(|_| f.with_result).map(<[u8]>::to_vec),
            key: f.key,
            expires_at_ms: f
                .expires_in
                .map(|d| now.saturating_add(crate::clock::millis(d))),
            priority: f.priority,
            ..Default::default()
        },
    }
}

fn dead(
    attempts: u32,
    reason: String,
    handler: Option<String>,
    now: u64,
    costs: Vec<AttemptCost>,
) -> DeadInfo {
    DeadInfo {
        reason,
        attempts,
        failed_at_ms: now,
        handler,
        costs,
        expires_at_ms: None,
    }
}

#[cfg(test)]
mod tests;
