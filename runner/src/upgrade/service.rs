//! Upgrades as a runner's API asks for them: the candidate version is the
//! topic's handler file when it holds it, else a kept version.

use std::sync::Arc;

use super::{Report, UpgradeError, Upgrader, Which};
use crate::config::TopicConfig;
use crate::wasm::LoadedHandler;

/// The handler a topic's file holds now, by topic.
pub type FileOf = Box<dyn Fn(&str) -> Option<LoadedHandler> + Send + Sync>;

/// Upgrades as a runner serves them to its API: the candidate is the
/// topic's file, when it holds that version, or a kept version.
pub struct Service {
    upgrader: Upgrader,
    versions: Arc<crate::reload::Versions>,
    /// The handler a topic's file holds now.
    file: FileOf,
}

impl Service {
    /// Upgrades by `upgrader`, the candidates from `file` or `versions`.
    pub fn new(
        upgrader: Upgrader,
        versions: Arc<crate::reload::Versions>,
        file: FileOf,
    ) -> Service {
        Service {
            upgrader,
            versions,
            file,
        }
    }

    /// [`Upgrader::run`] on version `to` of `topic`'s handler.
    pub async fn run(
        &self,
        topic: &TopicConfig,
        to: &str,
        which: Which,
        dry_run: bool,
    ) -> Result<Report, UpgradeError> {
        let candidate = match (self.file)(&topic.name).filter(|h| h.hash() == to) {
            Some(h) => h,
            None => self.versions.load(to).await.map_err(|why| {
                UpgradeError::Version(format!(
                    "version {to} of topic {:?} cannot be loaded here: {why}",
                    topic.name
                ))
            })?,
        };
        self.upgrader.run(topic, &candidate, which, dry_run).await
    }
}
