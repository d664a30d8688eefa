//! Each topic's history by the minute, for charts over the last hours
//! without Prometheus: what every runner did (acks, failures, dead letters,
//! CPU, starts and their lateness as a histogram, so percentiles hold
//! across runners), added by each runner with its heartbeat, and once a
//! minute the topic's counts (scheduled, ready, running, dead), taken by
//! whichever runner claims that minute first. One hash per topic and hour,
//! `<ns>:{:minutes}:<topic>:<hour s>`, fields `<minute>:<metric>` (minute
//! 0 to 59 of the hour), kept [`MINUTES_KEEP`]; all in one slot of their
//! own, so each write is one pipeline.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::Value;
use serde::Serialize;

use super::{HOUR_MS, Queue, QueueError, Runners, TopicStats};

/// How long a minute is kept.
pub const MINUTES_KEEP: Duration = Duration::from_secs(25 * 3600);

/// The lateness histogram's upper bounds (ms), the last bucket unbounded.
pub const LATE_BOUNDS: [u64; 13] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];

/// The lateness bucket of `late_ms`.
pub fn late_bucket(late_ms: u64) -> usize {
    LATE_BOUNDS
        .iter()
        .position(|b| late_ms <= *b)
        .unwrap_or(LATE_BOUNDS.len())
}

/// What runners add for a topic over a few seconds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MinuteSums {
    /// Attempts acked.
    pub acked: u64,
    /// Attempts that failed (retried or dead-lettered).
    pub failed: u64,
    /// Jobs dead-lettered.
    pub dead: u64,
    /// CPU of its attempts, µs.
    pub cpu_us: u64,
    /// Attempts started, per lateness bucket ([`LATE_BOUNDS`]).
    pub late: [u64; 14],
}

impl MinuteSums {
    fn fields(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        [
            ("d", self.acked),
            ("f", self.failed),
            ("x", self.dead),
            ("c", self.cpu_us),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .chain(
            self.late
                .iter()
                .enumerate()
                .map(|(i, n)| (format!("l{i}"), *n)),
        )
        .filter(|(_, v)| *v > 0)
    }
}

/// One minute of a topic, as charts read it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Minute {
    /// The minute's start (ms since the Unix epoch).
    pub at_ms: u64,
    /// Attempts acked.
    pub acked: u64,
    /// Attempts that failed (retried or dead-lettered).
    pub failed: u64,
    /// Jobs dead-lettered.
    pub dead: u64,
    /// CPU of its attempts, µs.
    pub cpu_us: u64,
    /// Attempts started.
    pub started: u64,
    /// Lateness of its starts (due → start): the median and the 99th
    /// percentile, as the upper bound of their histogram bucket (ms).
    pub late_p50_ms: Option<u64>,
    /// The 99th percentile.
    pub late_p99_ms: Option<u64>,
    /// The counts a runner took in this minute, if one did.
    pub counts: Option<MinuteCounts>,
}

/// A topic's counts as taken once in a minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MinuteCounts {
    /// Waiting for a later time.
    pub scheduled: u64,
    /// Due, waiting for a slot.
    pub ready: u64,
    /// Running.
    pub running: u64,
    /// Dead letters.
    pub dead: u64,
}

fn key(namespace: &str, topic: &str, hour_ms: u64) -> String {
    super::keys::minutes_key(namespace, topic, hour_ms / 1000)
}

/// The minute (0 to 59) of the hour holding `at_ms`, and that hour's start.
fn minute_of(at_ms: u64) -> (u64, u64) {
    let hour = at_ms - at_ms % HOUR_MS;
    (hour, (at_ms - hour) / 60_000)
}

/// The bound of the `q` quantile's bucket in a lateness histogram.
fn quantile(late: &[u64; 14], q: f64) -> Option<u64> {
    let total: u64 = late.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in late.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(LATE_BOUNDS.get(i).copied().unwrap_or(u64::MAX));
        }
    }
    None
}

impl Runners<'_> {
    /// Add `sums` per topic to the minute holding `now_ms` (one pipeline;
    /// not idempotent: an answer lost may have counted).
    pub async fn add_minutes(
        self,
        sums: &BTreeMap<String, MinuteSums>,
        now_ms: u64,
    ) -> Result<(), QueueError> {
        let (hour, minute) = minute_of(now_ms);
        let until_s = (hour + HOUR_MS) / 1000 + MINUTES_KEEP.as_secs();
        let mut pipe = redis::pipe();
        let mut any = false;
        for (topic, s) in sums {
            let key = key(&self.q.namespace, topic, hour);
            let mut fields = s.fields().peekable();
            if fields.peek().is_none() {
                continue;
            }
            for (field, value) in fields {
                pipe.hincr(&key, format!("{minute}:{field}"), value)
                    .ignore();
            }
            pipe.cmd("EXPIREAT").arg(&key).arg(until_s).ignore();
            any = true;
        }
        if any {
            let _: () = pipe.query_async(&mut self.q.conn.clone()).await?;
        }
        Ok(())
    }

    /// Which of `topics` this runner (`runner`) takes the counts of in the
    /// minute holding `now_ms`: those no other runner claimed first.
    pub async fn claim_counts(
        self,
        topics: &[String],
        runner: &str,
        now_ms: u64,
    ) -> Result<Vec<String>, QueueError> {
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        let claims = super::keys::minute_claims(&self.q.namespace, now_ms / 60_000);
        let mut pipe = redis::pipe();
        for t in topics {
            pipe.hset_nx(&claims, t, runner);
        }
        pipe.cmd("EXPIRE").arg(&claims).arg(180).ignore();
        let won: Vec<bool> = pipe.query_async(&mut self.q.conn.clone()).await?;
        Ok(topics
            .iter()
            .zip(won)
            .filter(|(_, won)| *won)
            .map(|(t, _)| t.clone())
            .collect())
    }

    /// Keep each topic's `counts` as its minute's (holding `now_ms`).
    pub async fn add_counts(
        self,
        counts: &[(String, TopicStats)],
        now_ms: u64,
    ) -> Result<(), QueueError> {
        if counts.is_empty() {
            return Ok(());
        }
        let (hour, minute) = minute_of(now_ms);
        let until_s = (hour + HOUR_MS) / 1000 + MINUTES_KEEP.as_secs();
        let mut pipe = redis::pipe();
        for (topic, c) in counts {
            let key = key(&self.q.namespace, topic, hour);
            pipe.cmd("HSET")
                .arg(&key)
                .arg(format!("{minute}:w"))
                .arg(c.scheduled)
                .arg(format!("{minute}:q"))
                .arg(c.ready)
                .arg(format!("{minute}:r"))
                .arg(c.running)
                .arg(format!("{minute}:k"))
                .arg(c.dead)
                .ignore();
            pipe.cmd("EXPIREAT").arg(&key).arg(until_s).ignore();
        }
        let _: () = pipe.query_async(&mut self.q.conn.clone()).await?;
        Ok(())
    }
}

impl Queue {
    /// The minutes of `topic` from the one holding `since_ms` to the one
    /// holding `now_ms` (at most [`MINUTES_KEEP`] back) that hold anything,
    /// oldest first.
    pub async fn minutes(
        &self,
        topic: &str,
        since_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<Minute>, QueueError> {
        let oldest = now_ms.saturating_sub(MINUTES_KEEP.as_millis() as u64);
        let first = minute_of(since_ms.max(oldest)).0;
        let hours: Vec<u64> = (first..=minute_of(now_ms).0)
            .step_by(HOUR_MS as usize)
            .collect();
        let mut pipe = redis::pipe();
        for hour in &hours {
            pipe.hgetall(key(&self.namespace, topic, *hour));
        }
        let replies: Vec<Value> = pipe.query_async(&mut self.conn.clone()).await?;
        let mut out: BTreeMap<u64, (Minute, [u64; 14])> = BTreeMap::new();
        for (hour, reply) in hours.iter().zip(replies) {
            let fields: BTreeMap<String, u64> = redis::from_redis_value(reply)
                .map_err(|e| QueueError::Protocol(format!("minutes of {topic}: {e}")))?;
            for (field, value) in fields {
                let Some((m, metric)) = field.split_once(':') else {
                    continue;
                };
                let Ok(m) = m.parse::<u64>() else { continue };
                let at_ms = hour + m * 60_000;
                if at_ms + 60_000 <= since_ms || at_ms > now_ms {
                    continue;
                }
                let (minute, late) = out.entry(at_ms).or_insert_with(|| {
                    let minute = Minute {
                        at_ms,
                        ..Minute::default()
                    };
                    (minute, [0; 14])
                });
                match metric {
                    "d" => minute.acked = value,
                    "f" => minute.failed = value,
                    "x" => minute.dead = value,
                    "c" => minute.cpu_us = value,
                    "w" => counts(minute).scheduled = value,
                    "q" => counts(minute).ready = value,
                    "r" => counts(minute).running = value,
                    "k" => counts(minute).dead = value,
                    l if l.starts_with('l') => {
                        if let Some(b) = l[1..].parse::<usize>().ok().filter(|b| *b < 14) {
                            late[b] = value;
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(out
            .into_values()
            .map(|(mut minute, late)| {
                minute.started = late.iter().sum();
                minute.late_p50_ms = quantile(&late, 0.5);
                minute.late_p99_ms = quantile(&late, 0.99);
                minute
            })
            .collect())
    }
}

/// A minute's counts, made on first use.
fn counts(minute: &mut Minute) -> &mut MinuteCounts {
    minute.counts.get_or_insert_with(MinuteCounts::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_buckets_and_their_quantiles() {
        assert_eq!(late_bucket(0), 0);
        assert_eq!(late_bucket(1), 0);
        assert_eq!(late_bucket(3), 2);
        assert_eq!(late_bucket(10_000), 12);
        assert_eq!(late_bucket(10_001), 13);
        let mut late = [0; 14];
        late[1] = 98; // 98 starts within 2 ms
        late[9] = 2; // 2 within a second
        assert_eq!(quantile(&late, 0.5), Some(2));
        assert_eq!(quantile(&late, 0.99), Some(1000));
        assert_eq!(quantile(&[0; 14], 0.5), None);
        assert_eq!(minute_of(3 * HOUR_MS + 125_000), (3 * HOUR_MS, 2));
    }
}
