//! A flow job's place in its flow as `inspect --json` and the API show it.

use serde::Serialize;

use crate::{BatchSummary, EndState, flow::Policy};

/// A flow job's place in its flow: the flow's id, the job's index, each job
/// it waits for and each job that waits for it with its state (null: not
/// ended); a batch's callback, the batch's counts.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlowPlace {
    /// The flow's id.
    pub id: String,
    /// The job's index in the flow.
    pub index: u32,
    /// The jobs it waits for.
    pub dependencies: Vec<DependencyJson>,
    /// The jobs that wait for it.
    pub dependents: Vec<DependentJson>,
    /// For a batch's callback: how the batch stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchCounts>,
}

/// A job a flow job waits for.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DependencyJson {
    /// Its name in the flow.
    pub name: String,
    /// Its topic.
    pub topic: String,
    /// Its id in that topic.
    pub id: String,
    /// What its failure does to the dependent.
    pub policy: Policy,
    /// How it ended, if it has.
    pub ended: Option<EndState>,
}

/// A job that waits for a flow job.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DependentJson {
    /// Its name in the flow.
    pub name: String,
    /// How it ended (`acked`, `dead`, `cancelled`), if it has.
    pub ended: Option<String>,
}

/// How a batch stands, for its callback.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchCounts {
    /// Its jobs (the callbacks not counted).
    pub jobs: u32,
    /// How many were acked.
    pub acked: u32,
    /// How many were dead-lettered.
    pub dead: u32,
    /// How many were cancelled.
    pub cancelled: u32,
    /// The ids (in their topics) of the dead-lettered ones.
    pub failed: Vec<String>,
}

impl From<BatchSummary> for BatchCounts {
    fn from(b: BatchSummary) -> BatchCounts {
        BatchCounts {
            jobs: b.jobs,
            acked: b.acked,
            dead: b.dead,
            cancelled: b.cancelled,
            failed: b.failed,
        }
    }
}
