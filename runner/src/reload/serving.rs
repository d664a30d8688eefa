//! What a process serves, as others see it: the configuration in force and
//! each topic's handler version ([`Serving`], a projection of a
//! [`Snapshot`] published whenever the scheduler applies one), and the
//! recent reload notices ([`ReloadRecord`]). The HTTP API, the dashboard and
//! the schedules read these; `hourglass serve` makes one without a runner.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Notice, Snapshot};
use crate::config::Config;

/// What a runner serves now: its configuration and each topic's handler
/// version. Replaced (not changed) by every reload.
#[derive(Debug, Clone)]
pub struct Serving {
    /// The configuration in force.
    pub config: Arc<Config>,
    /// Topic → the content hash of its handler; a topic without one claims nothing.
    pub handlers: BTreeMap<String, String>,
    /// Whether this process claims and runs jobs (`false` for `hourglass serve`).
    pub runs_jobs: bool,
}

impl Serving {
    /// A configuration served without running jobs (`hourglass serve`).
    pub fn without_jobs(config: Config) -> Serving {
        Serving {
            config: Arc::new(config),
            handlers: BTreeMap::new(),
            runs_jobs: false,
        }
    }
}

/// One reload notice and when it was sent.
#[derive(Debug, Clone)]
pub struct ReloadRecord {
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// What happened.
    pub notice: Notice,
}

impl Snapshot {
    /// What a runner serving this snapshot serves.
    pub fn serving(&self) -> Serving {
        Serving {
            config: self.config.clone(),
            handlers: self
                .handlers
                .iter()
                .map(|(topic, h)| (topic.clone(), h.hash().to_owned()))
                .collect(),
            runs_jobs: true,
        }
    }
}
