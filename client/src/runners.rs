//! Runners that say they are alive: each writes what it is and does every
//! few seconds with a deadline (`heartbeat.lua`); a runner whose deadline
//! passed (SIGKILL, a lost machine) is no longer listed and is forgotten by
//! the next heartbeat of any runner. A runner that stops gracefully leaves.

use std::collections::BTreeMap;

use redis::Value;

use super::keys::RunnerKeys;
use super::{Queue, QueueError, TopicKeys, scripts};

/// What a runner reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunnerInfo {
    /// `host-pid-random`, unique per process.
    pub id: String,
    /// The machine's host name.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// The hourglass version.
    pub version: String,
    /// When it started (ms since the Unix epoch).
    pub started_at_ms: u64,
    /// When it last said so (ms).
    pub seen_at_ms: u64,
    /// The topics it serves.
    pub topics: Vec<String>,
    /// Attempts running in it now.
    pub in_flight: u64,
    /// Topic → content hash of the handler version serving it.
    pub handlers: BTreeMap<String, String>,
    /// Topic → what this runner did for it since it started.
    #[serde(default)]
    pub meters: BTreeMap<String, TopicMeter>,
    /// Versions it is told to serve (by the rollout or a pin) and does not
    /// have: a `stable` or `pinned` one means it claims nothing of the topic.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<MissingVersion>,
}

/// A handler version a runner is told to serve for a topic and lacks (its
/// handler folder never held that file, and it keeps no copy).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MissingVersion {
    /// The topic.
    pub topic: String,
    /// The version's content hash.
    pub version: String,
    /// `stable` or `pinned` (the runner claims nothing of the topic), or
    /// `canary` (the stable version serves all its attempts).
    pub role: String,
}

/// One runner's work for one topic since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopicMeter {
    /// Attempts acked.
    pub done: u64,
    /// Attempts that failed (retried or dead-lettered).
    pub failed: u64,
    /// Lateness (due → start) of its recent attempts: median, ms.
    pub late_p50_ms: Option<u64>,
    /// Lateness of its recent attempts: 99th percentile, ms.
    pub late_p99_ms: Option<u64>,
    /// CPU its attempts used, µs (from runners that meter it).
    #[serde(default)]
    pub cpu_us: u64,
    /// Peak linear memory of its recent attempts: 99th percentile, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_p99: Option<u64>,
    /// Wall time of its recent attempts, µs: a moving average over about
    /// the last 64 (what [`crate::scale::suggest`] takes). Absent from
    /// runners of 0.1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_us: Option<u64>,
}

/// What runners share beyond jobs: heartbeats, account usage, schedule cursors ([`Queue::runners`]).
#[derive(Clone, Copy)]
pub struct Runners<'q> {
    pub(crate) q: &'q Queue,
}

impl Queue {
    /// What runners share beyond jobs: heartbeats, account usage, the
    /// cursors of schedules.
    pub fn runners(&self) -> Runners<'_> {
        Runners { q: self }
    }
}

impl Runners<'_> {
    /// Say `runner` is alive until `until_ms`; returns how many runners whose
    /// time ran out were forgotten meanwhile.
    pub async fn heartbeat(self, runner: &RunnerInfo, until_ms: u64) -> Result<u64, QueueError> {
        let json = serde_json::to_string(runner).expect("runner info serializes");
        self.beat(&runner.id, runner.seen_at_ms, until_ms, &json)
            .await
    }

    /// Say runner `id` is gone (a graceful stop).
    pub async fn leave(self, id: &str, now_ms: u64) -> Result<(), QueueError> {
        self.beat(id, now_ms, now_ms, "").await.map(|_| ())
    }

    async fn beat(
        self,
        id: &str,
        now_ms: u64,
        until_ms: u64,
        json: &str,
    ) -> Result<u64, QueueError> {
        let keys = RunnerKeys::new(&self.q.namespace);
        Ok(scripts::HEARTBEAT
            .bare()
            .key(&keys.info)
            .key(&keys.alive)
            .arg(now_ms)
            .arg(until_ms)
            .arg(id)
            .arg(json)
            .invoke_async(&mut self.q.conn.clone())
            .await?)
    }

    /// The runners alive at `now_ms`, by id.
    pub async fn list(self, now_ms: u64) -> Result<Vec<RunnerInfo>, QueueError> {
        let keys = RunnerKeys::new(&self.q.namespace);
        let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&keys.alive)
            .arg(now_ms)
            .arg("+inf")
            .query_async(&mut self.q.conn.clone())
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let infos: Vec<Value> = redis::cmd("HMGET")
            .arg(&keys.info)
            .arg(&ids)
            .query_async(&mut self.q.conn.clone())
            .await?;
        let mut runners: Vec<RunnerInfo> = infos
            .iter()
            .filter_map(|v| match v {
                Value::BulkString(bytes) => serde_json::from_slice(bytes).ok(),
                _ => None,
            })
            .collect();
        runners.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(runners)
    }

    /// The last fire time schedule `name` enqueued or passed over (ms), if it ever ran.
    pub async fn schedule_cursor(
        self,
        keys: &TopicKeys,
        name: &str,
    ) -> Result<Option<u64>, QueueError> {
        let v: Option<u64> = redis::cmd("GET")
            .arg(keys.schedule(name))
            .query_async(&mut self.q.conn.clone())
            .await?;
        Ok(v)
    }

    /// Move schedule `name`'s cursor forward to `tick_ms` (never back).
    pub async fn advance_schedule(
        self,
        keys: &TopicKeys,
        name: &str,
        tick_ms: u64,
    ) -> Result<(), QueueError> {
        let _: Value = scripts::SCHEDULE_ADVANCE
            .bare()
            .key(keys.schedule(name))
            .arg(tick_ms)
            .invoke_async(&mut self.q.conn.clone())
            .await?;
        Ok(())
    }
}
