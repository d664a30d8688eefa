//! Durable sleeps and waits for signals, and signals sent to other jobs.
//!
//! A sleep or a wait that must wait ends the attempt with a trap, having
//! noted the [`Suspension`] on the host: the run reads it as suspended,
//! and the committer puts the job back on the time index at its wake time.
//! Sleeps are told apart by the order they are called in, waits by name.
//! In a replay check a sleep or a wait that would suspend, or a signal that
//! would be sent, ends the check instead.

use super::Host;
use super::durable::{check_over, claim_name};
use crate::clock::now_ms;
use crate::redis::journal::{self, MAX_SIGNAL};
use crate::redis::{Signalled, Suspension};
use crate::wasm::journal::wait_step;
use crate::wasm::ledger::{Arrival, End};

impl Host {
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

    /// In a replay check: the candidate arrives at `arrival` (where the
    /// job waits, or a wait of its own); the check ends. `None` outside one.
    fn arrive(&self, arrival: Arrival) -> Option<wasmtime::Error> {
        let ledger = self.ctx.check.as_ref()?;
        ledger.end(End::Arrives(arrival));
        Some(check_over())
    }

    /// Sleep until `at` unless the sleep called in this place slept already.
    pub(super) fn sleep_to(&mut self, at: impl FnOnce(u64) -> u64) -> wasmtime::Result<()> {
        if self.ctx.check.as_ref().is_some_and(|l| l.has_ended()) {
            return Err(check_over());
        }
        if let Err(e) = super::follow_up::in_one_job(&self.ctx, "sleep") {
            wasmtime::bail!("{e}");
        }
        self.durable.sleeps += 1;
        let n = self.durable.sleeps;
        self.durable.place.sleep(n);
        let timer = format!("~sleep:{n}");
        let now = now_ms();
        let recorded = self.durable.journal.timers.get(&timer).copied();
        let until = recorded.unwrap_or_else(|| at(now));
        if until <= now {
            return Ok(());
        }
        let recorded = recorded.is_some();
        if let Some(stop) = self.arrive(Arrival::Sleep { n, recorded }) {
            return Err(stop);
        }
        Err(self.suspend(format!("t:{timer}"), until, None))
    }

    /// Wait for signal `name` for at most `timeout_ms`.
    pub(super) async fn wait(
        &mut self,
        name: String,
        timeout_ms: u64,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, String>> {
        if self.ctx.check.as_ref().is_some_and(|l| l.has_ended()) {
            return Err(check_over());
        }
        if let Err(e) = super::follow_up::in_one_job(&self.ctx, "wait for signals") {
            return Ok(Err(e));
        }
        if let Err(e) = claim_name(&mut self.durable.seen, "signal", &name) {
            return Ok(Err(e));
        }
        self.durable.place.wait(&name);
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
        let recorded = self.durable.journal.timers.get(&step).copied();
        let until = recorded.unwrap_or_else(|| now.saturating_add(timeout_ms));
        // (a check ends here either way: a timeout is written, a wait suspends)
        let waits = Arrival::Wait {
            name: name.clone(),
            recorded: recorded.is_some_and(|at| at > now),
        };
        if let Some(stop) = self.arrive(waits) {
            return Err(stop);
        }
        if until <= now {
            // timed out: recorded, so that a signal sent later changes nothing
            return Ok(self.record(&step, Vec::new()).await.map(|()| None));
        }
        Err(self.suspend(timer, until, Some(name)))
    }

    /// Send signal `name` with `payload` to job `id` of `topic`, now.
    pub(super) async fn send_signal(
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
        let sends = Arrival::Signal(format!("sends signal {name:?} to job {id} of {topic:?}"));
        if let Some(stop) = self.arrive(sends) {
            return Err(stop);
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
