//! The replay check: run a candidate handler version against a job's
//! journal in a sandbox where nothing is live, and say whether it reads the
//! journal the job's own version wrote.
//!
//! The store is an attempt's (`run.rs`: the topic's time, CPU and memory
//! limits, its grants, granted directories read-only), with a [`Ledger`]
//! in its context. Every import answers from the journal as the next
//! attempt would (steps replay, recorded sleeps and waits return, an
//! effects journal answers its requests, clocks and random bytes by the
//! usual rules, a divergence is a difference whatever `on_divergence`
//! says); whatever would reach the world ends the check where it would
//! have happened: a step or a request the journal does not hold, a sleep
//! or a wait that would suspend, a signal, the handler's return. Nothing
//! is written and nothing is sent: no journal write, no request, no
//! signal, no progress; follow-ups and the result stay in the store,
//! which is dropped. What the candidate logs or prints goes to the report.
//!
//! The check passes when the candidate got there having reached everything
//! the journal holds (every recorded step, in the order they were
//! recorded, every recorded sleep, wait and request): from there the job
//! would run the candidate's code live. Else it names the first difference.

use std::sync::Arc;
use std::time::Instant;

use super::bindings::hourglass::handler::types as wit;
use super::host::DurableState;
use super::journal::NoStore;
use super::ledger::{Arrival, End, Ledger};
use super::run::{Stop, stopped, used};
use super::usage::{Metered, Usage};
use super::{JobContext, JobInput, LoadedHandler, Runtime, Sandbox, epoch};

/// What a replay check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Whether the candidate reads the job's journal: the job may move to it.
    pub passes: bool,
    /// Where it got to (it passes), or the first difference (it does not).
    pub detail: String,
    /// Recorded steps it replayed on the way.
    pub replayed: u32,
    /// What it logged or printed meanwhile, as the log would show it.
    pub logs: Vec<String>,
    /// What the check cost.
    pub usage: Usage,
}

impl Runtime {
    /// Run `handler` against `job`'s journal (`job.journal`) inside
    /// `sandbox`, sending and writing nothing, and say whether the job may
    /// move to it.
    pub async fn check(
        &self,
        handler: &LoadedHandler,
        job: JobInput,
        sandbox: &Sandbox,
    ) -> Checked {
        let ledger = Arc::new(Ledger::default());
        let began = Instant::now();
        let deadline = began + sandbox.timeout;
        let effects_journal = sandbox.journal.effects;
        let sandbox = read_only(sandbox);
        let ctx = JobContext {
            topic: job.topic.clone(),
            id: job.id.clone(),
            attempt: job.attempt,
            handler: handler.hash.clone(),
            trace: None,
            pass_through: None,
            upstream: job.upstream,
            batch: 1,
            check: Some(ledger.clone()),
        };
        // a second line of defence: a write that gets this far is refused
        let durable = DurableState::new(job.journal, Arc::new(NoStore), sandbox.journal.max);
        let version = handler.hash.clone();
        let mut store = match self.store(ctx, &sandbox, deadline, job.parent_result, durable) {
            Ok(store) => store,
            Err(why) => return refused(why, ledger.take_lines()),
        };
        let cpu = store.data().cpu.clone();
        let input = wit::Job {
            id: job.id,
            topic: job.topic,
            payload: job.payload,
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            enqueued_at: job.enqueued_at_ms,
            due_at: job.due_at_ms,
        };
        let setup = began.elapsed();
        let mut started = None;
        let call = async {
            let instance = self.instantiate(handler, &mut store).await?;
            started = Some(began.elapsed());
            let _alive = self.in_use.enter();
            instance
                .call_handle(&mut store, &input)
                .await
                .map_err(Stop::Trap)
        };
        let result = {
            let call = std::pin::pin!(call);
            let bounded = tokio::time::timeout(
                sandbox.timeout + epoch::TICK * 4,
                Metered::new(call, cpu.clone()),
            );
            tokio::select! {
                biased;
                // what would reach the world ends the candidate where it is
                () = ledger.ended() => None,
                result = bounded => Some(result),
            }
        };
        let wall = began.elapsed();
        let host = store.data_mut();
        host.flush_output();
        let usage = used(host, wall, setup + cpu.used(), started);
        let end = match (ledger.take_end(), result) {
            (Some(end), _) => Ok(end),
            (None, Some(Ok(Ok(outcome)))) => Ok(End::Arrives(Arrival::Returned(shown(&outcome)))),
            (None, Some(Ok(Err(stop)))) => Err(stopped(host, Some(stop), &sandbox, &usage)),
            (None, Some(Err(_elapsed))) => Err(stopped(host, None, &sandbox, &usage)),
            (None, None) => unreachable!("the ledger ended the call"),
        };
        let left = host
            .durable
            .place
            .left()
            .or_else(|| host.effects.as_ref().and_then(|e| e.request_left()));
        let replayed = host.durable.counts.replayed;
        let (passes, detail) = match end {
            Ok(End::Differs(difference)) => (false, difference),
            Ok(End::Arrives(arrival)) => verdict(&arrival, left, &version, effects_journal),
            Err(finish) => (
                false,
                format!("version {version} did not reach the end of the journal: {finish:?}"),
            ),
        };
        Checked {
            passes,
            detail,
            replayed,
            logs: ledger.take_lines(),
            usage,
        }
    }
}

/// `sandbox` with its granted directories read-only: a check writes nothing.
fn read_only(sandbox: &Sandbox) -> Sandbox {
    let mut checked = sandbox.clone();
    let mut grants = (*sandbox.grants).clone();
    for dir in &mut grants.dirs {
        dir.write = false;
    }
    checked.grants = Arc::new(grants);
    checked
}

/// A check that could not start (a granted directory that cannot be opened).
fn refused(why: String, logs: Vec<String>) -> Checked {
    Checked {
        passes: false,
        detail: format!("the check could not start: {why}"),
        replayed: 0,
        logs,
        usage: Usage::default(),
    }
}

/// The handler's answer, in words.
fn shown(outcome: &wit::Outcome) -> String {
    match outcome {
        wit::Outcome::Ack => "acks".into(),
        wit::Outcome::Retry(r) => format!("retries ({})", r.reason),
        wit::Outcome::Fail(reason) => format!("fails ({reason})"),
    }
}

/// Whether arriving at `arrival` with `left` of the journal not reached
/// passes, and the words for it.
fn verdict(
    arrival: &Arrival,
    left: Option<String>,
    version: &str,
    effects_journal: bool,
) -> (bool, String) {
    let does = match arrival {
        Arrival::Step { name, .. } => format!("runs step {name:?}"),
        Arrival::Sleep { n, recorded: true } => format!("reaches sleep {n}, where the job sleeps"),
        Arrival::Sleep { n, .. } => format!("sleeps anew (sleep {n})"),
        Arrival::Wait {
            name,
            recorded: true,
        } => {
            format!("reaches the wait for signal {name:?}, where the job waits")
        }
        Arrival::Wait { name, .. } => format!("waits for signal {name:?} anew"),
        Arrival::Request(what) => format!("sends {what}"),
        Arrival::Signal(what) => what.clone(),
        Arrival::Returned(how) => format!("returns: it {how}"),
    };
    let Some(left) = left else {
        let from = match arrival {
            Arrival::Sleep { recorded: true, .. } | Arrival::Wait { recorded: true, .. } => {
                "it continues from there"
            }
            _ => "from there it runs live",
        };
        return (
            true,
            format!("version {version} replays the whole journal and {does}: {from}"),
        );
    };
    let detail = match arrival {
        // the common case, named as the docs show it
        Arrival::Step { n, name } if left.starts_with("step ") => format!(
            "step {n}: recorded {}, version {version} asks for {name:?}",
            &left["step ".len()..]
        ),
        Arrival::Request(what) if !effects_journal => format!(
            "a live call between steps cannot be answered from a steps journal: version {version} sends {what} before reaching {left}, which the journal holds (the job stays where it is)"
        ),
        _ => format!("version {version} {does} before reaching {left}, which the journal holds"),
    };
    (false, detail)
}
