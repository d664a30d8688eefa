//! hourglass-client: the job pipeline in Redis, without the runner.
//!
//! Producers (a web service enqueueing jobs, a script inspecting the dead
//! letters) need only this crate: redis, serde and the Lua scripts, no
//! wasmtime. The runner (`hourglass`) uses it for every Redis call; it is the
//! only code that talks to Redis.
//!
//! ```no_run
//! # async fn demo() -> Result<(), hourglass_client::QueueError> {
//! use hourglass_client::{Enqueued, NewJob, Queue, clock::now_ms};
//!
//! let queue = Queue::connect("redis://127.0.0.1:6379/0", "hourglass").await?;
//! let job = NewJob {
//!     id: Some("order-1042".into()),
//!     payload: br#"{"order_id":1042}"#.to_vec(),
//!     due_at_ms: now_ms() + 30 * 60 * 1000,
//!     ..Default::default()
//! };
//! for answer in queue.enqueue(&queue.keys("order_cancel"), &[job], now_ms()).await? {
//!     match answer {
//!         Enqueued::New(id) => println!("enqueued {id}"),
//!         Enqueued::Duplicate(id) => println!("{id} is already live"),
//!         other => println!("{other:?}"), // Replaced / Running: only with `replace`
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! A job's life is a handful of atomic state changes, each one Lua script in
//! `client/lua/` touching only keys of its topic (passed in KEYS, all with the
//! topic's hash tag): enqueue → (pending) → claim → (leased) → ack | retry →
//! (pending) | bury → (dead). Expired leases are requeued, leases of a runner
//! shutting down are released. Scores are milliseconds; every function takes
//! `now_ms` from its caller so tests control the clock.
//!
//! # Layout
//!
//! - `queue.rs`: [`Queue`], a connection to one namespace, with what a
//!   producer calls every day ([`Queue::enqueue`], [`Queue::stats`],
//!   [`Queue::inspect`], [`Queue::wait_for`]) and the handles below.
//! - Handles, one concern each, borrowed from a queue:
//!   [`Pipeline`] (`pipeline.rs`, `claim.rs`, `outbox.rs`: the runner's
//!   claims, acks, retries, burials, releases, follow-up delivery, progress),
//!   [`Admin`] (`admin.rs`: cancel, pause), [`DeadLetters`] (`dead.rs`),
//!   [`Rollouts`] (`rollout.rs`), [`Runners`] (`runners.rs`, `usage.rs`:
//!   heartbeats, account usage, schedule cursors), [`Layouts`] (`layout.rs`),
//!   [`Tenants`] (`tenants.rs`: tenant keys, fairness, per-key limits),
//!   [`Upgrades`] (`upgrade.rs`: journaled jobs moved to another version
//!   after a replay check, and what each version's journals hold).
//! - What is stored and how: [`keys`] (every key name), `scripts.rs` (each
//!   Lua script with the topic keys it takes), `job.rs` (jobs, attempts and
//!   their ends as the scripts take them), [`record`] (a job's stored
//!   record), [`outbox`] (parked follow-ups), [`results`] (kept ends,
//!   progress), [`trace`] (W3C trace context), `inspect.rs` (one job's view).
//! - Waiting and waking: `wait.rs` ([`Waiters`]: one subscription for many
//!   waits), `wake.rs` (runners woken when a job becomes due earlier).
//! - Connecting: `connect.rs` ([`Endpoint`]: a server, a Cluster, Sentinel,
//!   TLS), `sentinel.rs`, `durable.rs` (replica-confirmed writes), `error.rs`.
//! - Autoscaling: [`scale`] (a topic's load in one read, and the runners it
//!   takes).

mod admin;
mod attempt;
mod browse;
mod claim;
pub mod clock;
mod connect;
mod dead;
mod durable;
pub mod effects;
mod error;
pub mod flow;
mod inspect;
mod job;
pub mod journal;
pub mod keys;
pub mod layout;
pub mod logs;
mod minutes;
pub mod outbox;
mod pipeline;
mod queue;
mod rate;
pub mod record;
mod redact;
mod reply;
pub mod results;
pub mod rollout;
mod runners;
pub mod scale;
mod scripts;
mod sentinel;
mod shown;
pub mod story;
mod tenants;
pub mod trace;
pub mod upgrade;
mod usage;
mod wait;
mod wake;

use std::time::Duration;

pub use admin::{Admin, Cancelled};
pub use attempt::{
    Burial, Claimed, ClaimedJob, DeadInfo, Done, Held, Refusal, Refused, Retrying, TopicStats,
};
pub use browse::{BROWSE_LOOK, BROWSE_MOST, Browse, BrowsePage, BrowseState, JobRow};
pub use connect::{Endpoint, Servers, Tls};
pub use dead::{DEAD_BATCH, DeadLetters};
pub use error::{CorruptRecord, QueueError};
pub use flow::{BatchSpec, BatchSummary, Dependency, FlowRef, FlowSpec, Flows, Notice, Upstream};
pub use inspect::{JobState, JobView, TopicDefaults};
pub use job::{Enqueued, LOWEST_PRIORITY, NewJob, OnExpire, check_account, check_id, check_key};
pub use journal::{Journal, Signalled, Step, Suspending, Suspension, Woken};
pub use keys::{RunnerKeys, TopicKeys, wake_channel};
pub use layout::Layouts;
pub use logs::{JobLogs, LogLine};
pub use minutes::{LATE_BOUNDS, MINUTES_KEEP, Minute, MinuteCounts, MinuteSums, late_bucket};
pub use outbox::{Entry, Parked, outbox_token};
pub use pipeline::Pipeline;
pub use queue::{Durability, Queue};
pub use rate::RateLimit;
pub use record::{Record, check_version};
pub use redact::redact;
pub use results::{EndState, JobEnd, Progress, Report, Standing};
pub use rollout::{
    Canary, Change, Pin, Policy, Role, Rollout, Rollouts, Tally, Verdict, VersionInfo,
};
pub use runners::{MissingVersion, RunnerInfo, Runners, TopicMeter};
pub use scale::Load;
pub use sentinel::Sentinel;
pub use shown::{
    BatchCounts, DependencyJson, DependentJson, EndJson, FlowPlace, JobJson, JournalJson, LiveJson,
    SignalJson, StepJson,
};
pub use story::{AttemptCost, AttemptOutcome, Failure, KEPT_ATTEMPTS, Usage, with_attempt};
pub use tenants::{Fairness, KeyStats, KeysStats, MAX_WEIGHT, Share, Tenants};
pub use trace::TraceContext;
pub use upgrade::{
    HeldJobs, Hold, Holdings, Journaled, Moved, PatchCount, Position, Unkept, Upgrades,
};
pub use usage::{AccountUsage, HOUR_MS, HourlyUsage, USAGE_KEEP, hour_of, totals};
pub use wait::{JobEvent, Waited, Waiters, Watch};
pub use wake::{Wake, listen as listen_for_wakes};

/// The largest payload a job may carry unless configured otherwise: 1 MiB.
pub const DEFAULT_PAYLOAD: u64 = 1 << 20;

/// How many dead letters a topic keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetter {
    /// At most this many; the oldest are dropped first.
    pub keep: u64,
    /// None older than this.
    pub max_age: Duration,
}

/// What a topic keeps of its jobs beyond their state: each job's end for
/// waiters (`results`), and each job's logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kept {
    /// How long each end is kept; `None`: no ends are kept.
    pub results: Option<Duration>,
    /// The most bytes of logs a job keeps; 0: the topic keeps none.
    pub logs: u64,
}

/// How long follow-ups parked by an ack wait for their runner to deliver
/// them before a sweep by any runner does.
pub const OUTBOX_SWEEP: Duration = Duration::from_secs(10);
