//! The committer's suspensions: durable handlers' jobs that sleep or wait
//! for a signal, put back on the time index (`suspend.lua`).

use std::time::Duration;

use humantime::format_duration;

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
        q.pipeline()
            .suspend(keys, &suspends.items, now, topic.cfg.kept())
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
        |_| Outcome::Suspended,
    );
    for s in suspends
        .items
        .iter()
        .filter(|s| !is_refused(&refused, &s.id))
    {
        let w = &s.suspension;
        let wait = Duration::from_millis((w.until_ms.saturating_sub(now) + 500) / 1000 * 1000);
        let what = match &w.signal {
            Some(signal) => format!(
                "waits for signal {signal:?}, at most {}",
                format_duration(wait)
            ),
            None => format!("sleeps {} (a durable sleep)", format_duration(wait)),
        };
        tracing::info!(topic = %name, job_id = %s.id, attempt = s.attempt, "suspended: {what}");
        let kind = EventKind::Suspended {
            until_ms: w.until_ms,
            signal: w.signal.clone(),
        };
        shared.emit(name, &s.id, s.attempt, kind);
    }
}
