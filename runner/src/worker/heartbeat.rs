//! This runner's heartbeat: every [`INTERVAL`] it tells Redis who it is, what
//! it serves and how much is running, alive for [`TTL`]; `hourglass runners`
//! lists the runners whose time has not run out. A graceful stop leaves.
//! Each beat also adds the usage of tagged jobs to Redis (`accounts.rs`)
//! and what its topics did to their history by the minute (`minutes.rs`).

use std::sync::Arc;
use std::time::Duration;

use super::{Shared, Topic};
use crate::clock::millis;
use crate::redis::RunnerInfo;

/// How often a runner says it is alive.
pub(crate) const INTERVAL: Duration = Duration::from_secs(2);
/// How long a runner counts as alive after it last said so.
pub(crate) const TTL: Duration = Duration::from_secs(6);

pub(super) struct Heartbeat {
    info: RunnerInfo,
    next_ms: u64,
    /// This runner's part of the topics' history by the minute.
    minutes: super::minutes::Minutes,
}

/// This machine's name, as runners report it.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// A new runner id: host, pid and a random part.
pub(super) fn runner_id() -> String {
    format!(
        "{}-{}-{:04x}",
        host(),
        std::process::id(),
        rand::random::<u16>()
    )
}

impl Heartbeat {
    /// The heartbeat of runner `id` (this process), started at `now`.
    pub fn new(id: String, now: u64) -> Heartbeat {
        let (host, pid) = (host(), std::process::id());
        Heartbeat {
            info: RunnerInfo {
                id,
                host,
                pid,
                version: crate::VERSION.into(),
                started_at_ms: now,
                seen_at_ms: now,
                topics: Vec::new(),
                in_flight: 0,
                handlers: Default::default(),
                meters: Default::default(),
                missing: Vec::new(),
            },
            next_ms: 0,
            minutes: Default::default(),
        }
    }

    /// Say so if the last time was [`INTERVAL`] ago.
    pub async fn beat_if_due(
        &mut self,
        shared: &Shared,
        topics: &[Arc<Topic>],
        in_flight: usize,
        now: u64,
    ) {
        if now < self.next_ms {
            return;
        }
        self.next_ms = now + millis(INTERVAL);
        self.info.seen_at_ms = now;
        self.info.in_flight = in_flight as u64;
        self.info.meters = shared.meter.snapshot();
        self.info.missing = shared.missing.lock().expect("missing lock").clone();
        self.info.topics = topics.iter().map(|t| t.cfg.name.clone()).collect();
        self.info.handlers = topics
            .iter()
            .filter_map(|t| Some((t.cfg.name.clone(), t.handler.as_ref()?.hash().to_owned())))
            .collect();
        if let Err(e) = shared
            .queue
            .runners()
            .heartbeat(&self.info, now + millis(TTL))
            .await
        {
            tracing::debug!("heartbeat not written: {e}");
        }
        shared.accounts.flush(&shared.queue).await;
        self.minutes.flush(shared, topics, now).await;
    }

    /// Say this runner is gone (after adding its last account usage and history).
    pub async fn leave(&mut self, shared: &Shared, now: u64) {
        shared.accounts.flush(&shared.queue).await;
        self.minutes.flush(shared, &[], now).await;
        shared.tenants.flush(&shared.queue, now).await;
        if let Err(e) = shared.queue.runners().leave(&self.info.id, now).await {
            tracing::debug!("could not say this runner left (its entry expires anyway): {e}");
        }
    }
}
