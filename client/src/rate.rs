//! A rate, as the claim scripts enforce it (GCRA) across runners: a
//! topic's, or each tenant key's.

/// A topic's rate, as the claim script enforces it (GCRA) across runners.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// The steady spacing between starts, in ms (fractional).
    pub interval_ms: f64,
    /// Starts allowed at once beyond the steady rate.
    pub burst: u32,
}
