//! The committer's suspensions: durable handlers' jobs that sleep or wait
//! for a signal, put back on the time index (`suspend.lua`).

use super::{Outcome, Pending, count, is_refused, persist};
use crate::events::EventKind;
use crate::redis::Suspending;
use crate::worker::{Shared, Topic};

/// Suspend durable handlers' jobs that sleep or wait for a signal.
pub(super) async fn suspend(
    shared: &Shared,
    topic: &Topic,
    suspends: &Pending<Suspending>,
    now: u64,
) {
    let (q, name, keys) = (&shared.queue, topic.cfg.name.as_str(), &topic.keys);
    let Some(refused) = persist(&shared.meter, "suspend", name, || {
        q.pipeline().suspend(keys, &suspends.items, now)
    })
    .await
    else {
        return;
    };
    count(
        shared,
        name,
        suspends,
        &refused,
        |s| &s.id,
        Outcome::Suspended,
    );
    for s in suspends
        .items
        .iter()
        .filter(|s| !is_refused(&refused, &s.id))
    {
        let w = &s.suspension;
        tracing::debug!(topic = %name, job_id = %s.id, attempt = s.attempt, until_ms = w.until_ms, signal = w.signal.as_deref().unwrap_or("-"), "suspended");
        let kind = EventKind::Suspended {
            until_ms: w.until_ms,
            signal: w.signal.clone(),
        };
        shared.emit(name, &s.id, s.attempt, kind);
    }
}
