//! What a pipeline call can fail with, and which failures are worth
//! retrying: the split between waiting for Redis and failing at once.

/// A failed pipeline operation: bad input (permanent) or Redis (retryable).
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The connection or the server failed; retrying may help. (Not a
    /// `source`: the error's own text already includes its cause.)
    #[error("redis: {0}")]
    Redis(redis::RedisError),
    /// A script answered something this version does not understand.
    #[error("unexpected reply from redis: {0}")]
    Protocol(String),
    /// The request itself is wrong (a bad id, a payload over the limit):
    /// nothing was written, and retrying cannot help.
    #[error("{0}")]
    Invalid(String),
    /// What the request would create exists already (a flow's id): nothing
    /// was written.
    #[error("{0}")]
    Exists(String),
    /// The change was made on the primary, but fewer replicas than
    /// `[redis] durability` asks for confirmed it in time: a failover now
    /// could lose it. Retry (every such change is idempotent).
    #[error(
        "only {confirmed} of {wanted} replicas confirmed the change within {timeout:?} ([redis] durability): it is on the primary but a failover could lose it; retry (an enqueue by id answers `duplicate` if the job was kept and is still live or reserved by unique-for)"
    )]
    NotReplicated {
        /// Replicas asked for.
        wanted: u32,
        /// Replicas that confirmed.
        confirmed: u32,
        /// How long they were waited for.
        timeout: std::time::Duration,
    },
}

impl From<redis::RedisError> for QueueError {
    fn from(e: redis::RedisError) -> QueueError {
        QueueError::Redis(e)
    }
}

impl QueueError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            QueueError::Invalid(_) | QueueError::Exists(_) => false,
            QueueError::Protocol(_) | QueueError::NotReplicated { .. } => true,
            QueueError::Redis(e) => !is_misconfigured(e),
        }
    }
}

/// A failure no retry fixes: wrong credentials, a password missing, a bad URL,
/// a certificate not trusted (or not presented).
fn is_misconfigured(e: &redis::RedisError) -> bool {
    use redis::ErrorKind;
    // TLS and cluster start-up failures arrive as I/O errors: read their text
    let text = e.to_string().to_ascii_lowercase();
    matches!(
        e.kind(),
        ErrorKind::AuthenticationFailed | ErrorKind::InvalidClientConfig
    ) || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
        || text.contains("authentication")
        || text.contains("certificate")
}

/// A stored record that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt job record ({0})")]
pub struct CorruptRecord(pub(crate) &'static str);
