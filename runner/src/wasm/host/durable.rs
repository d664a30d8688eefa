//! The `durable` import: a job's journal as its attempt sees it.
//!
//! The journal came with the claim ([`JobInput::journal`]); a step's result
//! is written to Redis (fenced by the attempt) before `record-step` returns,
//! so a step that returned is never run again by a later attempt, and one
//! whose attempt died before the write is (its side effect at least once).
//! Sleeps, waits and signals are in `waits.rs`, `patched` in `patch.rs`.
//!
//! In a replay check (`check.rs`: the context carries a [`Ledger`]) nothing
//! is written: a step the journal holds replays, and one it does not ends
//! the check there.
//!
//! [`JobInput::journal`]: crate::wasm::JobInput::journal
//! [`Ledger`]: crate::wasm::ledger::Ledger

use std::collections::HashSet;
use std::sync::Arc;

use super::Host;
use crate::clock::now_ms;
use crate::redis::journal::{self, MAX_STEP};
use crate::redis::{Journal, Step, Suspension};
use crate::telemetry::spans::{self, StepEnd};
use crate::telemetry::{AttemptTrace, Begun};
use crate::wasm::bindings::hourglass::handler::durable;
use crate::wasm::journal::{JournalStore, Place, Reached};
use crate::wasm::ledger::{Arrival, End};

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
    pub(super) journal: Journal,
    pub(super) store: Arc<dyn JournalStore>,
    /// Names used in this attempt (steps and waits).
    pub(super) seen: HashSet<String>,
    /// Sleeps called so far in this attempt (they are named by their order).
    pub(super) sleeps: u32,
    pub(super) size: usize,
    /// What of the journal this attempt has not reached yet.
    pub(crate) place: Place,
    /// Set when a sleep or a wait ended the attempt.
    pub(crate) suspend: Option<Suspension>,
    pub(crate) counts: StepCounts,
    /// Bytes the job's journal may hold (`journal_max`).
    pub(super) max: usize,
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
            place: Place::new(&journal),
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
pub(super) fn claim_name(seen: &mut HashSet<String>, what: &str, name: &str) -> Result<(), String> {
    own_name(what, name)?;
    if !seen.insert(format!("{what}:{name}")) {
        return Err(format!(
            "{what} name {name:?} is used twice in one attempt: names must be unique within a job"
        ));
    }
    Ok(())
}

/// [`journal::check_name`], and not one of the host's own (`~…`).
pub(super) fn own_name(what: &str, name: &str) -> Result<(), String> {
    journal::check_name(what, name)?;
    if name.starts_with('~') {
        return Err(format!(
            "{what} name {name:?}: names starting with '~' are the host's"
        ));
    }
    Ok(())
}

/// The trap that stops a candidate once its replay check has ended.
pub(super) fn check_over() -> wasmtime::Error {
    wasmtime::Error::msg("the replay check ended here")
}

impl Host {
    /// Whether the attempt is still inside what its journal holds: a
    /// recorded step, wait, timer or request it has not reached yet.
    pub(super) fn replaying(&self) -> bool {
        self.durable.place.left().is_some()
            || self
                .effects
                .as_ref()
                .is_some_and(|e| e.request_left().is_some())
    }

    /// Bytes `adds` fit the job's journal (its `journal_max`, shared with an
    /// effects journal); why not, for `what`.
    pub(super) fn fits(&self, what: &str, adds: usize) -> Result<(), String> {
        let left = match &self.effects {
            Some(e) => e.budget(),
            None => self.durable.max.saturating_sub(self.durable.size),
        };
        if adds > left {
            return Err(format!(
                "{what}: the job's journal would hold more than its journal_max of {} bytes (queues.toml)",
                self.durable.max
            ));
        }
        Ok(())
    }

    /// `adds` bytes were written to the journal.
    pub(super) fn spent(&mut self, adds: usize) {
        self.durable.size += adds;
        if let Some(e) = &self.effects {
            e.spend(adds);
        }
    }

    /// Write step `name` (`value`) to the journal, then keep it here.
    pub(super) async fn record(&mut self, name: &str, value: Vec<u8>) -> Result<(), String> {
        if value.len() > MAX_STEP {
            return Err(format!(
                "step {name:?}: result of {} bytes is over the limit of {MAX_STEP} bytes (256 KiB per step)",
                value.len()
            ));
        }
        let adds = name.len() + value.len() + 12;
        self.fits(&format!("step {name:?}"), adds)?;
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
        self.spent(adds);
        self.durable.counts.recorded += 1;
        self.durable.journal.steps.insert(name.to_owned(), step);
        Ok(())
    }

    /// In a replay check, step `name` as the journal holds it (`recorded`):
    /// a step asked for ahead of the recorded order, or one the journal
    /// does not hold, ends the check. `Err`: the trap that stops the candidate.
    fn checked_step(
        &mut self,
        name: &str,
        recorded: bool,
        reached: Reached,
    ) -> wasmtime::Result<()> {
        let Some(ledger) = self.ctx.check.clone() else {
            return Ok(());
        };
        let n = self.durable.place.asked;
        let version = &self.ctx.handler;
        match (recorded, reached) {
            (true, Reached::Early(first)) => {
                ledger.end(End::Differs(format!(
                    "step {n}: recorded {first:?} here, version {version} asks for {name:?} (recorded later)"
                )));
                Err(check_over())
            }
            (true, _) => Ok(()),
            (false, _) => {
                ledger.end(End::Arrives(Arrival::Step {
                    n,
                    name: name.to_owned(),
                }));
                Err(check_over())
            }
        }
    }
}

impl durable::Host for Host {
    async fn begin_step(
        &mut self,
        name: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, String>> {
        if self.ctx.check.as_ref().is_some_and(|l| l.has_ended()) {
            return Err(check_over());
        }
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
        let reached = self.durable.place.step(&name);
        self.checked_step(&name, recorded.is_some(), reached)?;
        match (&recorded, &self.effects) {
            (Some(_), effects) => {
                self.durable.counts.replayed += 1;
                if let Some(e) = effects {
                    e.skip(&name);
                }
            }
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
        if self.ctx.check.is_some() {
            // a check ends at the step's begin: nothing is recorded
            return Err(check_over());
        }
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
        self.wait(name, timeout_ms).await
    }

    async fn signal(
        &mut self,
        topic: String,
        id: String,
        name: String,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<(), String>> {
        self.send_signal(topic, id, name, payload).await
    }

    async fn patched(&mut self, name: String) -> wasmtime::Result<Result<bool, String>> {
        self.patch(name).await
    }

    async fn deprecate_patch(&mut self, name: String) -> wasmtime::Result<Result<(), String>> {
        self.deprecated(name)
    }
}
