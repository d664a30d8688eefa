//! A checked flow as it is stored and driven: its jobs by index, their
//! dependencies as indices with their policies, and what makes it a
//! batch's. What producers describe (`spec.rs`, `batch.rs`) becomes this;
//! the store and the views read it.

use serde::{Deserialize, Serialize};

/// One job of a flow.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowJob {
    /// Unique within the flow (letters, digits and `_-.:@`, 1 to 128); the
    /// job's id in its topic is `<flow>/<name>`.
    pub name: String,
    /// The topic it runs in.
    pub topic: String,
    /// The bytes its handler receives.
    pub payload: Vec<u8>,
    /// The jobs it waits for.
    pub after: Vec<Dep>,
    /// Attempts; 0 for the topic's default.
    pub max_attempts: u32,
}

/// A dependency on the job named `name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dep {
    /// The job depended on.
    pub name: String,
    /// What its failure does to the dependent.
    pub policy: Policy,
}

/// What a dependency's dead-lettering does to the job that depends on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Policy {
    /// The dependent is dead-lettered without running, its reason naming
    /// the dependency.
    #[default]
    Require,
    /// The dependent runs anyway and sees the failure.
    Ignore,
}

impl Policy {
    /// As written: `require`, `ignore`.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Require => "require",
            Policy::Ignore => "ignore",
        }
    }
}

/// A checked flow: its jobs by index, with dependencies as indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The flow's id.
    pub id: String,
    /// The jobs, in the order given.
    pub jobs: Vec<FlowJob>,
    /// Per job, the indices (and policies) of the jobs it waits for.
    pub deps: Vec<Vec<(u32, Policy)>>,
    /// Per job, the indices of the jobs that wait for it.
    pub dependents: Vec<Vec<u32>>,
    /// Cancel the rest when a job is dead-lettered.
    pub fail_fast: bool,
    /// When the flow is a batch: its callbacks and whether it is open.
    pub batch: Option<BatchPlan>,
}

impl Plan {
    /// The jobs that wait for nothing: enqueued with the flow.
    pub fn roots(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.jobs.len() as u32).filter(|&i| self.waits(i) == 0)
    }

    /// How many ends job `i` waits for: its dependencies, and for a batch's
    /// callback while the batch is open, the seal.
    pub fn waits(&self, i: u32) -> usize {
        let seal = self
            .batch
            .as_ref()
            .is_some_and(|b| b.open && b.callbacks.iter().any(|&(c, _)| c == i));
        self.deps[i as usize].len() + usize::from(seal)
    }
}

/// Which callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallbackKind {
    /// `on_complete`.
    Complete,
    /// `on_success`.
    Success,
}

impl CallbackKind {
    /// Its job's name in the batch: `on_complete`, `on_success`.
    pub fn name(self) -> &'static str {
        match self {
            CallbackKind::Complete => "on_complete",
            CallbackKind::Success => "on_success",
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            CallbackKind::Complete => "complete",
            CallbackKind::Success => "success",
        }
    }
}

/// What makes a [`Plan`] a batch's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPlan {
    /// The callbacks: index and kind.
    pub callbacks: Vec<(u32, CallbackKind)>,
    /// Created open.
    pub open: bool,
}

impl BatchPlan {
    /// The kind of callback job `i` is, if it is one.
    pub fn kind(&self, i: u32) -> Option<CallbackKind> {
        self.callbacks
            .iter()
            .find(|&&(c, _)| c == i)
            .map(|&(_, k)| k)
    }

    /// The batch's own fields for `flow_create.lua`.
    pub(super) fn fields(&self, plan: &Plan, inv: &mut redis::ScriptInvocation<'_>) {
        let cb: Vec<String> = self.callbacks.iter().map(|(i, _)| i.to_string()).collect();
        let bytes: usize = plan.jobs.iter().map(|j| j.payload.len()).sum();
        inv.arg("batch")
            .arg(if self.open { "open" } else { "sealed" })
            .arg("cb")
            .arg(cb.join(","))
            .arg("bytes")
            .arg(bytes);
        for &(i, kind) in &self.callbacks {
            inv.arg(format!("k:{i}")).arg(kind.as_str());
        }
        for (i, job) in plan.jobs.iter().enumerate() {
            inv.arg(format!("m:{}", job.name)).arg(i);
        }
    }
}
