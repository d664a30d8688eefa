//! `rollout = { …, journaled = "replay" }`: once a canary is promoted, the
//! journaled jobs pinned to older versions move to it, each whose replay
//! check passes (what `hourglass upgrade TOPIC --to VERSION --all` does).
//! One runner takes it (`Rollouts::claim_upgrade`), off the rollout task's
//! loop, and records how many moved and were left in the verdict.

use super::Task;
use crate::clock::now_ms;
use crate::config::{Journaled, TopicConfig};
use crate::redis::Rollout;
use crate::upgrade::Which;
use crate::wasm::LoadedHandler;

impl Task {
    /// Start the move of `cfg`'s journaled jobs to the version `state`
    /// says was just promoted, if its policy asks for it and nobody has.
    pub(super) fn replay_on_promote(
        &mut self,
        cfg: &TopicConfig,
        state: &Rollout,
        file: Option<&LoadedHandler>,
    ) {
        if cfg.rollout.map(|p| p.journaled) != Some(Journaled::Replay) {
            return;
        }
        let Some(verdict) = &state.last else {
            return;
        };
        if verdict.result != "promoted"
            || verdict.moved.is_some()
            || state.stable.as_deref() != Some(verdict.version.as_str())
        {
            return;
        }
        let tried = format!("{} {} {}", cfg.name, verdict.version, verdict.at_ms);
        if !self.upgrades.insert(tried) {
            return;
        }
        let (shared, versions) = (self.shared.clone(), self.versions.clone());
        let (cfg, version) = (cfg.clone(), verdict.version.clone());
        let file = file.filter(|h| h.hash() == version).cloned();
        tokio::spawn(async move {
            let topic = cfg.name.as_str();
            let keys = shared.queue.keys(topic);
            let rollouts = shared.queue.rollouts();
            match rollouts
                .claim_upgrade(&keys, &version, &shared.runner_id, now_ms())
                .await
            {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    tracing::warn!(topic, "journaled jobs not moved to promoted {version}: {e}");
                    return;
                }
            }
            let candidate = match file {
                Some(h) => h,
                None => match versions.load(&version).await {
                    Ok(h) => h,
                    Err(why) => {
                        tracing::warn!(
                            topic,
                            "journaled jobs not moved to promoted {version}: {why}"
                        );
                        return;
                    }
                },
            };
            let report = match shared
                .upgrader
                .run(&cfg, &candidate, Which::All, false)
                .await
            {
                Ok(report) => report,
                Err(e) => {
                    tracing::warn!(
                        topic,
                        "journaled jobs not moved to promoted {version}: {e} (`hourglass upgrade {topic} --to {version} --all` tries again)"
                    );
                    return;
                }
            };
            let counts = (report.moved.len() as u64, report.left.len() as u64);
            if let Err(e) = rollouts
                .upgraded(&keys, &version, counts, &shared.runner_id, now_ms())
                .await
            {
                tracing::warn!(
                    topic,
                    "the moved count was not recorded in the verdict: {e}"
                );
            }
            for left in &report.left {
                tracing::info!(topic, job_id = %left.id, "left on {}: {}", left.version.as_deref().unwrap_or("-"), left.reason);
            }
        });
    }
}
