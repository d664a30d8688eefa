//! Times as the commands print them.

/// A timestamp (ms) as RFC 3339, and how far from `now` it is.
pub(super) fn when(ms: u64, now: u64) -> String {
    let at = jiff::Timestamp::from_millisecond(ms as i64)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| ms.to_string());
    let far =
        |d: u64| humantime::format_duration(std::time::Duration::from_millis(d / 1000 * 1000));
    if ms > now + 999 {
        format!("{at} (in {})", far(ms - now))
    } else if now > ms + 999 {
        format!("{at} ({} ago)", far(now - ms))
    } else {
        format!("{at} (now)")
    }
}
