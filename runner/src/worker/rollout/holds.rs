//! Versions that hold jobs: a version live jobs' journals pin them to is
//! never forgotten by `keep_versions`, in Redis (`rollout_sync.lua` is told
//! which) or on disk (`Versions::prune` keeps what the topic's catalogue
//! keeps), and the log says which jobs keep it, once. A version this
//! runner lacks while live jobs are pinned to it is said too: those jobs
//! cannot run here.
//!
//! What the journals hold is read (`Upgrades::holdings`: one scan of the
//! topic's journaled jobs, one `EXISTS` for a topic without journals) only
//! when a new handler file is reported and the topic keeps as many versions
//! as it may: the only time a report can forget one.

use super::Task;
use crate::config::TopicConfig;
use crate::redis::{HeldJobs, Holdings};
use crate::wasm::LoadedHandler;

impl Task {
    /// The versions live jobs of `cfg` are pinned to, read again when a new
    /// `file` is reported and a version could be forgotten; else as last read.
    pub(super) async fn held(
        &mut self,
        cfg: &TopicConfig,
        file: Option<&LoadedHandler>,
        new_file: bool,
    ) -> Vec<String> {
        let topic = cfg.name.as_str();
        if new_file {
            let keys = self.shared.queue.keys(topic);
            let rollouts = self.shared.queue.rollouts();
            let full = match rollouts.kept_versions(&keys).await {
                Ok(kept) => kept.len() >= self.shared.keep_versions as usize,
                Err(_) => false,
            };
            if full {
                match self.shared.queue.upgrades().holdings(&keys).await {
                    Ok(holdings) => {
                        self.lacking(topic, file, &holdings);
                        self.holdings.insert(topic.to_owned(), holdings);
                    }
                    Err(e) => tracing::debug!(topic, "what the journals hold was not read: {e}"),
                }
            }
        }
        self.holdings
            .get(topic)
            .map(|h| h.held().into_iter().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// After a report: say once of each version kept beyond
    /// `keep_versions` because jobs hold it which jobs those are, and let
    /// the kept files follow the topic's catalogue.
    pub(super) async fn kept_for_jobs(&mut self, cfg: &TopicConfig) {
        let topic = cfg.name.as_str();
        let keep = self.shared.keep_versions as usize;
        if self.versions.kept(topic).len() <= keep && !self.holdings.contains_key(topic) {
            return;
        }
        let keys = self.shared.queue.keys(topic);
        let Ok(catalogue) = self.shared.queue.rollouts().versions(&keys).await else {
            return;
        };
        let (rollout, versions) = catalogue;
        let kept: Vec<String> = versions.iter().map(|v| v.version.clone()).collect();
        self.versions.prune(topic, &kept);
        let Some(holdings) = self.holdings.get(topic) else {
            return;
        };
        for v in versions.iter().skip(keep) {
            let role = rollout.role_of(&v.version);
            let held = holdings.of_version(&v.version);
            if held.live == 0
                || !matches!(role, crate::redis::Role::Kept | crate::redis::Role::Retired)
            {
                continue;
            }
            if self.said.insert(format!("{topic} {} held", v.version)) {
                tracing::info!(
                    topic,
                    version = %v.version,
                    "version {} is kept beyond keep_versions ({keep}): {} pinned to it by their journals; they finish on it unless `hourglass upgrade {topic} --to VERSION` moves them",
                    v.version,
                    jobs(&held)
                );
            }
        }
    }

    /// Warn once of each version live jobs of `topic` are pinned to that
    /// this runner has neither in its file nor among its kept versions.
    fn lacking(&mut self, topic: &str, file: Option<&LoadedHandler>, holdings: &Holdings) {
        for version in holdings.held() {
            let here = file.is_some_and(|h| h.hash() == version) || self.versions.is_kept(version);
            if !here && self.said.insert(format!("{topic} {version} lacked")) {
                tracing::warn!(
                    topic,
                    version,
                    "{} pinned to version {version} by their journals, which this runner does not have: it cannot run them (copy that version's file into its handlers_dir, or move them with `hourglass upgrade`)",
                    jobs(&holdings.of_version(version))
                );
            }
        }
    }
}

/// "3 live jobs (a, b, c) are", at most ten named.
fn jobs(held: &HeldJobs) -> String {
    let more = if held.live as usize > held.some.len() {
        ", …"
    } else {
        ""
    };
    let (s, are) = if held.live == 1 {
        ("", "is")
    } else {
        ("s", "are")
    };
    format!(
        "{} live job{s} ({}{more}) {are}",
        held.live,
        held.some.join(", ")
    )
}
