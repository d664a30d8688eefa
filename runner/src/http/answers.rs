//! Typed answers of the operating routes (dead letters, waiting, rollouts,
//! runners, reloads, usage): built by the handlers, their schemas derived
//! for the OpenAPI description from the same types. The topic, key and
//! enqueue answers are in `views.rs`.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use crate::config::PolicyJson;
use crate::redis::{
    AccountUsage, DeadInfo, EndJson, PatchCount, Progress, Rollout, RunnerInfo, TopicStats, Unkept,
    VersionInfo,
};

/// One dead letter.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct DeadLetterView {
    /// The job's id.
    pub(super) id: String,
    #[serde(flatten)]
    pub(super) info: DeadInfo,
}

/// Dead letters run again.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Requeued {
    /// How many.
    pub(super) requeued: usize,
    /// The handler version they run on, if one was chosen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) version: Option<String>,
}

/// One dead letter run again.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RequeuedOne {
    pub(super) id: String,
    pub(super) requeued: bool,
    /// The handler version it runs on, if one was chosen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) version: Option<String>,
}

/// Dead letters deleted.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Purged {
    /// How many.
    pub(super) purged: usize,
}

/// One dead letter deleted.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct PurgedOne {
    pub(super) id: String,
    pub(super) purged: bool,
}

/// A job that ended, as a wait sees it (after an enqueue with `wait`, its
/// `status` too).
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct EndedNow {
    #[serde(flatten)]
    pub(super) end: EndJson,
    /// How the enqueue went (`new`, `duplicate`, ...), after an enqueue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) status: Option<&'static str>,
}

/// A job that still lives.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct StillLive {
    pub(super) id: String,
    /// `waiting`, `running` or `waiting_in_flow` (a flow job waiting for its
    /// dependencies); `live` when a wait ran out
    pub(super) state: &'static str,
    /// How long this call waited (ms), when it waited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) waited_ms: Option<u64>,
    /// The latest progress it reported.
    pub(super) progress: Option<Progress>,
    /// How the enqueue went (`new`, `duplicate`, ...), after an enqueue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) status: Option<&'static str>,
}

/// A job's kept versions, newest first, and its topic's rollout.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Versions {
    pub(super) topic: String,
    /// Each with `live_jobs`: the live jobs its journals pin to it.
    pub(super) versions: Vec<VersionInfo>,
    pub(super) rollout: Rollout,
    /// Live jobs on each path of each change their handler asked about
    /// (`patched`): a change's old path is needed while `old_path` is above 0.
    pub(super) patches: Vec<PatchCount>,
    /// Versions live jobs are pinned to that the topic no longer keeps.
    pub(super) unkept: Vec<Unkept>,
}

/// A topic's rollout, and its policy in the served queues.toml.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RolloutView {
    pub(super) topic: String,
    pub(super) rollout: Rollout,
    /// null: a new version replaces the old at once.
    pub(super) policy: Option<PolicyJson>,
}

/// A canary judged by hand.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Judged {
    pub(super) topic: String,
    /// `promoted` or `aborted`
    pub(super) result: &'static str,
    /// The canary judged.
    pub(super) version: String,
    /// The stable version now.
    pub(super) stable: Option<String>,
}

/// A topic pinned (or unpinned: null).
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Pinned {
    pub(super) topic: String,
    pub(super) pinned: Option<String>,
}

/// Counts per topic, by name.
pub(super) type StatsMap = BTreeMap<String, TopicStats>;

/// The live runners.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RunnerList {
    pub(super) runners: Vec<RunnerInfo>,
}

/// One reload of this runner.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ReloadView {
    pub(super) at_ms: u64,
    /// `handler_loaded`, `handler_rejected`, `handler_missing`,
    /// `config_applied` or `config_rejected`
    pub(super) result: &'static str,
    /// The handler file.
    pub(super) path: Option<String>,
    /// The loaded version, or why it was rejected.
    pub(super) detail: Option<String>,
}

/// This runner's recent reloads, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ReloadList {
    pub(super) reloads: Vec<ReloadView>,
}

/// What the attempts of jobs tagged with each account used.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct UsageView {
    /// How far back, as asked.
    pub(super) since: String,
    /// Each account's totals.
    pub(super) accounts: Vec<AccountTotal>,
    /// Each account's use per hour.
    pub(super) hours: Vec<AccountHour>,
}

/// One account's totals.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct AccountTotal {
    pub(super) account: String,
    #[serde(flatten)]
    pub(super) usage: AccountUsage,
}

/// One account's use in one hour.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct AccountHour {
    pub(super) account: String,
    /// The hour's start (ms).
    pub(super) hour_ms: u64,
    #[serde(flatten)]
    pub(super) usage: AccountUsage,
}

/// One Server-Sent Event of a job's stream, as a client parses it.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(super) struct JobEventSse {
    /// `progress` (a report), `attempt` (a failed attempt and when the next
    /// is due), `end` (its kept end, then the stream closes) or `error`
    event: String,
    /// The event as JSON text: a progress report, an attempt, an end as
    /// `/result` gives it, or `{"error"}`.
    data: String,
}

/// One Server-Sent Event of the console's stream, as a client parses it.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(super) struct StreamEventSse {
    /// `overview` (every topic with its counts, and the runners), `job` (the
    /// watched job's view, or null once gone), `flow` (the watched flow's
    /// view) or `error`
    event: String,
    /// The event as JSON text: `{"topics", "runners"}`, a job view as `GET
    /// .../jobs/{id}` gives it, a flow as `GET /api/flows/{id}` does, or
    /// `{"error"}`.
    data: String,
}
