//! What a handler answers, and how Rust return values map onto it.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use crate::bindings::hourglass::handler::types as wit;

/// The usual return type of a handler: `Ok` acks, `Err` retries or fails.
pub type Result<T = (), E = Error> = core::result::Result<T, E>;

/// The answer for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the job and its payload are deleted.
    Ack,
    /// Done, with a result (bytes; JSON by convention) for whoever waits on
    /// the job (kept when the topic has `results` in queues.toml) and for
    /// follow-ups enqueued with [`crate::FollowUp::with_parent_result`].
    AckWith(Vec<u8>),
    /// Try again after `delay` (the topic's backoff when `None`).
    Retry {
        /// How long to wait before the next attempt.
        delay: Option<Duration>,
        /// Why, recorded as the job's last error.
        reason: String,
    },
    /// Give up for good: the job goes to the dead-letter set with this reason.
    Fail(String),
}

impl Outcome {
    /// Ack with `result` (bytes; JSON by convention).
    pub fn ack_with(result: impl Into<Vec<u8>>) -> Outcome {
        Outcome::AckWith(result.into())
    }

    /// Ack with `value` as JSON.
    pub fn ack_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<Outcome, Error> {
        serde_json::to_vec(value)
            .map(Outcome::AckWith)
            .map_err(|e| Error::fail(alloc::format!("result: {e}")))
    }

    /// Retry after the topic's backoff.
    pub fn retry(reason: impl Into<String>) -> Outcome {
        Outcome::Retry {
            delay: None,
            reason: reason.into(),
        }
    }

    /// Retry after `delay`.
    pub fn retry_in(delay: Duration, reason: impl Into<String>) -> Outcome {
        Outcome::Retry {
            delay: Some(delay),
            reason: reason.into(),
        }
    }

    /// Dead-letter the job now.
    pub fn fail(reason: impl Into<String>) -> Outcome {
        Outcome::Fail(reason.into())
    }

    pub(crate) fn into_wit(self) -> wit::Outcome {
        match self {
            Outcome::Ack => wit::Outcome::Ack,
            Outcome::AckWith(result) => {
                crate::bindings::hourglass::handler::report::set_result(&result);
                wit::Outcome::Ack
            }
            Outcome::Retry { delay, reason } => wit::Outcome::Retry(wit::Retry {
                delay_ms: delay.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                reason,
            }),
            Outcome::Fail(reason) => wit::Outcome::Fail(reason),
        }
    }
}

/// A handler error: retryable unless made with [`Error::fail`].
///
/// Any `std::error::Error` converts into a retryable one, so `?` works on
/// the usual fallible calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
    permanent: bool,
}

impl Error {
    /// A failure that retrying may fix.
    pub fn retry(message: impl fmt::Display) -> Error {
        Error {
            message: message.to_string(),
            permanent: false,
        }
    }

    /// A failure retrying cannot fix: the job is dead-lettered now.
    pub fn fail(message: impl fmt::Display) -> Error {
        Error {
            message: message.to_string(),
            permanent: true,
        }
    }

    /// Whether the job goes to the dead-letter set without further attempts.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: core::error::Error> From<E> for Error {
    fn from(e: E) -> Error {
        Error::retry(e)
    }
}

/// What a handler function may return.
pub trait IntoOutcome {
    /// The outcome the runner acts on.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Outcome::Ack
    }
}

impl<T: IntoOutcome> IntoOutcome for Result<T, Error> {
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(t) => t.into_outcome(),
            Err(e) if e.permanent => Outcome::Fail(e.message),
            Err(e) => Outcome::Retry {
                delay: None,
                reason: e.message,
            },
        }
    }
}
