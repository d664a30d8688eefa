//! Flows: jobs that depend on jobs.
//!
//! A flow is a set of jobs with dependencies, a DAG: a job is enqueued into
//! its topic when every job it depends on has ended. The flow's state lives
//! in one hash with its own hash tag (`<ns>:{flow:<id>}:flow`), so a flow is
//! one Redis Cluster slot whatever topics (and masters) its jobs run on:
//!
//! - `flow_create.lua` writes the whole flow in one step (it is accepted or
//!   nothing is) and parks its roots in the flow's outbox;
//! - a job of a flow carries its [`FlowRef`] in its record; its ack or
//!   burial parks a [`Notice`] in its topic's outbox, in the same script, so
//!   the notice exists exactly when the end does;
//! - delivering a notice runs `flow_end.lua` on the flow's slot, which counts
//!   each end once (a second delivery of the same end changes nothing) and
//!   parks each dependent whose dependencies have all ended in the flow's
//!   outbox; delivering that enqueues it into its topic under its fixed id,
//!   reserved for [`RESERVE`] (a second delivery finds it taken).
//!
//! Outboxes left undelivered by a runner that died are swept (the topics'
//! by the existing sweep, the flows' through the index `<ns>:flows:due`).
//!
//! - `spec.rs`: what a producer describes and its checks (cycles, unknown
//!   dependencies, limits); `wire.rs`: the bytes of a [`FlowRef`] and a
//!   [`Notice`]; `store.rs`: the [`Flows`] handle (create, end, cancel,
//!   sweep); `view.rs`: reading one (a job's dependencies, `flow show`);
//!   `batch.rs`: batches (a flow with callbacks; add, seal, the summary a
//!   callback reads).

mod batch;
mod plan;
mod spec;
mod stats;
mod store;
mod view;
mod wire;

pub use batch::{BatchSpec, BatchSummary, Callback};
pub use plan::{BatchPlan, CallbackKind, Dep, FlowJob, Plan, Policy};
pub use spec::{FlowSpec, MAX_FLOW_BYTES, MAX_FLOW_JOBS, check_flow_id};
pub use stats::{FlowStats, RECENT_FLOWS, RecentFlow};
pub use store::Flows;
pub use view::{Dependency, FlowJobView, FlowView, Upstream};
pub use wire::{FlowRef, Notice};

use std::time::Duration;

/// How long a flow job's id stays reserved in its topic after its enqueue
/// (the unique-for window), so that a release delivered twice adds nothing;
/// also how long a finished flow's record is kept for `flow show`.
pub const RESERVE: Duration = Duration::from_secs(7 * 24 * 3600);

/// How the reason of a job dead-lettered unrun, because a dependency it
/// requires did not ack, begins: its flow revives it when that dependency
/// acks after a retry.
pub const BLOCKED: &str = "cannot run: dependency ";

/// The id a flow's job `name` has in its topic: `<flow>/<name>`.
pub fn job_id(flow: &str, name: &str) -> String {
    format!("{flow}/{name}")
}
