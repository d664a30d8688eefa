//! One `[[topic]]` as the runner uses it ([`TopicConfig`], with the
//! `[defaults]` applied) and its optional policies: instance reuse
//! ([`Reuse`]), kept results ([`Results`]), rollouts ([`RolloutPolicy`]) and
//! the start rate ([`Rate`]); and what a topic may be called
//! ([`check_topic_name`]).

use std::path::PathBuf;
use std::time::Duration;

use super::{Backoff, DeadLetter, Grants, HttpLimits};

/// One `[[topic]]`, with the `[defaults]` applied.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    /// The topic's name, as producers use it.
    pub name: String,
    /// The handler component's path.
    pub handler: PathBuf,
    /// Higher is served first when several topics have due jobs.
    pub priority: i64,
    /// Jobs of this topic in flight in this process.
    pub concurrency: u32,
    /// Wall-clock limit of one attempt; the guest is stopped when it runs out.
    pub timeout: Duration,
    /// CPU limit of one attempt, if any; the guest is stopped (within an
    /// epoch tick) once it has used this much.
    pub cpu: Option<Duration>,
    /// Attempts before dead-lettering, for jobs that do not set their own.
    pub max_attempts: u32,
    /// Delay between attempts when the handler does not choose one.
    pub backoff: Backoff,
    /// Linear memory limit of one instance, in bytes.
    pub memory: u64,
    /// Dead-letter retention.
    pub dead_letter: DeadLetter,
    /// Topics this topic's handler may enqueue follow-up jobs to.
    pub may_enqueue: Vec<String>,
    /// What the handler may reach beyond its sandbox; nothing by default.
    pub grants: Grants,
    /// Limits on the handler's outbound HTTP requests.
    pub http: HttpLimits,
    /// Share of capacity among topics of the same priority (`None`: strict
    /// file order inside the class unless another topic of it has a weight,
    /// then 1).
    pub weight: Option<u32>,
    /// How many attempts may start per period, across every runner.
    pub rate: Option<Rate>,
    /// Tenant keys take turns (and per-key limits apply): `fairness`,
    /// `key_concurrency`, `key_rate`. `None`: jobs start in due order.
    pub fairness: Option<hourglass_client::Fairness>,
    /// How a new handler version is rolled out; `None`: it replaces the
    /// old one at once.
    pub rollout: Option<RolloutPolicy>,
    /// How long each job's end (state, result, reason) is kept for waiters;
    /// `None`: nothing is kept and nobody can wait.
    pub results: Option<Results>,
    /// Whether an instance serves more than one job (giving up per-job
    /// isolation for speed); `None`: a fresh instance per attempt.
    pub reuse: Option<Reuse>,
    /// What the job's journal records, and its limits.
    pub journal: JournalPolicy,
    /// `expire_after`: a job not started this long after its enqueue (that
    /// has no deadline of its own) expires. `None`: only jobs given a
    /// deadline expire.
    pub expire_after: Option<Duration>,
    /// `on_expire`: what becomes of a job that expired.
    pub on_expire: hourglass_client::OnExpire,
    /// `batch`: the handler takes up to `max` due jobs in one call
    /// (`handle-batch`); `None`: one job a call.
    pub batch: Option<BatchPolicy>,
    /// `logs`: the most bytes of what its handler logged each job keeps
    /// (0: none; 64 KiB unless set).
    pub logs: u64,
}

impl TopicConfig {
    /// What the topic keeps of its jobs beyond their state: ends, logs.
    pub fn kept(&self) -> hourglass_client::Kept {
        hourglass_client::Kept {
            results: self.results.map(|r| r.keep),
            logs: self.logs,
        }
    }
}

/// `batch = { max = 100, wait = "50ms" }`: up to `max` due jobs a call,
/// waiting up to `wait` after the first is due for more to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPolicy {
    /// Most jobs in one call (1 to 10,000).
    pub max: u32,
    /// How long the first due job may wait for others (0: none).
    pub wait: Duration,
    /// `key = true`: each call's jobs share a tenant key (needs fairness,
    /// whose claims bring each job's key).
    pub by_key: bool,
}

/// `journal`, `journal_max`, `on_divergence`: whether the host records
/// what the handler's sandbox did (`journal = "effects"`: outbound HTTP,
/// clocks, random bytes, follow-ups) to replay it on the next attempt, or
/// only what a durable handler records itself (`"steps"`, the default);
/// and how much a job's journal may hold (steps and effects together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalPolicy {
    /// `journal = "effects"`.
    pub effects: bool,
    /// Bytes a job's journal may hold.
    pub max: u64,
    /// What a replay that meets a different request does.
    pub on_divergence: OnDivergence,
}

impl Default for JournalPolicy {
    fn default() -> Self {
        JournalPolicy {
            effects: false,
            max: DEFAULT_JOURNAL_MAX,
            on_divergence: OnDivergence::Fail,
        }
    }
}

/// `on_divergence`: what an attempt does when its handler asks for a
/// different request than the one its journal recorded at that place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDivergence {
    /// The attempt fails, saying where and how, and the job is
    /// dead-lettered with its journal (nothing is sent twice; `dead retry
    /// --reset-journal` starts it clean).
    #[default]
    Fail,
    /// The journal ends there and the attempt goes on live (what was
    /// recorded after that place may be done again).
    Live,
}

/// A job's journal holds at most this by default: 4 MiB.
pub const DEFAULT_JOURNAL_MAX: u64 = 4 << 20;
/// The range `journal_max` may take.
pub const JOURNAL_MAX_RANGE: std::ops::RangeInclusive<u64> = (64 << 10)..=(64 << 20);

/// `reuse = { jobs, idle }`: one instance of a handler version serves up to
/// `jobs` jobs, one at a time, and is dropped once idle for `idle`, after a
/// trap or a limit, and when its version or the topic's sandbox changes.
/// What one job leaves in the instance's memory the next job sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reuse {
    /// Most jobs one instance serves.
    pub jobs: u32,
    /// How long an instance may wait for its next job.
    pub idle: Duration,
}

/// `results = { keep, max }`: every job's end is kept this long, with the
/// result its handler set (at most `max` bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Results {
    /// How long an end is kept after it.
    pub keep: Duration,
    /// The largest result an attempt may set, in bytes.
    pub max: u64,
}

/// The largest `results.max`: 16 MiB.
pub const MAX_RESULT: u64 = 16 << 20;

/// `rollout = { canary, for, min_attempts, max_failure_rate, margin }`: a
/// new handler version first serves a share of attempts (the canary), then
/// is promoted or rolled back by the numbers (`docs/src/rollouts.md`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RolloutPolicy {
    /// The canary's share of attempts (0..1, exclusive).
    pub canary: f64,
    /// How long the canary serves before it can be promoted.
    pub window: Duration,
    /// Attempts the canary needs before any verdict by failure rate.
    pub min_attempts: u32,
    /// A canary failing more often than this (and than the stable version
    /// by more than `margin`) is rolled back.
    pub max_failure_rate: f64,
    /// How much worse than the stable version a canary may fail and still
    /// be promoted.
    pub margin: f64,
    /// What a promotion does to the jobs whose journals pin them to older
    /// versions: leave them (`pinned`, the default) or move each whose
    /// replay check passes (`replay`).
    pub journaled: Journaled,
}

/// `journaled` in a rollout policy: what becomes of journaled jobs pinned
/// to older versions when a canary is promoted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[derive(utoipa::ToSchema)]
pub enum Journaled {
    /// They finish on the version that wrote their journal.
    #[default]
    Pinned,
    /// Each whose replay check on the promoted version passes moves to it
    /// (`hourglass upgrade TOPIC --to VERSION --all`).
    Replay,
}

impl RolloutPolicy {
    /// As the API and `hourglass rollout --json` show it, defaults filled in.
    pub fn shown(&self) -> PolicyJson {
        PolicyJson {
            canary: self.canary,
            window_ms: self.window.as_millis() as u64,
            min_attempts: self.min_attempts,
            max_failure_rate: self.max_failure_rate,
            margin: self.margin,
            journaled: self.journaled,
        }
    }

    /// [`RolloutPolicy::shown`] as a JSON value.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.shown()).expect("a policy serializes")
    }
}

/// A topic's rollout policy as shown, defaults filled in.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct PolicyJson {
    /// The canary's share of attempts (0..1).
    pub canary: f64,
    /// How long the canary serves before it can be promoted (ms).
    pub window_ms: u64,
    /// Attempts the canary needs before any verdict by failure rate.
    pub min_attempts: u32,
    /// A canary failing more often than this is rolled back.
    pub max_failure_rate: f64,
    /// How much worse than the stable version a canary may fail and still be promoted.
    pub margin: f64,
    /// What a promotion does to journaled jobs pinned to older versions.
    pub journaled: Journaled,
}

/// `rate = { limit, per, burst }`: at most `limit` starts per `per` on
/// average across all runners, `burst` more at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Starts per period.
    pub limit: u32,
    /// The period.
    pub per: Duration,
    /// Extra starts allowed at once.
    pub burst: u32,
}

impl Rate {
    /// The steady spacing between starts, in ms (fractional).
    pub fn interval_ms(&self) -> f64 {
        self.per.as_secs_f64() * 1000.0 / f64::from(self.limit)
    }
}

/// Topic names end up inside Redis keys and hash tags: keep them plain.
pub fn check_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 128 {
        return Err("a topic name is 1 to 128 characters".into());
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        Some(c) => Err(format!(
            "{name:?} contains {c:?}; use letters, digits, '_', '-' and '.'"
        )),
        None => Ok(()),
    }
}
