//! Wall-clock time in milliseconds since the Unix epoch: the unit of every
//! score in Redis. Only the edges of the program read the clock; everything
//! below takes `now_ms` as an argument.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `d` in whole milliseconds, saturating far below `u64::MAX` so that adding
/// it to a time stays in range.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 4)
}
