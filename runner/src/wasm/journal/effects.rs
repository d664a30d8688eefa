//! One attempt's effects journal (`journal = "effects"`): what its job's
//! earlier attempts recorded ([`Replay`]) is handed back while it lasts,
//! and what this attempt does past it is recorded.
//!
//! The state is shared by the attempt's host, its clocks and random
//! sources (installed in its WASI context) and its outbound requests,
//! behind one lock that is never held across an await. Clock reads, random
//! bytes and follow-ups wait in `pending` and are written with the next
//! request's answer, before that answer reaches the guest, or when the
//! attempt ends: nothing the guest read can have left the sandbox before
//! it is in Redis, except through a request, which writes it first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::store::JournalStore;
use crate::clock::now_ms;
use crate::config::{JournalPolicy, OnDivergence};
pub(in crate::wasm) use crate::redis::effects::Kind;
use crate::redis::effects::{self, Answer, Entry, Recorded, Replay, Request};
use crate::wasm::JobContext;
use crate::wasm::ledger::End;

/// Effects an attempt recorded, replayed, and divergences it met, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EffectCounts {
    /// Recorded, by [`EffectCounts::KINDS`].
    pub recorded: [u32; 4],
    /// Replayed, by [`EffectCounts::KINDS`].
    pub replayed: [u32; 4],
    /// Requests or follow-ups that differed from the journal.
    pub diverged: u32,
}

impl EffectCounts {
    /// The kinds counted, as `/metrics` names them.
    pub const KINDS: [&'static str; 4] = ["http", "clock", "random", "follow_up"];

    fn slot(kind: Kind) -> usize {
        match kind {
            Kind::Http => 0,
            Kind::Wall | Kind::Monotonic => 1,
            Kind::Random | Kind::InsecureRandom => 2,
            Kind::FollowUp => 3,
        }
    }
}

/// A request's place in the journal, taken when the guest sends it.
pub(in crate::wasm) struct Ticket {
    scope: String,
    pos: u32,
    seq: u64,
    /// What the journal holds at that place.
    pub recorded: Option<Recorded>,
    /// Nothing is recorded any more: send it live.
    pub live_only: bool,
    /// The attempt diverged already: refuse it with this.
    pub refused: Option<String>,
}

impl Ticket {
    /// "effect 3" or "effect 2 of step \"charge\"" (1-based).
    pub fn place(&self) -> String {
        match self.scope.as_str() {
            "" => format!("effect {}", self.pos + 1),
            step => format!("effect {} of step {step:?}", self.pos + 1),
        }
    }
}

/// The identity of a request: what a replay compares.
pub(in crate::wasm) fn identify(method: &str, url: &str, body: &[u8]) -> Request {
    Request {
        method: method.to_owned(),
        url: url.to_owned(),
        body_sha256: Sha256::digest(body).into(),
        body_len: body.len() as u64,
    }
}

/// One attempt's effects journal.
pub(in crate::wasm) struct Effects {
    state: Mutex<State>,
    store: Arc<dyn JournalStore>,
    pub(super) ctx: Arc<JobContext>,
    on_divergence: OnDivergence,
}

pub(super) struct State {
    pub(super) replay: Replay,
    /// Steps begun and not yet recorded: the innermost is the scope.
    scopes: Vec<String>,
    cursors: HashMap<(String, Kind), u64>,
    pub(super) pending: Vec<Entry>,
    stopped: bool,
    /// Bytes the journal may still take.
    budget: usize,
    /// Added to the live monotonic clock so that it never goes back
    /// below a replayed read; and the last value handed out.
    pub(super) mono_offset: u64,
    pub(super) mono_last: u64,
    /// A divergence that fails the attempt.
    pub(super) failed: Option<String>,
    /// A write that failed: the attempt cannot go on safely.
    broken: Option<String>,
    pub(super) counts: EffectCounts,
}

impl State {
    fn scope(&self) -> String {
        self.scopes.last().cloned().unwrap_or_default()
    }

    /// The next position of `kind` in the current scope.
    pub(super) fn next(&mut self, kind: Kind, by: u64) -> (String, u64) {
        let scope = self.scope();
        let cursor = self.cursors.entry((scope.clone(), kind)).or_default();
        let at = *cursor;
        *cursor += by;
        (scope, at)
    }

    /// Whether `bytes` more may be recorded; stops the journal if not.
    pub(super) fn admit(&mut self, bytes: usize, attempt: u32) -> bool {
        if self.stopped {
            return false;
        }
        if bytes > self.budget {
            self.stop(attempt, "the job's journal is full (journal_max)".into());
            return false;
        }
        self.budget -= bytes;
        true
    }

    fn stop(&mut self, attempt: u32, reason: String) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let cursors = self
            .cursors
            .iter()
            .map(|((scope, kind), at)| (scope.clone(), *kind, *at))
            .collect();
        self.pending.push(Entry::Stop {
            attempt,
            at_ms: now_ms(),
            reason,
            cursors,
        });
    }

    pub(super) fn clock(&mut self, kind: Kind, live: u64, attempt: u32) -> u64 {
        let (scope, at) = self.next(kind, 1);
        if let Some(&v) = self
            .replay
            .clocks
            .get(&(scope.clone(), kind))
            .and_then(|reads| reads.get(at as usize))
        {
            self.counts.replayed[EffectCounts::slot(kind)] += 1;
            return v;
        }
        if self.admit(8, attempt) {
            self.counts.recorded[EffectCounts::slot(kind)] += 1;
            match self.pending.last_mut() {
                Some(Entry::Clock {
                    scope: s,
                    kind: k,
                    first,
                    values,
                }) if *s == scope
                    && *k == kind
                    && u64::from(*first) + values.len() as u64 == at =>
                {
                    values.push(live);
                }
                _ => self.pending.push(Entry::Clock {
                    scope,
                    kind,
                    first: at as u32,
                    values: vec![live],
                }),
            }
        }
        live
    }
}

impl Effects {
    /// The journal of attempt `ctx`, from what earlier attempts recorded.
    pub fn new(
        ctx: Arc<JobContext>,
        journal: Option<&crate::redis::Journal>,
        policy: &JournalPolicy,
        store: Arc<dyn JournalStore>,
    ) -> Arc<Effects> {
        let (replay, held) = match journal {
            Some(j) => (Replay::load(&j.effects), j.size()),
            None => (Replay::default(), 0),
        };
        let stopped = replay.stopped.is_some();
        Arc::new(Effects {
            state: Mutex::new(State {
                replay,
                scopes: Vec::new(),
                cursors: HashMap::new(),
                pending: Vec::new(),
                stopped,
                budget: (policy.max as usize).saturating_sub(held),
                mono_offset: 0,
                mono_last: 0,
                failed: None,
                broken: None,
                counts: EffectCounts::default(),
            }),
            store,
            ctx,
            on_divergence: policy.on_divergence,
        })
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("effects lock")
    }

    /// A step began (it was not replayed): what follows is its scope.
    pub fn enter(&self, step: &str) {
        self.state().scopes.push(step.to_owned());
    }

    /// Step `step` replayed its recorded result: what it did is never
    /// asked for again, so the journal's requests in its scope are reached.
    pub fn skip(&self, step: &str) {
        self.state()
            .replay
            .http
            .retain(|(scope, _), _| scope != step);
    }

    /// A step was recorded: its scope ends.
    pub fn leave(&self, step: &str) {
        let mut s = self.state();
        if let Some(at) = s.scopes.iter().rposition(|n| n == step) {
            s.scopes.truncate(at);
        }
    }

    /// A step recorded `bytes` into the same journal.
    pub fn spend(&self, bytes: usize) {
        let mut s = self.state();
        s.budget = s.budget.saturating_sub(bytes);
    }

    /// Bytes the journal may still take.
    pub fn budget(&self) -> usize {
        self.state().budget
    }

    /// Take the place of the guest's next request.
    pub fn ticket(&self) -> Ticket {
        let mut s = self.state();
        let (scope, pos) = s.next(Kind::Http, 1);
        let pos = pos as u32;
        let seq = s.replay.next_seq;
        s.replay.next_seq += 1;
        // each place is asked for once an attempt: the answer moves out
        let recorded = s.replay.http.remove(&(scope.clone(), pos));
        Ticket {
            // a stopped journal still replays what it holds before the stop
            live_only: s.stopped && recorded.is_none(),
            recorded,
            refused: s.failed.clone(),
            scope,
            pos,
            seq,
        }
    }

    /// A request (or follow-up) at `place` differs from the journal's:
    /// with `on_divergence = "fail"` the attempt fails with `message` (and
    /// `true` comes back: refuse it); with `"live"` the journal stops here.
    pub fn diverged(&self, message: String) -> bool {
        if let Some(ledger) = &self.ctx.check {
            // a replay check fails at a divergence, whatever on_divergence says
            ledger.end(End::Differs(message.clone()));
            self.state().failed.get_or_insert(message);
            return true;
        }
        let mut s = self.state();
        s.counts.diverged += 1;
        tracing::warn!(topic = %self.ctx.topic, job_id = %self.ctx.id, attempt = self.ctx.attempt, "{message}");
        match self.on_divergence {
            OnDivergence::Fail => {
                s.failed.get_or_insert(message);
                true
            }
            OnDivergence::Live => {
                s.stop(self.ctx.attempt, message);
                false
            }
        }
    }

    /// A request answered from the journal.
    pub fn replayed(&self) {
        self.state().counts.replayed[0] += 1;
    }

    /// Stop the journal (a body over the cap): this call and all after it
    /// run live.
    pub async fn stop(&self, reason: String) {
        if self.ctx.check.is_some() {
            // the request goes live next, which ends a check
            self.state().stop(self.ctx.attempt, reason);
            return;
        }
        tracing::info!(topic = %self.ctx.topic, job_id = %self.ctx.id, attempt = self.ctx.attempt, "effects journal stopped, the job runs live from here: {reason}");
        self.state().stop(self.ctx.attempt, reason);
        if let Err(e) = self.flush().await {
            tracing::warn!(topic = %self.ctx.topic, job_id = %self.ctx.id, "effects journal: {e}");
        }
    }

    /// Record the answer of the request at `ticket`, with everything
    /// pending, before the guest sees it.
    pub async fn record(
        &self,
        ticket: &Ticket,
        request: Request,
        answer: Answer,
    ) -> Result<(), String> {
        let entry = Entry::Http {
            scope: ticket.scope.clone(),
            pos: ticket.pos,
            seq: ticket.seq,
            attempt: self.ctx.attempt,
            at_ms: now_ms(),
            request,
            answer,
        };
        {
            let mut s = self.state();
            if s.admit(entry.size(), self.ctx.attempt) {
                s.counts.recorded[0] += 1;
                s.pending.push(entry);
            }
        }
        self.flush().await
    }

    /// Write what is pending, as one batch.
    pub async fn flush(&self) -> Result<(), String> {
        let (batch, encoded) = {
            let mut s = self.state();
            if s.pending.is_empty() {
                return Ok(());
            }
            if self.ctx.check.is_some() {
                // a replay check writes nothing
                s.pending.clear();
                return Ok(());
            }
            let entries = std::mem::take(&mut s.pending);
            let batch = s.replay.next_batch;
            s.replay.next_batch += 1;
            (batch, effects::encode(&entries))
        };
        let c = &self.ctx;
        let written = self
            .store
            .record_effects(&c.topic, &c.id, c.attempt, &c.handler, batch, encoded)
            .await;
        let failed = match written {
            Ok(true) => return Ok(()),
            Ok(false) => {
                "this attempt no longer owns the job (its lease expired or it was cancelled)"
                    .to_owned()
            }
            Err(e) => e,
        };
        let why = format!("the effects journal could not be written: {failed}");
        self.state().broken.get_or_insert(why.clone());
        Err(why)
    }

    /// How the attempt's journal ended: a divergence that fails it, a
    /// write that failed, and the counts.
    pub fn end(&self) -> (Option<String>, Option<String>, EffectCounts) {
        let s = self.state();
        (s.failed.clone(), s.broken.clone(), s.counts)
    }

    /// The first recorded request no request of this attempt has asked
    /// for yet (`effect 2: POST https://…`), if any: the attempt is still
    /// inside what its effects journal holds.
    pub fn request_left(&self) -> Option<String> {
        let s = self.state();
        let ((scope, pos), r) = s.replay.http.iter().min_by_key(|(_, r)| r.seq)?;
        let place = match scope.as_str() {
            "" => format!("effect {}", pos + 1),
            step => format!("effect {} of step {step:?}", pos + 1),
        };
        Some(format!(
            "the request at {place} ({} {})",
            r.request.method, r.request.url
        ))
    }

    /// Whether reads are waiting to be written.
    pub fn pending(&self) -> bool {
        !self.state().pending.is_empty()
    }
}
