//! Claiming due jobs (`claim.lua`): leases, attempt counters, and a
//! topic's rate limit shared by every runner (GCRA).

use redis::Value;

use super::record::split_stored;
use super::reply::{bytes, number, optional_string, string};
use super::{
    Claimed, ClaimedJob, CorruptRecord, Failure, Fairness, Held, Journal, Pipeline, QueueError,
    RateLimit, Record, TopicKeys, scripts,
};

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
        let stride = if fair.is_some() { 5 } else { 4 };
        let (reply, confirmed): (Vec<Value>, _) = self.q.invoke_then_confirm(&inv).await?;
        let (head, rest) = reply
            .split_first()
            .ok_or_else(|| QueueError::Protocol("empty claim reply".into()))?;
        let (next_due_ms, paused) = match head {
            Value::Int(-2) => (None, true),
            Value::Int(_) => (None, false),
            v => (Some(number(v)?), false),
        };
        // what jobs have beyond the four entries each: one last entry, when any has it
        let (rest, extra) = match rest.len() % stride {
            1 => {
                let (last, jobs) = rest.split_last().expect("one entry at least");
                (jobs, Some(last))
            }
            _ => (rest, None),
        };
        let mut jobs = Vec::with_capacity(rest.len() / stride);
        for job in rest.chunks(stride) {
            let (job, key) = match job {
                [job @ .., key] if stride == 5 => (job, Some(string(key)?)),
                job => (job, None),
            };
            let [id, due, attempt, record] = job else {
                return Err(QueueError::Protocol(format!("claim answered {job:?}")));
            };
            jobs.push(ClaimedJob {
                id: string(id)?,
                due_at_ms: number(due)?,
                attempt: u32::try_from(number(attempt)?).unwrap_or(u32::MAX),
                record: stored_record(record)?,
                last_failure: None,
                account: None,
                key,
                journal: None,
                expires_at_ms: None,
            });
        }
        if let Some(extra) = extra {
            columns(extra, &mut jobs)?;
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

/// The record in a job's stored value, as a claim answers it: the script
/// leaves layout 3's due time in front (`record::split_stored`) for the
/// runner to skip, rather than copy each value in Redis to cut it off.
fn stored_record(v: &Value) -> Result<Result<Record, CorruptRecord>, QueueError> {
    Ok(match v {
        Value::BulkString(stored) => Record::decode(split_stored(stored).1),
        v => Record::decode(&bytes(v)?),
    })
}

/// The claim's last entry, when a claimed job has a last failure, an account,
/// a journal or a deadline (`prelude.lua`: claim_cols_told): tag, pairs, ...
/// where pairs are job number (1-based), value, ...; each value into its job.
fn columns(entry: &Value, jobs: &mut [ClaimedJob]) -> Result<(), QueueError> {
    let bad = || QueueError::Protocol(format!("claim answered {entry:?} after its jobs"));
    let Value::Array(tail) = entry else {
        return Err(bad());
    };
    for col in tail.chunks(2) {
        let [tag, Value::Array(pairs)] = col else {
            return Err(bad());
        };
        let tag = string(tag)?;
        for pair in pairs.chunks(2) {
            let [k, value] = pair else {
                return Err(bad());
            };
            let job = usize::try_from(number(k)?)
                .ok()
                .and_then(|k| k.checked_sub(1))
                .and_then(|i| jobs.get_mut(i))
                .ok_or_else(bad)?;
            match tag.as_str() {
                "f" => job.last_failure = optional_string(value)?.map(Failure::parse),
                "a" => job.account = optional_string(value)?,
                "j" => job.journal = Some(Journal::from_reply(value).map_err(|e| e.to_string())),
                "d" => job.expires_at_ms = Some(number(value)?),
                _ => return Err(bad()),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str) -> ClaimedJob {
        ClaimedJob {
            id: id.into(),
            due_at_ms: 0,
            attempt: 1,
            record: Record::decode(b""),
            last_failure: None,
            account: None,
            key: None,
            journal: None,
            expires_at_ms: None,
        }
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn the_columns_after_the_jobs_reach_the_jobs_they_name() {
        let mut jobs = vec![job("a"), job("b"), job("c")];
        let tail = Value::Array(vec![
            bulk("a"),
            Value::Array(vec![Value::Int(3), bulk("acme")]),
            bulk("d"),
            Value::Array(vec![
                Value::Int(1),
                bulk("1795922205848"),
                Value::Int(3),
                bulk("1795922205900"),
            ]),
        ]);
        columns(&tail, &mut jobs).unwrap();
        let seen: Vec<_> = jobs
            .iter()
            .map(|j| (j.account.as_deref(), j.expires_at_ms))
            .collect();
        assert_eq!(
            seen,
            [
                (None, Some(1_795_922_205_848)),
                (None, None),
                (Some("acme"), Some(1_795_922_205_900))
            ]
        );
    }

    #[test]
    fn a_column_naming_no_claimed_job_or_an_unknown_tag_is_refused() {
        for tail in [
            vec![bulk("a"), Value::Array(vec![Value::Int(4), bulk("x")])],
            vec![bulk("a"), Value::Array(vec![Value::Int(0), bulk("x")])],
            vec![bulk("z"), Value::Array(vec![Value::Int(1), bulk("x")])],
            vec![bulk("a"), Value::Array(vec![Value::Int(1)])],
            vec![bulk("a")],
        ] {
            let mut jobs = vec![job("a"), job("b"), job("c")];
            let err = columns(&Value::Array(tail.clone()), &mut jobs).unwrap_err();
            assert!(
                err.to_string().contains("after its jobs"),
                "{tail:?}: {err}"
            );
        }
    }

    #[test]
    fn a_claimed_value_of_either_layout_gives_its_record() {
        let record = Record {
            max_attempts: 3,
            enqueued_at_ms: 1_795_922_205_848,
            payload: b"\0payload".to_vec(),
            version: None,
            parent_result: None,
            trace: None,
            flow: None,
        };
        let bare = record.encode();
        let mut stored = vec![0];
        stored.extend_from_slice(&1_795_922_205_900f64.to_be_bytes());
        stored.extend_from_slice(&bare);
        for value in [bare, stored] {
            let got = stored_record(&Value::BulkString(value)).unwrap();
            assert_eq!(got.as_ref(), Ok(&record));
        }
        assert!(
            stored_record(&Value::BulkString(vec![0, 1, 2]))
                .unwrap()
                .is_err()
        );
    }
}
