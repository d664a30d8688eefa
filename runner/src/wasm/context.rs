//! Which job an instance runs: what every log line of the guest carries.

/// Which job an instance is running, for its log lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobContext {
    /// The job's topic.
    pub topic: String,
    /// The job's id.
    pub id: String,
    /// The attempt.
    pub attempt: u32,
}
