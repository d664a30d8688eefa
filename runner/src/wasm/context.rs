//! Which job an instance runs: what every log line of the attempt carries.

use std::sync::Arc;

/// Which job an instance is running, and on which handler version, for the
/// attempt's log lines (fields on each line rather than a span: a span per
/// attempt cost about 2 µs of a no-op job at the default log level).
#[derive(Debug, Clone)]
pub struct JobContext {
    /// The job's topic.
    pub topic: String,
    /// The job's id.
    pub id: String,
    /// The attempt.
    pub attempt: u32,
    /// The handler's content hash.
    pub handler: Arc<str>,
    /// The attempt's span, when spans are exported.
    pub trace: Option<Arc<crate::telemetry::AttemptTrace>>,
    /// The producer's trace context when the attempt has no span (export
    /// off): outbound requests pass it on as is, as a proxy would.
    pub pass_through: Option<crate::redis::TraceContext>,
    /// What a flow job reads of its flow: its dependencies, each with how it
    /// ended (`report.dependencies`), or its batch (`report.batch`).
    pub upstream: crate::redis::Upstream,
    /// Jobs in the call: more than 1 in a batch call (`handle-batch`), where
    /// what belongs to one job (follow-ups, results, progress, durable steps)
    /// is refused.
    pub batch: usize,
    /// Set in a replay check (`check.rs`): the candidate answers from the
    /// job's journal only, nothing reaches the world, and its lines go here.
    pub(crate) check: Option<Arc<crate::wasm::ledger::Ledger>>,
}
