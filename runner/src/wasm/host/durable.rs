//! The `durable` import: a job's journal as its attempt sees it.
//!
//! The journal came with the claim ([`JobInput::journal`]); a step's result
//! is written to Redis (fenced by the attempt) before `record-step` returns,
//! so a step that returned is never run again by a later attempt, and one
//! whose attempt died before the write is (its side effect at least once).
//! A sleep or a wait that must wait ends the attempt with a trap, having
//! noted the [`Suspension`] here: the run reads it as suspended, and the
//! committer puts the job back on the time index at its wake time.
//!
//! [`JobInput::journal`]: crate::wasm::JobInput::journal

use std::collections::HashSet;
use std::sync::Arc;

use super::Host;
use crate::clock::now_ms;
use crate::redis::journal::{self, MAX_SIGNAL, MAX_STEP};
use crate::redis::{Journal, Signalled, Step, Suspension};
use crate::telemetry::spans::{self, StepEnd};
use crate::telemetry::{AttemptTrace, Begun};
use crate::wasm::bindings::hourglass::handler::durable;
use crate::wasm::journal::JournalStore;

/// Steps an attempt recorded and replayed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepCounts {
    /// Run and recorded by this attempt.
    pub recorded: u32,
    /// Returned from the journal without running.
    pub replayed: u32,
}

/// One attempt's view of its job's journal.
pub(crate) struct DurableState {
    journal: Journal,
    store: Arc<dyn JournalStore>,
    /// Names used in this attempt (steps and waits).
    seen: HashSet<String>,
    /// Sleeps called so far in this attempt (they are named by their order).
    sleeps: u32,
    size: usize,
    /// Set when a sleep or a wait ended the attempt.
    pub(crate) suspend: Option<Suspension>,
    pub(crate) counts: StepCounts,
    /// Bytes the job's journal may hold (`journal_max`).
    max: usize,
    /// The span of each step begun and not yet recorded (spans exported).
    open: Vec<(String, Begun, Arc<AttemptTrace>)>,
}

impl Drop for DurableState {
    /// A step begun and never recorded (it failed, or the attempt ended
    /// inside it) ends its span saying so.
    fn drop(&mut self) {
        for (name, span, trace) in self.open.drain(..) {
            trace
                .telemetry
                .end(&span, spans::step(&name, StepEnd::Failed));
        }
    }
}

impl DurableState {
    pub(crate) fn new(
        journal: Option<Journal>,
        store: Arc<dyn JournalStore>,
        max: u64,
    ) -> DurableState {
        let journal = journal.unwrap_or_default();
        DurableState {
            max: max as usize,
            size: journal.size(),
            journal,
            store,
            seen: HashSet::new(),
            sleeps: 0,
            suspend: None,
            counts: StepCounts::default(),
            open: Vec::new(),
        }
    }

    /// The journal the attempt began with, and what it has recorded since.
    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Where the journal is written.
    pub(crate) fn store(&self) -> Arc<dyn JournalStore> {
        self.store.clone()
    }
}

/// A handler's step or signal name: [`journal::check_name`], not one of the
/// host's own (`~…`), not used before in this attempt.
fn claim_name(seen: &mut HashSet<String>, what: &str, name: &str) -> Result<(), String> {
    journal::check_name(what, name)?;
    if name.starts_with('~') {
        return Err(format!(
            "{what} name {name:?}: names starting with '~' are the host's"
        ));
    }
    if !seen.insert(format!("{what}:{name}")) {
        return Err(format!(
            "{what} name {name:?} is used twice in one attempt: names must be unique within a job"
        ));
    }
    Ok(())
}

/// The journal step holding how a wait for signal `name` ended (recorded
/// only when it timed out: a signal, once sent, never changes).
fn wait_step(name: &str) -> String {
    format!("~signal:{name}")
}

impl Host {
    /// Write step `name` (`value`) to the journal, then keep it here.
    async fn record(&mut self, name: &str, value: Vec<u8>) -> Result<(), String> {
        if value.len() > MAX_STEP {
            return Err(format!(
                "step {name:?}: result of {} bytes is over the limit of {MAX_STEP} bytes (256 KiB per step)",
                value.len()
            ));
        }
        let adds = name.len() + value.len() + 12;
        // an effects journal shares the job's journal_max
        let left = match &self.effects {
            Some(e) => e.budget(),
            None => self.durable.max.saturating_sub(self.durable.size),
        };
        if adds > left {
            return Err(format!(
                "step {name:?}: the job's journal would hold more than its journal_max of {} bytes (queues.toml)",
                self.durable.max
            ));
        }
        let c = self.ctx.clone();
        let step = Step {
            attempt: c.attempt,
            at_ms: now_ms(),
            value,
        };
        let write =
            self.durable
                .store
                .record(&c.topic, &c.id, c.attempt, &c.handler, name, step.clone());
        match write.await {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "step {name:?} not recorded: this attempt no longer owns the job (its lease expired or it was cancelled)"
                ));
            }
            Err(e) => return Err(format!("step {name:?} not recorded: {e}")),
        }
        self.durable.size += adds;
        if let Some(e) = &self.effects {
            e.spend(adds);
        }
        self.durable.counts.recorded += 1;
        self.durable.journal.steps.insert(name.to_owned(), step);
        Ok(())
    }

    /// End the attempt suspended until `until_ms` (kept in journal field
    /// `timer`), waiting for `signal` if given.
    fn suspend(&mut self, timer: String, until_ms: u64, signal: Option<String>) -> wasmtime::Error {
        self.durable.suspend = Some(Suspension {
            timer,
            until_ms,
            since_ms: now_ms(),
            signal,
        });
        wasmtime::Error::msg("suspended: the job sleeps or waits for a signal")
    }

    /// Sleep until `at` unless the sleep called in this place slept already.
    fn sleep_to(&mut self, at: impl FnOnce(u64) -> u64) -> wasmtime::Result<()> {
        if let Err(e) = super::follow_up::in_one_job(&self.ctx, "sleep") {
            wasmtime::bail!("{e}");
        }
        self.durable.sleeps += 1;
        let timer = format!("~sleep:{}", self.durable.sleeps);
        let now = now_ms();
        let until = match self.durable.journal.timers.get(&timer) {
            Some(&recorded) => recorded,
            None => at(now),
        };
        if until <= now {
            return Ok(());
        }
        Err(self.suspend(format!("t:{timer}"), until, None))
    }
}

impl durable::Host for Host {
    async fn begin_step(
        &mut self,
        name: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, String>> {
        if let Err(e) = super::follow_up::in_one_job(&self.ctx, "record durable steps") {
            return Ok(Err(e));
        }
        if let Err(e) = claim_name(&mut self.durable.seen, "step", &name) {
            return Ok(Err(e));
        }
        let recorded = self
            .durable
            .journal
            .steps
            .get(&name)
            .map(|s| s.value.clone());
        match (&recorded, &self.effects) {
            (Some(_), _) => self.durable.counts.replayed += 1,
            // what the step does is its own scope of the effects journal
            (None, Some(e)) => e.enter(&name),
            (None, None) => {}
        }
        // the step's span, under the attempt's, when spans are exported
        if let Some(trace) = &self.ctx.trace
            && let Some(span) = trace.telemetry.child(&trace.span)
        {
            match &recorded {
                Some(v) => trace
                    .telemetry
                    .end(&span, spans::step(&name, StepEnd::Replayed(v.len()))),
                None => self.durable.open.push((name, span, trace.clone())),
            }
        }
        Ok(Ok(recorded))
    }

    async fn record_step(
        &mut self,
        name: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), String>> {
        if !self.durable.seen.contains(&format!("step:{name}")) {
            return Ok(Err(format!(
                "step {name:?} was not begun: call begin-step first"
            )));
        }
        if self.durable.journal.steps.contains_key(&name) {
            return Ok(Err(format!("step {name:?} is recorded already")));
        }
        let size = value.len();
        let recorded = self.record(&name, value).await;
        if recorded.is_ok()
            && let Some(e) = &self.effects
        {
            e.leave(&name);
        }
        if recorded.is_ok()
            && let Some(at) = self.durable.open.iter().position(|(n, _, _)| *n == name)
        {
            let (name, span, trace) = self.durable.open.swap_remove(at);
            trace
                .telemetry
                .end(&span, spans::step(&name, StepEnd::Recorded(size)));
        }
        Ok(recorded)
    }

    async fn sleep(&mut self, duration_ms: u64) -> wasmtime::Result<()> {
        self.sleep_to(|now| now.saturating_add(duration_ms))
    }

    async fn sleep_until(&mut self, at_ms: u64) -> wasmtime::Result<()> {
        self.sleep_to(|_| at_ms)
    }

    async fn wait_for_signal(
        &mut self,
        name: String,
        timeout_ms: u64,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, String>> {
        if let Err(e) = super::follow_up::in_one_job(&self.ctx, "wait for signals") {
            return Ok(Err(e));
        }
        if let Err(e) = claim_name(&mut self.durable.seen, "signal", &name) {
            return Ok(Err(e));
        }
        let step = wait_step(&name);
        if self.durable.journal.steps.contains_key(&step) {
            self.durable.counts.replayed += 1;
            return Ok(Ok(None)); // it timed out before
        }
        if let Some(payload) = self.durable.journal.signals.get(&name) {
            return Ok(Ok(Some(payload.clone())));
        }
        let timer = format!("t:{step}");
        let now = now_ms();
        let until = match self.durable.journal.timers.get(&step) {
            Some(&recorded) => recorded,
            None => now.saturating_add(timeout_ms),
        };
        if until <= now {
            // timed out: recorded, so that a signal sent later changes nothing
            return Ok(self.record(&step, Vec::new()).await.map(|()| None));
        }
        Err(self.suspend(timer, until, Some(name)))
    }

    async fn signal(
        &mut self,
        topic: String,
        id: String,
        name: String,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<(), String>> {
        let own = &self.ctx.topic;
        if &topic != own && !self.may_enqueue.contains(&topic) {
            return Ok(Err(format!(
                "topic {own:?} may not signal jobs of {topic:?}: add it to the topic's may_enqueue in queues.toml"
            )));
        }
        if let Err(e) = journal::check_name("signal", &name) {
            return Ok(Err(e));
        }
        if payload.len() > MAX_SIGNAL {
            return Ok(Err(format!(
                "signal payload of {} bytes is over the limit of {MAX_SIGNAL} bytes",
                payload.len()
            )));
        }
        Ok(
            match self.durable.store.signal(&topic, &id, &name, payload).await {
                Ok(Signalled::Woken | Signalled::Kept | Signalled::Duplicate) => Ok(()),
                Ok(Signalled::Dead) => Err(format!("job {id} of {topic:?} is dead-lettered")),
                Ok(Signalled::NoSuchJob) => Err(format!("no live job {id} in topic {topic:?}")),
                Err(e) => Err(format!("signal not sent: {e}")),
            },
        )
    }
}
