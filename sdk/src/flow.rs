//! Flows a handler creates: jobs that depend on jobs (a DAG), created with
//! this attempt's ack (all of them, or none if the attempt does not ack).
//! The jobs that wait for nothing start then; each other job once the jobs
//! it waits for have ended, and reads how they did with
//! [`crate::Job::dependencies`]. Every topic must be listed in the handler's
//! `may_enqueue` in `queues.toml`.

use alloc::string::String;
use alloc::vec::Vec;

use crate::Error;
use crate::bindings::hourglass::handler::follow_up as wit;

/// A flow to create when this attempt acks; send it with [`Flow::enqueue`].
///
/// ```no_run
/// # fn demo(album: u64, photos: &[u64]) -> hourglass_sdk::Result {
/// use hourglass_sdk::Flow;
///
/// let mut flow = Flow::new();
/// let mut thumbs = Vec::new();
/// for photo in photos {
///     let name = format!("thumb-{photo}");
///     flow = flow.job(&name, "thumbs", &serde_json::json!({ "photo": photo }))?;
///     thumbs.push(name);
/// }
/// let flow_id = flow
///     .job_after("publish", "albums", &serde_json::json!({ "album": album }), &thumbs)?
///     .enqueue()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Flow {
    id: Option<String>,
    jobs: Vec<wit::FlowJob>,
    fail_fast: bool,
}

impl Flow {
    /// An empty flow with a generated id.
    pub fn new() -> Flow {
        Flow::default()
    }

    /// Use this id (letters, digits, `_-.:@`, at most 64). An id in use
    /// when the ack is delivered drops the flow (logged by the runner):
    /// prefer a generated one.
    pub fn id(mut self, id: impl Into<String>) -> Flow {
        self.id = Some(id.into());
        self
    }

    /// Cancel the jobs not started once one is dead-lettered.
    pub fn fail_fast(mut self) -> Flow {
        self.fail_fast = true;
        self
    }

    /// Add job `name` to `topic` with `payload` (as JSON), waiting for nothing.
    pub fn job<T: serde::Serialize + ?Sized>(
        self,
        name: &str,
        topic: &str,
        payload: &T,
    ) -> Result<Flow, Error> {
        self.job_after(name, topic, payload, &[] as &[&str])
    }

    /// Add job `name` that runs once every job in `after` has ended; if one
    /// of them was dead-lettered, it is dead-lettered unrun (see
    /// [`Flow::job_with`] for `ignore`).
    pub fn job_after<T: serde::Serialize + ?Sized, S: AsRef<str>>(
        self,
        name: &str,
        topic: &str,
        payload: &T,
        after: &[S],
    ) -> Result<Flow, Error> {
        let payload = serde_json::to_vec(payload)
            .map_err(|e| Error::fail(alloc::format!("flow job {name:?}: payload: {e}")))?;
        let after = after.iter().map(|a| (a.as_ref(), false));
        Ok(self.job_with(name, topic, payload, after, None))
    }

    /// Add job `name` with raw `payload` bytes, waiting for the jobs in
    /// `after` (name, and whether its failure is ignored: the job then runs
    /// anyway and sees it), with `max_attempts` (none: the topic's).
    pub fn job_with<'a>(
        mut self,
        name: &str,
        topic: &str,
        payload: Vec<u8>,
        after: impl IntoIterator<Item = (&'a str, bool)>,
        max_attempts: Option<u32>,
    ) -> Flow {
        self.jobs.push(wit::FlowJob {
            name: name.into(),
            topic: topic.into(),
            payload,
            after: after
                .into_iter()
                .map(|(name, ignore)| wit::FlowDependency {
                    name: name.into(),
                    policy: if ignore {
                        wit::Policy::Ignore
                    } else {
                        wit::Policy::Require
                    },
                })
                .collect(),
            max_attempts,
        });
        self
    }

    /// Queue the flow for when this attempt acks; returns its id.
    ///
    /// A refusal (a cycle, a dependency not in the flow, a topic not in
    /// `may_enqueue`, a payload over the limit) is a permanent error:
    /// retrying the job cannot fix it.
    pub fn enqueue(self) -> Result<String, Error> {
        let flow = wit::NewFlow {
            id: self.id,
            jobs: self.jobs,
            fail_fast: self.fail_fast,
        };
        wit::enqueue_flow(&flow).map_err(Error::fail)
    }
}
