//! A durable handler's journal as `inspect --json` and the API show it.

use serde::Serialize;

use crate::Journal;

/// A durable handler's journal as shown: steps in the order they
/// completed, with their sizes (not their values), the signals' names and
/// sizes, the wake times, and the effects.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JournalJson {
    /// The handler version that wrote it.
    pub version: Option<String>,
    /// Its completed steps.
    pub steps: Vec<StepJson>,
    /// Each timer's wake time (ms).
    pub timers: std::collections::BTreeMap<String, u64>,
    /// The signals received.
    pub signals: Vec<SignalJson>,
    /// The effects journal: the requests and follow-ups in the order they
    /// were made (`replays: false` on one the next attempt makes again), the
    /// clock reads and random bytes, and where and why it stopped; null when
    /// it recorded none.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub effects: serde_json::Value,
    /// How `patched(name)` answered the job, by name (`true`: the new path);
    /// left out when it asked none.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub patches: std::collections::BTreeMap<String, bool>,
}

/// One completed step of a durable handler.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepJson {
    /// Its name.
    pub name: String,
    /// The size of what it returned.
    pub bytes: usize,
    /// The attempt that ran it.
    pub attempt: u32,
    /// When it returned (ms).
    pub completed_at_ms: u64,
}

/// One signal a durable job received.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignalJson {
    /// Its name.
    pub name: String,
    /// Its payload's size.
    pub bytes: usize,
}

impl Journal {
    /// As `inspect --json`, `journal --json` and the API show it.
    pub fn shown(&self) -> JournalJson {
        let mut steps: Vec<_> = self.steps.iter().collect();
        steps.sort_by_key(|(name, s)| (s.at_ms, s.attempt, *name));
        JournalJson {
            version: self.version.clone(),
            steps: steps
                .into_iter()
                .map(|(name, s)| StepJson {
                    name: name.clone(),
                    bytes: s.value.len(),
                    attempt: s.attempt,
                    completed_at_ms: s.at_ms,
                })
                .collect(),
            timers: self.timers.clone(),
            signals: self
                .signals
                .iter()
                .map(|(name, p)| SignalJson {
                    name: name.clone(),
                    bytes: p.len(),
                })
                .collect(),
            effects: crate::effects::to_json(&self.effects),
            patches: self.patches.clone(),
        }
    }

    /// [`Journal::shown`] as a JSON value.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.shown()).expect("a journal serializes")
    }
}
