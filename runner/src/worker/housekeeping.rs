//! The scheduler's housekeeping, once a second per topic: expired leases
//! back to pending, follow-ups a stopped runner left in an outbox delivered,
//! and (once a minute) dead-letter retention enforced.

use std::sync::Arc;

use super::{Shared, Topic};

/// Most expired leases requeued per topic per scan.
const REQUEUE_BATCH: usize = 1000;
/// Most overdue outbox entries delivered per topic per scan.
const SWEEP_BATCH: usize = 100;

/// Return jobs whose lease expired (their runner died) to pending.
pub(super) async fn requeue_expired(shared: &Shared, topics: &[Arc<Topic>], now: u64) {
    for topic in topics {
        match shared
            .queue
            .pipeline()
            .requeue_expired(&topic.keys, now, REQUEUE_BATCH)
            .await
        {
            Ok(0) => {}
            Ok(n) => {
                tracing::warn!(topic = %topic.cfg.name, requeued = n, "requeued jobs whose lease expired")
            }
            Err(e) => {
                tracing::warn!(topic = %topic.cfg.name, "cannot requeue expired leases: {e}")
            }
        }
    }
}

/// Drop dead letters past their topic's count or age, even when none are added.
pub(super) async fn enforce_retention(shared: &Shared, topics: &[Arc<Topic>], now: u64) {
    for topic in topics {
        if let Err(e) = shared
            .queue
            .pipeline()
            .bury(
                &topic.keys,
                &[],
                topic.cfg.dead_letter,
                now,
                topic.cfg.kept(),
            )
            .await
        {
            tracing::warn!(topic = %topic.cfg.name, "cannot enforce dead-letter retention: {e}");
        }
    }
}

/// Deliver follow-ups parked by acks whose runner did not deliver them in time.
pub(super) async fn sweep_outboxes(shared: &Shared, topics: &[Arc<Topic>], now: u64) {
    for topic in topics {
        let entries = match shared
            .queue
            .pipeline()
            .take_outbox(&topic.keys, now, SWEEP_BATCH)
            .await
        {
            Ok(entries) if entries.is_empty() => continue,
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(topic = %topic.cfg.name, "cannot sweep the follow-up outbox: {e}");
                continue;
            }
        };
        let mut good = Vec::with_capacity(entries.len());
        for (token, jobs) in entries {
            match jobs {
                Ok(jobs) => good.push((token, jobs)),
                Err(e) => {
                    // not cleared: taken again after the sweep interval, by a
                    // newer runner if one parked it in a format this one lacks
                    tracing::error!(topic = %topic.cfg.name, %token, "cannot read an outbox entry, leaving it: {e}")
                }
            }
        }
        match shared
            .queue
            .pipeline()
            .deliver(&topic.keys, &good, now)
            .await
        {
            Ok(new) => {
                shared.meter.enqueued(&new);
                tracing::info!(topic = %topic.cfg.name, entries = good.len(), "delivered follow-ups a stopped runner had left")
            }
            Err(e) => {
                tracing::warn!(topic = %topic.cfg.name, "cannot deliver swept follow-ups, trying again later: {e}")
            }
        }
    }
    // flows whose dependents were released by a runner that stopped before enqueueing them
    match shared.queue.flows().sweep(now, SWEEP_BATCH).await {
        Ok(new) if new.values().any(|&n| n > 0) => {
            shared.meter.enqueued(&new);
            tracing::info!(
                jobs = new.values().sum::<usize>(),
                "enqueued flow jobs a stopped runner had released"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot sweep the flows' outboxes, trying again later: {e}"),
    }
}
