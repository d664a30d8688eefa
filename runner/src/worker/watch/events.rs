//! The event stream ([`crate::Runner::subscribe`]) as a watcher: `Started`
//! as the handler is called, `Ran` with what the attempt used as it ends.
//! The committer sends the rest (`Acked`, `Retried`, ...) once Redis has them.

use super::{Attempt, Ending, Watcher};
use crate::events::{Event, EventKind, EventSender};

impl Watcher for EventSender {
    fn started(&self, a: &Attempt<'_>) {
        send(self, a.topic, a.id, a.number, || EventKind::Started {
            due_at_ms: a.due_at_ms,
            started_at_ms: a.started_at_ms,
            handler: a.version.to_string(),
        });
    }

    fn ended(&self, a: &Attempt<'_>, e: &Ending<'_>) {
        send(self, a.topic, a.id, a.number, || EventKind::Ran {
            usage: *e.usage,
        });
    }
}

/// Send what `kind` makes, about attempt `attempt` of job `id` of `topic`,
/// if anyone listens: nothing is built for nobody.
pub(crate) fn send(
    events: &EventSender,
    topic: &str,
    id: &str,
    attempt: u32,
    kind: impl FnOnce() -> EventKind,
) {
    if events.receiver_count() > 0 {
        let _ = events.send(Event {
            topic: topic.to_owned(),
            id: id.to_owned(),
            attempt,
            kind: kind(),
        });
    }
}
