//! The verdict on a canary: [`judge`] compares its attempts with the stable
//! version's over the same time, as every runner reported them. Pure: the
//! counts, the policy and the time are arguments.

use crate::config::RolloutPolicy;
use crate::redis::{Canary, Change};

/// The canary's sample for crashes (traps, time and memory limits), which a
/// handler never chooses: judged after this many attempts, or `min_attempts`
/// if that is smaller.
const CRASH_SAMPLE: u32 = 10;

/// The verdict `policy` gives `canary` at `now`, with its reason, if any.
///
/// - **Crashed**: after `min(min_attempts, 10)` attempts, the canary's
///   crash rate (traps, time and memory limits) is over `max_failure_rate`
///   and over the stable version's by more than `margin`: rolled back.
/// - **Failing**: after `min_attempts`, its failure rate (every attempt that
///   did not ack) is over `max_failure_rate` and over the stable version's
///   by more than `margin`: rolled back, without waiting for the window.
/// - **Window over**: with `min_attempts`, promoted if its failure rate is
///   at most the stable version's plus `margin`, else rolled back. Without
///   them it keeps its share until it has them.
pub(crate) fn judge(policy: &RolloutPolicy, canary: &Canary, now: u64) -> Option<(Change, String)> {
    let (c, s) = (canary.tally, canary.stable_tally);
    let pct = |x: f64| format!("{:.0}%", x * 100.0);
    let over =
        |rate: f64, stable: f64| rate > policy.max_failure_rate && rate > stable + policy.margin;
    let crash_sample = u64::from(policy.min_attempts.min(CRASH_SAMPLE));
    if c.attempts >= crash_sample && over(c.crash_rate(), s.crash_rate()) {
        return Some((
            Change::RollBack,
            format!(
                "{} of {} attempts crashed ({}; stable {} of {}), over the limit of {}",
                c.crashes,
                c.attempts,
                pct(c.crash_rate()),
                s.crashes,
                s.attempts,
                pct(policy.max_failure_rate)
            ),
        ));
    }
    let min = u64::from(policy.min_attempts);
    if c.attempts >= min && over(c.failure_rate(), s.failure_rate()) {
        return Some((
            Change::RollBack,
            format!(
                "{} of {} attempts failed ({}; stable {}), over the limit of {}",
                c.failures,
                c.attempts,
                pct(c.failure_rate()),
                pct(s.failure_rate()),
                pct(policy.max_failure_rate)
            ),
        ));
    }
    if now >= canary.ends_ms && c.attempts >= min {
        let worse = c.failure_rate() > s.failure_rate() + policy.margin;
        let numbers = format!(
            "{} attempts, {} failed (stable {} of {})",
            c.attempts,
            pct(c.failure_rate()),
            pct(s.failure_rate()),
            s.attempts
        );
        return Some(if worse {
            (
                Change::RollBack,
                format!(
                    "window over: {numbers}, worse than stable by more than {}",
                    pct(policy.margin)
                ),
            )
        } else {
            (Change::Promote, format!("window over: {numbers}"))
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::redis::Tally;

    const POLICY: RolloutPolicy = RolloutPolicy {
        canary: 0.1,
        window: Duration::from_secs(300),
        min_attempts: 50,
        max_failure_rate: 0.2,
        margin: 0.05,
        journaled: crate::config::Journaled::Pinned,
    };

    fn canary(c: (u64, u64, u64), s: (u64, u64, u64), ends_ms: u64) -> Canary {
        let t = |(attempts, failures, crashes)| Tally {
            attempts,
            failures,
            crashes,
        };
        Canary {
            version: "c".into(),
            share: 0.1,
            started_ms: 0,
            ends_ms,
            tally: t(c),
            stable_tally: t(s),
        }
    }

    fn verdict(c: Canary, now: u64) -> Option<Change> {
        judge(&POLICY, &c, now).map(|(change, _)| change)
    }

    #[test]
    fn a_failing_canary_is_rolled_back_once_it_has_the_sample_not_before() {
        assert_eq!(verdict(canary((49, 49, 0), (400, 0, 0), 1000), 0), None);
        assert_eq!(
            verdict(canary((50, 11, 0), (400, 0, 0), 1000), 0),
            Some(Change::RollBack)
        );
        // at the limit is not over it
        assert_eq!(verdict(canary((50, 10, 0), (400, 0, 0), 1000), 0), None);
    }

    #[test]
    fn crashes_are_judged_on_ten_attempts() {
        assert_eq!(verdict(canary((9, 9, 9), (90, 0, 0), 1000), 0), None);
        assert_eq!(
            verdict(canary((10, 10, 10), (90, 0, 0), 1000), 0),
            Some(Change::RollBack)
        );
    }

    #[test]
    fn a_canary_failing_as_often_as_stable_is_not_blamed() {
        // an upstream outage: both fail half the time
        assert_eq!(verdict(canary((60, 30, 0), (600, 300, 0), 1000), 0), None);
        assert_eq!(
            verdict(canary((60, 30, 0), (600, 300, 0), 1000), 1000),
            Some(Change::Promote)
        );
    }

    #[test]
    fn promoted_when_the_window_ends_with_the_sample_and_no_worse() {
        assert_eq!(verdict(canary((60, 3, 0), (600, 30, 0), 1000), 999), None);
        assert_eq!(
            verdict(canary((60, 3, 0), (600, 30, 0), 1000), 1000),
            Some(Change::Promote)
        );
        // no sample yet: it keeps its share past the window
        assert_eq!(verdict(canary((20, 0, 0), (600, 0, 0), 1000), 5000), None);
    }

    #[test]
    fn worse_than_stable_by_more_than_the_margin_is_rolled_back_at_the_window_end() {
        // 15% against 5%: under the limit, over stable + 5 points
        assert_eq!(verdict(canary((100, 15, 0), (900, 45, 0), 1000), 0), None);
        assert_eq!(
            verdict(canary((100, 15, 0), (900, 45, 0), 1000), 1000),
            Some(Change::RollBack)
        );
    }
}
