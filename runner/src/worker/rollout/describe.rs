//! What the rollout task logs: each change of a topic's rollout (a verdict,
//! a canary started, a pin set or removed), once per runner.

use super::Task;
use crate::clock::now_ms;
use crate::redis::Rollout;

/// What a runner last saw of a topic's rollout.
#[derive(Default)]
pub(super) struct Seen {
    generation: u64,
    verdict_at: u64,
    canary_started: u64,
    pin: Option<String>,
}

impl Task {
    /// Log what changed in `state` since this runner last looked, once:
    /// a verdict, a canary started, a pin set or removed.
    pub(super) fn describe(&mut self, topic: &str, state: &Rollout) {
        let now = now_ms();
        let seen = self.seen.entry(topic.to_owned()).or_default();
        if seen.generation == state.generation && seen.generation != 0 {
            return;
        }
        let before = std::mem::replace(
            seen,
            Seen {
                generation: state.generation,
                verdict_at: state.last.as_ref().map_or(0, |v| v.at_ms),
                canary_started: state.canary.as_ref().map_or(0, |c| c.started_ms),
                pin: state.pinned.as_ref().map(|p| p.version.clone()),
            },
        );
        // at start, only what happened in the last minute is news
        let news = |at: u64, before: u64| at > before && (before > 0 || at + 60_000 > now);
        if let Some(v) = &state.last
            && news(v.at_ms, before.verdict_at)
        {
            let what = format!(
                "rollout: canary {} {} by {}: {}",
                v.version,
                v.result.replace('_', " "),
                v.by,
                v.reason
            );
            match v.result.as_str() {
                "promoted" => {
                    tracing::info!(topic, version = %v.version, "{what}; it serves every attempt now")
                }
                "superseded" => tracing::info!(topic, version = %v.version, "{what}"),
                _ => {
                    tracing::warn!(topic, version = %v.version, "{what}; retired: its failed jobs retry on the stable version")
                }
            }
        }
        if let Some(c) = &state.canary
            && news(c.started_ms, before.canary_started)
        {
            let until = jiff::Timestamp::from_millisecond(c.ends_ms as i64)
                .map(|t| t.to_string())
                .unwrap_or_default();
            tracing::info!(
                topic,
                version = %c.version,
                "rollout: canary {} serves {:.0}% of attempts, stable {} the rest; verdict due at {until} (rolled back sooner if clearly worse)",
                c.version,
                c.share * 100.0,
                state.stable.as_deref().unwrap_or("-"),
            );
        }
        let pin = state.pinned.as_ref().map(|p| p.version.clone());
        if pin != before.pin && (before.generation > 0 || pin.is_some()) {
            match &state.pinned {
                Some(p) => {
                    tracing::info!(topic, version = %p.version, "pinned by {}: version {} serves every attempt", p.by, p.version)
                }
                None => tracing::info!(
                    topic,
                    "unpinned: the handler file and the rollout decide again"
                ),
            }
        }
    }
}
