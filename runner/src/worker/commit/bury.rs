//! The committer's burials: dead letters, and jobs that expired before they
//! started (dead-lettered or dropped, as their topic's `on_expire` says),
//! with the flow notices they park.

use super::{Outcome, Pending, count, is_refused, persist};
use crate::events::EventKind;
use crate::redis::{Burial, Entry, OnExpire};
use crate::worker::{Shared, Topic};

/// Dead-letter (or, for an expired job on a topic that drops, delete) jobs.
pub(super) async fn bury(shared: &Shared, topic: &Topic, dead: Pending<Burial>, now: u64) {
    let (q, name, keys) = (&shared.queue, topic.cfg.name.as_str(), &topic.keys);
    let kept = topic.cfg.kept();
    let Some(refused) = persist(&shared.meter, "dead-letter", name, || {
        q.pipeline()
            .bury(keys, &dead.items, topic.cfg.dead_letter, now, kept)
    })
    .await
    else {
        return;
    };
    let outcome = |d: &Burial| match d.expired {
        Some(_) => Outcome::Expired,
        None => Outcome::Dead,
    };
    count(shared, name, &dead, &refused, |d| &d.id, outcome);
    let mut parked = Vec::new();
    for Burial {
        id,
        attempt,
        info,
        notice,
        expired,
        ..
    } in dead
        .items
        .into_iter()
        .filter(|d| !is_refused(&refused, &d.id))
    {
        let kind = match expired {
            None => {
                tracing::warn!(topic = %name, job_id = %id, attempt, handler = info.handler.as_deref().unwrap_or("-"), "dead-lettered: {}", info.reason);
                EventKind::Dead {
                    reason: info.reason,
                }
            }
            Some(how) => {
                let dropped = how == OnExpire::Drop;
                let what = if dropped { "dropped" } else { "dead-lettered" };
                tracing::info!(topic = %name, job_id = %id, attempt, "{what}, unrun: {}", info.reason);
                EventKind::Expired {
                    reason: info.reason,
                    dropped,
                }
            }
        };
        shared.emit(name, &id, attempt, kind);
        if let Some(notice) = notice {
            let entry = Entry {
                notices: vec![notice],
                ..Entry::default()
            };
            parked.push((crate::redis::outbox_token(attempt, &id), entry));
        }
    }
    // a flow job's burial parked its notice; if this fails, a sweep delivers it
    if !parked.is_empty() {
        match q.pipeline().deliver(keys, &parked, now).await {
            Ok(new) => shared.meter.enqueued(&new),
            Err(e) => tracing::warn!(
                topic = name,
                "flow notices parked, delivery deferred to the sweep: {e}"
            ),
        }
    }
}
