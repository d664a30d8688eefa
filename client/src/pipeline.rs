//! The runner's side of the job path, as the [`Pipeline`] handle: the
//! fenced state changes an attempt ends with (`ack.lua`, `retry.lua`,
//! `bury.lua`, `release.lua`), the extension of the leases a live runner
//! still holds (`extend.lua`) and the requeue of expired ones
//! (`requeue.lua`). Claims are in `claim.rs`, follow-up delivery in
//! `outbox.rs`, progress in `results.rs`: the same handle.

use super::clock::millis;
use super::{
    Burial, DeadLetter, Done, Failure, Held, Kept, OUTBOX_SWEEP, OnExpire, Queue, QueueError,
    Refusal, Report, Retrying, TopicKeys, attempt, outbox, results, scripts,
};

/// The runner's side of the job path ([`Queue::pipeline`]).
#[derive(Clone, Copy)]
pub struct Pipeline<'q> {
    pub(crate) q: &'q Queue,
}

impl Queue {
    /// The runner's side of the job path: claims, acks, retries, burials,
    /// releases, follow-up delivery, progress.
    pub fn pipeline(&self) -> Pipeline<'_> {
        Pipeline { q: self }
    }
}

impl Pipeline<'_> {
    /// Record the progress of running attempts; reports of attempts that no
    /// longer hold their job's lease are dropped. Answers how many were kept.
    pub async fn progress(self, keys: &TopicKeys, reports: &[Report]) -> Result<u64, QueueError> {
        let mut inv = scripts::PROGRESS.on(keys);
        inv.arg(&keys.events);
        for r in reports {
            let json = serde_json::to_string(&r.progress).expect("progress serializes");
            inv.arg(&r.id).arg(r.progress.attempt).arg(json);
        }
        Ok(inv.invoke_async(&mut self.q.conn.clone()).await?)
    }

    /// Extend the leases of `held` (id, attempt: attempts this runner still
    /// runs or commits) to `until_ms`, never shortening one. Answers the ids
    /// whose lease is gone or owned by another attempt: nothing to extend.
    pub async fn extend(
        self,
        keys: &TopicKeys,
        held: &[(String, u32)],
        until_ms: u64,
    ) -> Result<Vec<String>, QueueError> {
        let mut inv = scripts::EXTEND.on(keys);
        inv.arg(until_ms);
        for (id, attempt) in held {
            inv.arg(id).arg(*attempt);
        }
        Ok(inv.invoke_async(&mut self.q.conn.clone()).await?)
    }
}

impl Pipeline<'_> {
    /// Delete finished jobs, parking their follow-ups in the topic's outbox in
    /// the same step. Returns the jobs left alone and why (a newer attempt owns
    /// them, or they are gone); their follow-ups are dropped with them.
    /// Deliver the parked follow-ups afterwards with [`Pipeline::deliver`].
    /// On a topic that keeps results (`kept.results`), each job's `end` is
    /// kept that long, with its logs, and announced to its waiters.
    pub async fn ack(
        self,
        keys: &TopicKeys,
        done: &[Done],
        now_ms: u64,
        kept: Kept,
    ) -> Result<Vec<Refusal>, QueueError> {
        let keep = kept.results;
        let mut inv = scripts::ACK.on(keys);
        if keep.is_some() {
            for d in done {
                inv.key(keys.result(&d.id));
            }
        }
        inv.arg(now_ms + millis(OUTBOX_SWEEP))
            .arg(results::keep_ms(keep))
            .arg(&keys.events);
        // an ack with no follow-ups and no end to keep sends two arguments a
        // job, not five: each costs Redis and Lua a string
        let plain = |d: &Done| {
            d.follow_ups.is_empty()
                && d.notice.is_none()
                && d.flows.is_empty()
                && (d.end.is_none() || keep.is_none())
        };
        if done.iter().all(plain) {
            inv.arg(2).arg(now_ms).arg(kept.logs);
            for d in done {
                inv.arg(&d.id).arg(d.attempt);
            }
            return attempt::refusals(self.q.invoke_durable(&inv).await?);
        }
        inv.arg(5).arg(now_ms).arg(kept.logs);
        for d in done {
            inv.arg(&d.id).arg(d.attempt);
            if d.follow_ups.is_empty() && d.notice.is_none() && d.flows.is_empty() {
                inv.arg("");
            } else {
                let notices = d.notice.as_slice();
                inv.arg(outbox::encode_full(&d.follow_ups, notices, &d.flows));
            }
            match (&d.end, keep) {
                (Some(end), Some(_)) => inv.arg(end.encode()).arg(&d.logs),
                _ => inv.arg("").arg(""),
            };
        }
        attempt::refusals(self.q.invoke_durable(&inv).await?)
    }

    /// Schedule the next attempts of `failed`, each keeping its story and
    /// its attempt's logs (up to `kept.logs` bytes a job); a topic that keeps
    /// results (`kept.results`) tells each failure to the job's waiters.
    pub async fn retry(
        self,
        keys: &TopicKeys,
        failed: &[Retrying],
        kept: Kept,
    ) -> Result<Vec<Refusal>, QueueError> {
        let mut inv = scripts::RETRY.on(keys);
        self.q.wake_args(&mut inv, keys);
        let announce = kept.results.is_some();
        inv.arg(if announce { keys.events.as_str() } else { "" })
            .arg(kept.logs);
        for f in failed {
            inv.arg(&f.id)
                .arg(f.attempt)
                .arg(f.next_due_ms)
                .arg(f.failure.encode())
                .arg(&f.logs);
        }
        attempt::refusals(self.q.invoke_durable(&inv).await?)
    }

    /// Dead-letter jobs, each keeping its story and logs. Enforces
    /// `retention`. Returns the jobs left alone, and why. On a topic that
    /// keeps results (`kept.results`), each job's `end` is kept that long and
    /// announced to its waiters.
    pub async fn bury(
        self,
        keys: &TopicKeys,
        dead: &[Burial],
        retention: DeadLetter,
        now_ms: u64,
        kept: Kept,
    ) -> Result<Vec<Refusal>, QueueError> {
        let keep = kept.results;
        let mut inv = scripts::BURY.on(keys);
        if keep.is_some() {
            for d in dead {
                inv.key(keys.result(&d.id));
            }
        }
        let oldest = now_ms.saturating_sub(millis(retention.max_age));
        inv.arg(now_ms)
            .arg(retention.keep)
            .arg(oldest)
            .arg(results::keep_ms(keep))
            .arg(&keys.events)
            .arg(now_ms + millis(OUTBOX_SWEEP))
            .arg(kept.logs);
        for d in dead {
            let json = serde_json::to_string(&d.info).expect("dead info serializes");
            inv.arg(&d.id).arg(d.attempt).arg(json);
            match (&d.end, keep) {
                (Some(end), Some(_)) => inv.arg(end.encode()),
                _ => inv.arg(""),
            };
            match &d.notice {
                Some(n) => inv.arg(outbox::encode_entry(&[], std::slice::from_ref(n))),
                None => inv.arg(""),
            };
            inv.arg(match d.expired {
                None => "",
                Some(OnExpire::Dead) => "x",
                Some(OnExpire::Drop) => "d",
            })
            .arg(&d.logs);
        }
        attempt::refusals(self.q.invoke_durable(&inv).await?)
    }

    /// Return up to `limit` jobs whose lease ended before `now_ms` to pending.
    pub async fn requeue_expired(
        self,
        keys: &TopicKeys,
        now_ms: u64,
        limit: usize,
    ) -> Result<u64, QueueError> {
        let failure = Failure {
            error: "lease expired: the runner stopped or lost Redis before finishing the attempt"
                .into(),
            handler: None,
            at: now_ms,
            attempts: Vec::new(),
        };
        let mut inv = scripts::REQUEUE.on(keys);
        self.q.wake_args(&mut inv, keys);
        inv.arg(now_ms).arg(limit).arg(failure.encode());
        Ok(inv.invoke_async(&mut self.q.conn.clone()).await?)
    }

    /// Give back leased jobs without counting their attempt.
    pub async fn release(
        self,
        keys: &TopicKeys,
        held: &[Held],
        now_ms: u64,
    ) -> Result<Vec<Refusal>, QueueError> {
        let mut inv = scripts::RELEASE.on(keys);
        self.q.wake_args(&mut inv, keys);
        inv.arg(now_ms);
        for h in held {
            inv.arg(&h.id).arg(h.attempt);
        }
        attempt::refusals(inv.invoke_async(&mut self.q.conn.clone()).await?)
    }
}
