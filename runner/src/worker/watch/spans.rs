//! The attempt's span as a watcher: ended, with how the attempt ended, when
//! spans are exported. (It is begun before the handler runs, by
//! `attempt.rs`, since the handler's outbound requests and follow-ups are
//! its children.)

use super::{Attempt, Ending, Watcher};
use crate::telemetry::Telemetry;
use crate::telemetry::spans::{self, AttemptEnd, AttemptFacts};
use crate::worker::decide::Decision;

impl Watcher for Telemetry {
    fn ended(&self, a: &Attempt<'_>, e: &Ending<'_>) {
        let Some(span) = a.span else { return };
        let end = match e.decision {
            Decision::Ack { .. } => AttemptEnd::Acked,
            Decision::Retry {
                next_due_ms,
                failure,
            } => AttemptEnd::Retry {
                reason: &failure.error,
                next_due_ms: *next_due_ms,
            },
            Decision::Dead(info) | Decision::Expired(info) => AttemptEnd::Dead {
                reason: &info.reason,
            },
            Decision::Release => AttemptEnd::Released,
            Decision::Suspend { suspension, .. } => AttemptEnd::Suspended {
                until_ms: suspension.until_ms,
            },
        };
        let facts = AttemptFacts {
            topic: a.topic,
            id: a.id,
            number: a.number,
            version: a.version,
            late_ms: a.late_ms(),
            usage: e.usage,
        };
        self.end(&span.span, spans::attempt(&facts, end));
    }
}
