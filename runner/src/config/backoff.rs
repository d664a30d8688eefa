//! The delay before the next attempt when a handler does not choose one:
//! a topic's `backoff`, and the curve it describes.

use std::time::Duration;

/// Exponential backoff between attempts: `base * factor^(attempt-1)`, capped, with jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay after the first failed attempt.
    pub base: Duration,
    /// Growth per further attempt.
    pub factor: f64,
    /// Upper bound on any delay.
    pub max: Duration,
    /// Fraction (0..=1) by which each delay is randomly shortened or lengthened.
    pub jitter: f64,
}

impl Backoff {
    /// The delay after failed attempt `attempt` (1-based): `base * factor^(attempt-1)`,
    /// capped at `max`, then moved by up to ±`jitter` of itself using `unit` (a
    /// random number in `[0, 1)`), and capped again.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let exponent = attempt.saturating_sub(1).min(1000) as i32;
        let raw = self.base.as_secs_f64() * self.factor.powi(exponent);
        let capped = raw.min(self.max.as_secs_f64());
        let jittered = capped * (1.0 + self.jitter * (2.0 * unit - 1.0));
        Duration::from_secs_f64(jittered.clamp(0.0, self.max.as_secs_f64()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff(jitter: f64) -> Backoff {
        Backoff {
            base: Duration::from_secs(1),
            factor: 2.0,
            max: Duration::from_secs(60),
            jitter,
        }
    }

    #[test]
    fn doubles_per_attempt_until_the_cap() {
        let b = backoff(0.0);
        assert_eq!(b.delay(1, 0.5), Duration::from_secs(1));
        assert_eq!(b.delay(2, 0.5), Duration::from_secs(2));
        assert_eq!(b.delay(4, 0.5), Duration::from_secs(8));
        assert_eq!(b.delay(30, 0.5), Duration::from_secs(60));
        assert_eq!(b.delay(u32::MAX, 0.5), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_within_its_fraction() {
        let b = backoff(0.2);
        assert_eq!(b.delay(3, 0.0), Duration::from_secs_f64(3.2));
        assert_eq!(b.delay(3, 0.5), Duration::from_secs(4));
        assert!(b.delay(3, 0.999_999) <= Duration::from_secs_f64(4.8));
    }
}
