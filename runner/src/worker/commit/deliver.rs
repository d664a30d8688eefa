//! What the committer hands on: a job's end as kept and as its flow is
//! told it, and a span per follow-up delivered after its parent's ack.

use crate::redis::{Entry, FlowRef, JobEnd, Notice, QueueError};
use crate::telemetry::{Begun, Ended, Telemetry, spans};

/// A job's end as it is kept (on a topic that keeps results: `keep`) and
/// as its flow is told it (a job of a flow); made only when needed (most
/// topics keep no ends and run no flows: nothing is allocated for them).
pub(super) fn tell(
    keep: bool,
    end: impl FnOnce() -> JobEnd,
    flow: Option<FlowRef>,
) -> (Option<JobEnd>, Option<Notice>) {
    match (keep, flow) {
        (false, None) => (None, None),
        (true, None) => (Some(end()), None),
        (false, Some(job)) => (None, Some(Notice { job, end: end() })),
        (true, Some(job)) => {
            let end = end();
            // the flow is told how the job ended, not its story
            let told = JobEnd {
                history: Vec::new(),
                ..end.clone()
            };
            (Some(end), Some(Notice { job, end: told }))
        }
    }
}

type Delivered = Result<std::collections::BTreeMap<String, usize>, QueueError>;

/// A span per follow-up delivered right after its parent's ack (under the
/// parent attempt's span), when spans are exported, with how it ends.
pub(super) fn delivery_spans(
    telemetry: &Telemetry,
    parked: &[(String, Entry)],
) -> Vec<(Begun, impl Fn(&Delivered) -> Ended + use<>)> {
    if !telemetry.is_on() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for p in parked.iter().flat_map(|(_, entry)| &entry.jobs) {
        let Some(trace) = &p.job.trace else { continue };
        let Some(span) = telemetry.begin(Some(trace)) else {
            continue;
        };
        let (topic, id) = (p.topic.clone(), p.job.id.clone().unwrap_or_default());
        out.push((span, move |delivered: &Delivered| {
            let deferred = delivered.as_ref().err().map(ToString::to_string);
            spans::follow_up(&topic, &id, deferred.as_deref())
        }));
    }
    out
}
