//! Usage per account: what the attempts of jobs a producer tagged with an
//! account used, summed per hour in Redis (one hash per hour, fields
//! `ACCOUNT|METRIC`), kept [`USAGE_KEEP`]. Runners add their sums every
//! few seconds; `hourglass usage` and the API read them back.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::Value;

use super::keys::usage_key;
use super::{QueueError, Runners};

/// How long an hour's sums are kept.
pub const USAGE_KEEP: Duration = Duration::from_secs(35 * 86_400);

/// One hour, in ms.
pub const HOUR_MS: u64 = 3_600_000;

/// What the attempts of one account's jobs used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AccountUsage {
    /// Attempts that ran (a handler was called).
    pub attempts: u64,
    /// CPU their instances used, µs.
    pub cpu_us: u64,
    /// Their wall time, µs.
    pub wall_us: u64,
    /// Outbound HTTP request body bytes.
    pub bytes_out: u64,
    /// Outbound HTTP response body bytes.
    pub bytes_in: u64,
}

impl AccountUsage {
    /// Add `other` to these sums.
    pub fn add(&mut self, other: &AccountUsage) {
        self.attempts += other.attempts;
        self.cpu_us += other.cpu_us;
        self.wall_us += other.wall_us;
        self.bytes_out += other.bytes_out;
        self.bytes_in += other.bytes_in;
    }

    fn fields(&self) -> [(&'static str, u64); 5] {
        [
            ("attempts", self.attempts),
            ("cpu_us", self.cpu_us),
            ("wall_us", self.wall_us),
            ("bytes_out", self.bytes_out),
            ("bytes_in", self.bytes_in),
        ]
    }

    fn set(&mut self, metric: &str, value: u64) {
        match metric {
            "attempts" => self.attempts = value,
            "cpu_us" => self.cpu_us = value,
            "wall_us" => self.wall_us = value,
            "bytes_out" => self.bytes_out = value,
            "bytes_in" => self.bytes_in = value,
            _ => {}
        }
    }
}

/// Sums keyed by (the hour's start in ms, account).
pub type HourlyUsage = BTreeMap<(u64, String), AccountUsage>;

/// The start (ms) of the hour holding `at_ms`.
pub fn hour_of(at_ms: u64) -> u64 {
    at_ms - at_ms % HOUR_MS
}

/// The sums of each account over every hour of `usage`.
pub fn totals(usage: &HourlyUsage) -> BTreeMap<&str, AccountUsage> {
    let mut totals: BTreeMap<&str, AccountUsage> = BTreeMap::new();
    for ((_, account), u) in usage {
        totals.entry(account).or_default().add(u);
    }
    totals
}

impl Runners<'_> {
    /// Add `sums` to the hours and accounts they name (one round trip).
    /// Not idempotent: a call whose answer is lost may have counted.
    pub async fn add_usage(self, sums: &HourlyUsage) -> Result<(), QueueError> {
        if sums.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        let mut hours = Vec::new();
        for ((hour, account), usage) in sums {
            let key = usage_key(&self.q.namespace, hour / 1000);
            for (metric, value) in usage.fields() {
                if value > 0 {
                    pipe.hincr(&key, format!("{account}|{metric}"), value)
                        .ignore();
                }
            }
            if hours.last() != Some(hour) {
                hours.push(*hour);
                let until_s = (hour + HOUR_MS) / 1000 + USAGE_KEEP.as_secs();
                pipe.cmd("EXPIREAT").arg(&key).arg(until_s).ignore();
            }
        }
        let _: () = pipe.query_async(&mut self.q.conn.clone()).await?;
        Ok(())
    }

    /// The sums of every hour from the one holding `since_ms` to the one
    /// holding `now_ms` (at most [`USAGE_KEEP`] back), per hour and account
    /// (only `account`'s, if given).
    pub async fn usage(
        self,
        since_ms: u64,
        now_ms: u64,
        account: Option<&str>,
    ) -> Result<HourlyUsage, QueueError> {
        let oldest = now_ms.saturating_sub(USAGE_KEEP.as_millis() as u64);
        let hours: Vec<u64> = (hour_of(since_ms.max(oldest))..=hour_of(now_ms))
            .step_by(HOUR_MS as usize)
            .collect();
        let mut pipe = redis::pipe();
        for hour in &hours {
            pipe.hgetall(usage_key(&self.q.namespace, hour / 1000));
        }
        let replies: Vec<Value> = pipe.query_async(&mut self.q.conn.clone()).await?;
        let mut out = HourlyUsage::new();
        for (hour, reply) in hours.iter().zip(replies) {
            let fields: BTreeMap<String, u64> = redis::from_redis_value(reply)
                .map_err(|e| QueueError::Protocol(format!("usage hour {hour}: {e}")))?;
            for (field, value) in fields {
                let Some((name, metric)) = field.rsplit_once('|') else {
                    continue;
                };
                if account.is_some_and(|a| a != name) {
                    continue;
                }
                out.entry((*hour, name.to_owned()))
                    .or_default()
                    .set(metric, value);
            }
        }
        Ok(out)
    }
}
