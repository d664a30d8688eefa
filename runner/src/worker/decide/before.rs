//! Before an attempt runs: whether the claimed job can run at all (a
//! corrupt record, attempts used up or a deadline passed dead-letter it
//! unrun), a pin to a version this runner lacks, a flow dependency that
//! failed.

use super::{Decision, dead, told};
use crate::config::TopicConfig;
use crate::redis::{AttemptCost, AttemptOutcome, ClaimedJob, DeadInfo, Dependency, TraceContext};
use crate::wasm::JobInput;

/// A claimed job that can run.
pub(crate) struct Ready {
    /// The account it is tagged with.
    pub account: Option<String>,
    /// Its tenant key, when its topic claims fairly ('' for none).
    pub key: Option<String>,
    /// The handler's input.
    pub input: JobInput,
    /// The handler version the job is pinned to, if it is: the one that
    /// wrote its journal, or the one its record names.
    pub pin: Option<String>,
    /// Its story so far: its earlier attempts, with what they used.
    pub earlier: Vec<AttemptCost>,
    /// The signals its journal holds as it starts (a durable job's).
    pub signals: Vec<String>,
    /// The producer's trace context, if it gave one.
    pub trace: Option<TraceContext>,
    /// When it expires (ms): its own deadline, or its topic's
    /// `expire_after` from its enqueue.
    pub deadline: Option<u64>,
}

/// The input of the handler for `job`, or, when it cannot run, the decision
/// instead: a record that does not decode, or an attempt past the job's last
/// (the previous one lost its lease: its runner died or overran).
pub(crate) fn before_run(cfg: &TopicConfig, job: ClaimedJob, now: u64) -> Result<Ready, Decision> {
    let max_attempts = job.max_attempts(cfg.max_attempts);
    let ClaimedJob {
        id,
        due_at_ms,
        attempt,
        record,
        last_failure,
        account,
        key,
        journal,
        expires_at_ms,
    } = job;
    let (last, handler, earlier) = match last_failure {
        Some(f) if f.failed() => (f.error, f.handler, f.attempts),
        Some(f) => ("lease expired".into(), None, f.attempts),
        None => ("lease expired".into(), None, Vec::new()),
    };
    let record = match record {
        Ok(record) => record,
        Err(corrupt) => {
            return Err(Decision::Dead(dead(
                attempt,
                format!("cannot run: {corrupt}"),
                None,
                now,
                earlier,
            )));
        }
    };
    let deadline = expires_at_ms.or_else(|| {
        cfg.expire_after.map(|after| {
            record
                .enqueued_at_ms
                .saturating_add(crate::clock::millis(after))
        })
    });
    if let Some(at) = deadline
        && now >= at
    {
        return Err(expired(attempt.saturating_sub(1), at, now, earlier));
    }
    if attempt > max_attempts {
        return Err(Decision::Dead(dead(
            attempt - 1,
            format!("attempts exhausted ({max_attempts}/{max_attempts}); last error: {last}"),
            handler,
            now,
            earlier,
        )));
    }
    let journal = match journal.transpose() {
        Ok(journal) => journal,
        Err(corrupt) => {
            return Err(Decision::Dead(dead(
                attempt,
                format!("cannot run: its journal cannot be read ({corrupt})"),
                None,
                now,
                earlier,
            )));
        }
    };
    let signals = journal
        .as_ref()
        .map(|j| j.signals.keys().cloned().collect())
        .unwrap_or_default();
    // a journal's steps were recorded by one version: every later attempt runs on it
    let pin = journal
        .as_ref()
        .and_then(|j| j.version.clone())
        .or(record.version);
    let input = JobInput {
        topic: cfg.name.clone(),
        id,
        attempt,
        payload: record.payload,
        max_attempts,
        enqueued_at_ms: record.enqueued_at_ms,
        due_at_ms,
        parent_result: record.parent_result,
        trace: None,
        pass_through: None,
        journal,
        upstream: Default::default(),
    };
    Ok(Ready {
        input,
        deadline,
        trace: record.trace,
        pin,
        earlier,
        signals,
        account,
        key,
    })
}

/// The end of a job whose deadline `at` came before it could start, after
/// `attempts` attempts.
fn expired(attempts: u32, at: u64, now: u64, costs: Vec<AttemptCost>) -> Decision {
    let late = std::time::Duration::from_millis(now.saturating_sub(at));
    Decision::Expired(DeadInfo {
        expires_at_ms: Some(at),
        ..dead(
            attempts,
            format!(
                "expired: not started by its deadline, {} ({} ago)",
                time_of(at),
                humantime::format_duration(late)
            ),
            None,
            now,
            costs,
        )
    })
}

/// `at` (ms since the Unix epoch) as RFC 3339.
fn time_of(at: u64) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(at))
}

/// `decision`, unless it retries at or after the job's `deadline`: a retry
/// that would start too late is not made, the job expires now instead
/// (`attempt` was its last).
pub(crate) fn before_deadline(decision: Decision, deadline: Option<u64>, attempt: u32) -> Decision {
    match (decision, deadline) {
        (
            Decision::Retry {
                next_due_ms,
                failure,
            },
            Some(at),
        ) if next_due_ms >= at => {
            let reason = format!(
                "expired: its next attempt would start after its deadline, {}; last error: {}",
                time_of(at),
                failure.error
            );
            let story = told(failure.attempts, AttemptOutcome::Expired, Some(&reason));
            Decision::Expired(DeadInfo {
                expires_at_ms: Some(at),
                ..dead(attempt, reason, failure.handler, failure.at, story)
            })
        }
        (decision, _) => decision,
    }
}

/// A job pinned to `version`, which cannot be loaded here (`why`): it fails
/// for good, unrun, with a reason that says what to do.
pub(crate) fn pinned_elsewhere(attempt: u32, version: &str, why: &str, now: u64) -> Decision {
    Decision::Dead(dead(
        attempt.saturating_sub(1),
        format!(
            "cannot run: the job is pinned to handler version {version} ({why}); replay it on a kept version with `hourglass dead retry TOPIC ID --version HASH`"
        ),
        None,
        now,
        Vec::new(),
    ))
}

/// A job of a flow that cannot run because `dep`, which it requires, did
/// not ack: dead-lettered unrun, its reason naming the dependency (which
/// the flow's other dependents see in turn).
pub(crate) fn dependency_failed(attempt: u32, dep: &Dependency, now: u64) -> Decision {
    let (how, why) = match &dep.end {
        Some(end) => (end.state.as_str(), end.reason.as_deref().unwrap_or("-")),
        None => ("lost", "-"),
    };
    let how = if how == "dead" { "dead-lettered" } else { how };
    Decision::Dead(dead(
        attempt.saturating_sub(1),
        format!(
            "{}{:?} (topic {}, job {}) was {how}: {why}",
            crate::redis::flow::BLOCKED,
            dep.name,
            dep.topic,
            dep.id
        ),
        None,
        now,
        Vec::new(),
    ))
}
