//! The WebAssembly host: the only module that touches wasmtime.
//!
//! One [`Runtime`] per process (`runtime.rs`) holds the engine (pooling
//! allocator sized from the runner's concurrency, epoch interruption, the
//! compile cache), the linker and the epoch ticker. A [`LoadedHandler`]
//! (`handler.rs`) is a component compiled, checked against the contract and
//! pre-instantiated once per file version, named by its content hash. Every
//! attempt (`run.rs`) runs in a fresh store and instance (`host.rs`: what
//! the guest sees) inside its topic's [`Sandbox`]: time, CPU and memory
//! limits, the granted environment and directories, the follow-up rules. A
//! guest past its time limit is stopped at its next epoch check, and a host
//! call that hangs is cut off by a timer as well. This file holds what an
//! attempt takes and gives: its input, its sandbox, how it ended.

mod batch;
mod cache;
mod check;
mod context;
mod epoch;
mod handler;
mod host;
mod journal;
mod ledger;
mod logs;
mod outbound;
mod output;
mod report;
mod run;
mod runtime;
mod usage;
mod warm;

use std::sync::Arc;
use std::time::Duration;

use crate::config::{Grants, JournalPolicy, Reuse, TopicConfig};
pub use cache::CacheError;
pub use check::Checked;
pub use context::JobContext;
pub use handler::{LoadError, LoadedHandler, Needs, content_hash};
pub use host::{FollowUp, StepCounts};
pub use journal::{EffectCounts, JournalStore, StoreFuture};
pub use outbound::{HttpPolicy, OutboundCounts, is_public};
pub use report::{MAX_DETAIL, ProgressBoard, Reported, check_detail};
pub use run::Attempted;
pub use runtime::{InUse, PER_INSTANCE, PERFMAP_ENV, PerInstance, Runtime};
pub use usage::Usage;

/// Bindings generated from `wit/handler.wit`.
#[allow(missing_docs)]
pub mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "handler",
        exports: { default: async },
        // a step is written to Redis before it returns; a sleep or a wait
        // ends the attempt (a trap the run reads as "suspended")
        imports: { "hourglass:handler/durable": async | trappable },
    });
}

/// How one attempt ended: the handler's answer, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// The handler acked.
    Ack(Acked),
    /// The handler asked for another attempt, after `delay` or the topic's backoff.
    Retry {
        /// The handler's choice of delay.
        delay: Option<Duration>,
        /// Why.
        reason: String,
    },
    /// The handler gave up for good.
    Fail(String),
    /// The attempt failed without an answer: trap, time limit or memory
    /// limit; the reason says which.
    Crashed(String),
    /// A durable handler sleeps or waits for a signal: the job is put back
    /// until then, the attempt not counted.
    Suspended(crate::redis::Suspension),
    /// The attempt could not start for a reason that is not the job's fault
    /// (no instance slot free): release it without counting the attempt.
    NotStarted(String),
}

/// What an attempt that acked leaves behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acked {
    /// Follow-up jobs to enqueue after the ack.
    pub follow_ups: Vec<FollowUp>,
    /// The result the handler set, if any.
    pub result: Option<Vec<u8>>,
    /// Flows the handler created (`follow-up.enqueue-flow`).
    pub flows: Vec<crate::redis::FlowSpec>,
}

/// What one attempt of a topic's handler may use.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Wall-clock time.
    pub timeout: Duration,
    /// CPU time, if limited.
    pub cpu: Option<Duration>,
    /// Linear memory in bytes.
    pub memory: u64,
    /// The granted environment and directories.
    pub grants: Arc<Grants>,
    /// Topics follow-up jobs may go to.
    pub may_enqueue: Arc<[String]>,
    /// The largest follow-up payload, in bytes.
    pub max_payload: u64,
    /// Where outbound HTTP may go, with its limits.
    pub http: Arc<HttpPolicy>,
    /// The largest result an attempt may set, in bytes.
    pub result_max: u64,
    /// Whether an instance serves several jobs, and how many.
    pub reuse: Option<Reuse>,
    /// What the job's journal records, and its limits.
    pub journal: JournalPolicy,
    /// The most bytes of an attempt's log lines kept for its job (0: none).
    pub logs: u64,
}

impl Sandbox {
    /// The sandbox `topic` sets, with the runner's payload limit.
    pub fn for_topic(topic: &TopicConfig, max_payload: u64) -> Sandbox {
        let grants = Arc::new(topic.grants.clone());
        Sandbox {
            timeout: topic.timeout,
            cpu: topic.cpu,
            memory: topic.memory,
            grants: grants.clone(),
            may_enqueue: topic.may_enqueue.iter().cloned().collect(),
            max_payload,
            http: Arc::new(HttpPolicy::new(grants, topic.http.clone())),
            result_max: topic.results.as_ref().map_or(DEFAULT_RESULT_MAX, |r| r.max),
            reuse: topic.reuse,
            journal: topic.journal,
            logs: topic.logs,
        }
    }
}

/// The largest result of a topic without `results` (which keeps none, but
/// may hand its result to follow-ups): 64 KiB.
pub const DEFAULT_RESULT_MAX: u64 = 64 << 10;

/// The input of one attempt.
#[derive(Debug, Clone)]
pub struct JobInput {
    /// The job's topic.
    pub topic: String,
    /// The job's id.
    pub id: String,
    /// Which attempt this is (1 for the first).
    pub attempt: u32,
    /// The payload.
    pub payload: Vec<u8>,
    /// Attempts in all.
    pub max_attempts: u32,
    /// When accepted (ms).
    pub enqueued_at_ms: u64,
    /// When due (ms).
    pub due_at_ms: u64,
    /// The result of the job that started this one, if it handed it on.
    pub parent_result: Option<Vec<u8>>,
    /// The attempt's span, when spans are exported.
    pub trace: Option<Arc<crate::telemetry::AttemptTrace>>,
    /// The producer's trace context, for an attempt without a span (export
    /// off): its outbound requests carry it on unchanged.
    pub pass_through: Option<crate::redis::TraceContext>,
    /// The job's journal, if a durable handler has written one.
    pub journal: Option<crate::redis::Journal>,
    /// A flow job's dependencies, each with how it ended, or its batch.
    pub upstream: crate::redis::Upstream,
}

/// `16 MiB` for whole mebibytes (how limits are written), else `16.1 MiB`.
fn size(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        bytesize::ByteSize(bytes).display().iec().to_string()
    }
}
