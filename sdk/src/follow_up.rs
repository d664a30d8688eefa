//! Follow-up jobs: work a handler starts in other topics.
//!
//! A follow-up is parked with this attempt's ack, in the same atomic step,
//! and enqueued into its topic right after (by a sweep if the runner died in
//! between). If the attempt retries, fails or panics, none of its follow-ups
//! are enqueued; if it acks, all of them are. The target topic must be listed in
//! the handler's `may_enqueue` in `queues.toml`.

use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use crate::Error;
use crate::bindings::hourglass::handler::follow_up as wit;

/// A job to enqueue when this attempt acks; send it with [`FollowUp::enqueue`].
///
/// ```no_run
/// # fn demo(order_id: u64) -> hourglass_sdk::Result {
/// use std::time::Duration;
/// use hourglass_sdk::FollowUp;
///
/// FollowUp::json("notify_user", &serde_json::json!({ "order_id": order_id }))?
///     .delay(Duration::from_secs(3600))
///     .id(format!("notify-{order_id}"))
///     .enqueue()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowUp {
    topic: String,
    payload: Vec<u8>,
    delay: Option<Duration>,
    id: Option<String>,
    unique_for: Option<Duration>,
    with_result: bool,
    key: Option<String>,
    expires_in: Option<Duration>,
    priority: Option<u8>,
}

impl FollowUp {
    /// A follow-up to `topic` carrying `payload`, due right after the ack.
    pub fn new(topic: impl Into<String>, payload: impl Into<Vec<u8>>) -> FollowUp {
        FollowUp {
            topic: topic.into(),
            payload: payload.into(),
            delay: None,
            id: None,
            unique_for: None,
            with_result: false,
            key: None,
            expires_in: None,
            priority: None,
        }
    }

    /// A follow-up whose payload is `value` as JSON.
    pub fn json<T: serde::Serialize + ?Sized>(
        topic: impl Into<String>,
        value: &T,
    ) -> Result<FollowUp, Error> {
        let payload = serde_json::to_vec(value)
            .map_err(|e| Error::fail(alloc::format!("follow-up payload: {e}")))?;
        Ok(FollowUp::new(topic, payload))
    }

    /// Start this long after the ack.
    pub fn delay(mut self, delay: Duration) -> FollowUp {
        self.delay = Some(delay);
        self
    }

    /// Use this id: a live job with the same id in the target topic is not enqueued twice.
    pub fn id(mut self, id: impl Into<String>) -> FollowUp {
        self.id = Some(id.into());
        self
    }

    /// Keep its id (set one with [`FollowUp::id`]) taken in the target topic
    /// this long from its enqueue, even after that job is done: a repeat
    /// within the window (from this or any other attempt) is not enqueued.
    pub fn unique_for(mut self, window: Duration) -> FollowUp {
        self.unique_for = Some(window);
        self
    }

    /// Hand it this attempt's result (what the handler acks with,
    /// [`crate::Outcome::ack_with`]): its handler reads it with
    /// [`crate::Job::parent_result`].
    pub fn with_parent_result(mut self) -> FollowUp {
        self.with_result = true;
        self
    }

    /// Its tenant key in the target topic (1 to 128 letters, digits or
    /// `_-.:@/`): the topic's fairness and per-key limits count it as that
    /// key's. Without one it takes this job's key.
    pub fn key(mut self, key: impl Into<String>) -> FollowUp {
        self.key = Some(key.into());
        self
    }

    /// Not started within `window` of the ack, it is not run (the target
    /// topic's `on_expire`: dead-lettered or dropped). Longer than its
    /// [`FollowUp::delay`]. Without one, the target topic's `expire_after`.
    pub fn expires_in(mut self, window: Duration) -> FollowUp {
        self.expires_in = Some(window);
        self
    }

    /// Its priority in the target topic: 0 (the highest, the default) to 9.
    /// Among that topic's due jobs a higher priority starts first.
    pub fn priority(mut self, priority: u8) -> FollowUp {
        self.priority = Some(priority);
        self
    }

    /// Queue it for when this attempt acks; returns its id.
    ///
    /// A refusal (a topic not in `may_enqueue`, a bad id, a payload over the
    /// limit) is a permanent error: retrying the job cannot fix it.
    pub fn enqueue(self) -> Result<String, Error> {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let job = wit::NewJob {
            topic: self.topic,
            payload: self.payload,
            delay_ms: self.delay.map(millis),
            id: self.id,
        };
        let unique_for_ms = self.unique_for.map(millis);
        // one option alone goes through the call that predates `enqueue-with`
        let plain = self.expires_in.is_none() && self.priority.is_none();
        match (&self.key, unique_for_ms, self.with_result) {
            (None, None, false) if plain => wit::enqueue(&job),
            (None, None, true) if plain => wit::enqueue_with_result(&job),
            (None, Some(ms), false) if plain => wit::enqueue_unique(&job, ms),
            (Some(key), None, false) if plain => wit::enqueue_keyed(&job, key),
            _ => wit::enqueue_with(
                &job,
                &wit::EnqueueOptions {
                    key: self.key,
                    unique_for_ms,
                    with_result: self.with_result,
                    expires_in_ms: self.expires_in.map(millis),
                    priority: self.priority,
                },
            ),
        }
        .map_err(Error::fail)
    }
}
