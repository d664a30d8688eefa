//! Claiming due jobs (`claim.lua`): leases, attempt counters, and a
//! topic's rate limit shared by every runner (GCRA).

use redis::Value;

use super::reply::{bytes, number, optional_string, string};
use super::{
    Claimed, ClaimedJob, Failure, Fairness, Held, Journal, Pipeline, QueueError, Record, TopicKeys,
    scripts,
};

/// A topic's rate, as the claim script enforces it (GCRA) across runners.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// The steady spacing between starts, in ms (fractional).
    pub interval_ms: f64,
    /// Starts allowed at once beyond the steady rate.
    pub burst: u32,
}

impl Pipeline<'_> {
    /// Lease up to `limit` jobs due by `now_ms` until `lease_until_ms`.
    pub async fn claim(
        self,
        keys: &TopicKeys,
        now_ms: u64,
        lease_until_ms: u64,
        limit: usize,
    ) -> Result<Claimed, QueueError> {
        self.claim_limited(keys, now_ms, lease_until_ms, limit, None)
            .await
    }

    /// [`Pipeline::claim`] under a rate shared by every runner: at most as many
    /// as `rate` allows now; `next_due_ms` is then when the rate allows the
    /// next start (if a job is due by then).
    pub async fn claim_limited(
        self,
        keys: &TopicKeys,
        now_ms: u64,
        lease_until_ms: u64,
        limit: usize,
        rate: Option<RateLimit>,
    ) -> Result<Claimed, QueueError> {
        self.claim_ahead(keys, now_ms, now_ms, lease_until_ms, limit, rate, None)
            .await
    }

    /// [`Pipeline::claim_limited`], also taking jobs due after `now_ms` up to
    /// `due_by_ms`: the caller must not start one before its `due_at_ms`.
    /// A runner claims a few milliseconds ahead so that a claim Redis (or a
    /// busy machine) is slow to answer does not make the job late. Under a
    /// rate limit nothing is taken ahead (the limit counts starts at claim
    /// time). With `fair`, keys take turns (`claim_fair.lua`) and each
    /// job's tenant key comes with it.
    #[allow(clippy::too_many_arguments)]
    pub async fn claim_ahead(
        self,
        keys: &TopicKeys,
        now_ms: u64,
        due_by_ms: u64,
        lease_until_ms: u64,
        limit: usize,
        rate: Option<RateLimit>,
        fair: Option<&Fairness>,
    ) -> Result<Claimed, QueueError> {
        let rate = rate.unwrap_or(RateLimit {
            interval_ms: 0.0,
            burst: 0,
        });
        let mut inv = match fair {
            Some(_) => scripts::CLAIM_FAIR.on(keys),
            None => scripts::CLAIM.on(keys),
        };
        inv.arg(now_ms)
            .arg(lease_until_ms)
            .arg(limit)
            .arg(rate.interval_ms)
            .arg(rate.burst)
            .arg(due_by_ms.max(now_ms));
        if let Some(fair) = fair {
            fair.args(&mut inv, &self.q.wake, &keys.topic);
        }
        let stride = if fair.is_some() { 8 } else { 7 };
        let (reply, confirmed): (Vec<Value>, _) = self.q.invoke_then_confirm(&inv).await?;
        let (head, rest) = reply
            .split_first()
            .ok_or_else(|| QueueError::Protocol("empty claim reply".into()))?;
        let (next_due_ms, paused) = match head {
            Value::Int(-2) => (None, true),
            Value::Int(_) => (None, false),
            v => (Some(number(v)?), false),
        };
        // the deadlines, when a claimed job has one: one last entry
        let (rest, deadlines) = match rest.len() % stride {
            1 => {
                let (last, jobs) = rest.split_last().expect("one entry at least");
                (jobs, deadlines_of(last)?)
            }
            _ => (rest, Vec::new()),
        };
        let mut jobs = Vec::with_capacity(rest.len() / stride);
        for job in rest.chunks(stride) {
            let (job, key) = match job {
                [job @ .., key] if stride == 8 => (job, Some(string(key)?)),
                job => (job, None),
            };
            let [id, due, attempt, record, error, account, journal] = job else {
                return Err(QueueError::Protocol(format!("claim answered {job:?}")));
            };
            jobs.push(ClaimedJob {
                id: string(id)?,
                due_at_ms: number(due)?,
                attempt: u32::try_from(number(attempt)?).unwrap_or(u32::MAX),
                record: Record::decode(&bytes(record)?),
                last_failure: optional_string(error)?.map(Failure::parse),
                account: optional_string(account)?,
                key,
                journal: match journal {
                    Value::Nil => None,
                    j => Some(Journal::from_reply(j).map_err(|e| e.to_string())),
                },
                expires_at_ms: None,
            });
        }
        for (job, at) in jobs.iter_mut().zip(deadlines) {
            job.expires_at_ms = at;
        }
        if let Err(e) = confirmed {
            // leases no replica has could vanish in a failover while the jobs
            // run: give them back (a release needs no confirming; if it fails,
            // the leases expire) and report the claim failed
            let held: Vec<Held> = jobs
                .iter()
                .map(|j| Held {
                    id: j.id.clone(),
                    attempt: j.attempt,
                })
                .collect();
            if !held.is_empty() {
                let _ = self.release(keys, &held, now_ms).await;
            }
            return Err(e);
        }
        Ok(Claimed {
            jobs,
            next_due_ms,
            paused,
        })
    }
}

/// The claim's last entry when claimed jobs have deadlines: each job's
/// deadline (ms) or nil, in the order of the jobs (`prelude.lua`:
/// deadlines_told).
fn deadlines_of(entry: &Value) -> Result<Vec<Option<u64>>, QueueError> {
    let Value::Array(items) = entry else {
        return Err(QueueError::Protocol(format!(
            "claim answered {entry:?} for its deadlines"
        )));
    };
    items
        .iter()
        .map(|at| match at {
            Value::Nil => Ok(None),
            at => number(at).map(Some),
        })
        .collect()
}
