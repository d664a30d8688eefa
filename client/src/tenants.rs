//! Tenant keys: a job's key (a customer, a tenant, a partition) and, on a
//! topic with fairness, keys taking turns (`claim_fair.lua`: each job tagged
//! by start-time fair queueing, by jobs or by measured CPU, per-key weights, one
//! sorted set for all keys), per-key limits
//! (jobs at once, a rate) and pausing one key, as the [`Tenants`] handle.
//! Where the state lives: [`crate::keys::TopicKeys::fair`].

use redis::Value;

use super::reply::{number, string};
use super::{Queue, QueueError, RateLimit, TopicKeys, check_key, scripts};

/// What a key is charged per job when keys take turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Share {
    /// One per job: keys start jobs in turn.
    #[default]
    Jobs,
    /// What its attempts burned (CPU µs, metered): keys get equal CPU.
    Cpu,
}

impl Share {
    fn as_str(self) -> &'static str {
        match self {
            Share::Jobs => "jobs",
            Share::Cpu => "cpu",
        }
    }
}

/// How a topic with fairness claims: what it charges, and the limits per key.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Fairness {
    /// What a key is charged per job.
    pub share: Share,
    /// Jobs of one key running at once, across all runners (0: any).
    pub key_concurrency: u32,
    /// Starts of one key, across all runners (GCRA, as a topic's rate).
    pub key_rate: Option<RateLimit>,
}

impl Fairness {
    /// The claim script's arguments after the topic's own (`claim_fair.lua`:
    /// ARGV[7..12]).
    pub(crate) fn args(&self, inv: &mut redis::ScriptInvocation<'_>, wake: &str, topic: &str) {
        let (iv, burst) = self.key_rate.map_or((0.0, 0), |r| (r.interval_ms, r.burst));
        inv.arg(self.share.as_str())
            .arg(self.key_concurrency)
            .arg(iv)
            .arg(burst)
            .arg(wake)
            .arg(topic);
    }
}

/// One key as `stats --by-key` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyStats {
    /// The key ('' for jobs without one).
    pub key: String,
    /// Jobs due and waiting their key's turn.
    pub queued: u64,
    /// Jobs running.
    pub running: u64,
    /// CPU its attempts burned over the last minute (µs).
    pub cpu_us: u64,
    /// Paused by an operator.
    pub paused: bool,
    /// Its weight (1 unless set).
    pub weight: u32,
}

/// A topic's keys: the top ones and the totals.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeysStats {
    /// Jobs due and queued across all keys.
    pub queued: u64,
    /// Jobs of the topic running.
    pub running: u64,
    /// CPU burned over the last minute across all keys (µs).
    pub cpu_us: u64,
    /// Keys with jobs queued.
    pub keys_with_jobs: u64,
    /// The top keys by CPU of the last minute and by jobs queued (and the
    /// paused ones), most jobs queued first.
    pub top: Vec<KeyStats>,
}

/// The largest weight a key may have.
pub const MAX_WEIGHT: u32 = 10_000;

/// A topic's tenant keys ([`Queue::tenants`]).
#[derive(Clone, Copy)]
pub struct Tenants<'q> {
    pub(crate) q: &'q Queue,
}

impl Tenants<'_> {
    /// Pause (`true`) or resume key `key` of a topic: whether this changed it.
    pub async fn pause(self, keys: &TopicKeys, key: &str, pause: bool) -> Result<bool, QueueError> {
        check_key(key).map_err(QueueError::Invalid)?;
        let changed: i64 = scripts::KEY_PAUSE
            .on(keys)
            .arg(key)
            .arg(if pause { "1" } else { "0" })
            .invoke_async(&mut self.q.conn.clone())
            .await?;
        Ok(changed == 1)
    }

    /// Set key `key`'s weight (1 to [`MAX_WEIGHT`]; 1 is the default): a key
    /// of weight 3 gets three times the share of a key of weight 1.
    pub async fn set_weight(
        self,
        keys: &TopicKeys,
        key: &str,
        weight: u32,
    ) -> Result<(), QueueError> {
        check_key(key).map_err(QueueError::Invalid)?;
        if weight == 0 || weight > MAX_WEIGHT {
            return Err(QueueError::Invalid(format!(
                "weight {weight} is not 1 to {MAX_WEIGHT}"
            )));
        }
        let weights = format!("{}:weight", keys.fair);
        let mut conn = self.q.conn.clone();
        if weight == 1 {
            let _: i64 = redis::cmd("HDEL")
                .arg(&weights)
                .arg(key)
                .query_async(&mut conn)
                .await?;
        } else {
            let _: i64 = redis::cmd("HSET")
                .arg(&weights)
                .arg(key)
                .arg(weight)
                .query_async(&mut conn)
                .await?;
        }
        Ok(())
    }

    /// Add what the attempts of each key burned: (key, jobs, CPU µs).
    pub async fn charge(
        self,
        keys: &TopicKeys,
        now_ms: u64,
        charges: &[(String, u64, u64)],
    ) -> Result<(), QueueError> {
        if charges.is_empty() {
            return Ok(());
        }
        let mut inv = scripts::KEY_CHARGE.on(keys);
        inv.arg(now_ms);
        for (key, jobs, cpu_us) in charges {
            inv.arg(key).arg(jobs).arg(cpu_us);
        }
        let _: Value = inv.invoke_async(&mut self.q.conn.clone()).await?;
        Ok(())
    }

    /// The top `top` keys by CPU of the last minute and by jobs queued, with
    /// the totals.
    pub async fn stats(
        self,
        keys: &TopicKeys,
        now_ms: u64,
        top: usize,
    ) -> Result<KeysStats, QueueError> {
        let reply: Vec<Value> = scripts::KEY_STATS
            .on(keys)
            .arg(now_ms)
            .arg(top.max(1))
            .invoke_async(&mut self.q.conn.clone())
            .await?;
        let bad = || QueueError::Protocol(format!("key stats answered {} values", reply.len()));
        let (totals, rest) = reply.split_at_checked(4).ok_or_else(bad)?;
        let mut out = KeysStats {
            queued: number(&totals[0])?,
            running: number(&totals[1])?,
            cpu_us: number(&totals[2])?,
            keys_with_jobs: number(&totals[3])?,
            top: Vec::with_capacity(rest.len() / 6),
        };
        for k in rest.chunks(6) {
            let [key, queued, running, cpu, paused, weight] = k else {
                return Err(bad());
            };
            out.top.push(KeyStats {
                key: string(key)?,
                queued: number(queued)?,
                running: number(running)?,
                cpu_us: number(cpu)?,
                paused: number(paused)? == 1,
                weight: u32::try_from(number(weight)?).unwrap_or(1),
            });
        }
        out.top.sort_by(|a, b| {
            b.queued
                .cmp(&a.queued)
                .then(b.cpu_us.cmp(&a.cpu_us))
                .then(a.key.cmp(&b.key))
        });
        Ok(out)
    }

    /// A topic served without fairness (again): move the jobs queued per
    /// key back to its time index. Nothing to do costs one call.
    pub async fn fairness_off(self, keys: &TopicKeys) -> Result<(), QueueError> {
        for _ in 0..1000 {
            let left: u64 = scripts::FAIR_OFF
                .on(keys)
                .arg(1000)
                .invoke_async(&mut self.q.conn.clone())
                .await?;
            if left == 0 {
                return Ok(());
            }
        }
        Err(QueueError::Protocol(format!(
            "{}: jobs queued per key did not all move back to the time index",
            keys.topic
        )))
    }
}

impl Queue {
    /// A topic's tenant keys: pause, weights, what they burned, stats.
    pub fn tenants(&self) -> Tenants<'_> {
        Tenants { q: self }
    }
}
