//! Durations ("30s", "5m", "14d", "250ms") and sizes ("64MiB") as they are
//! written in `queues.toml`, deserialized with an error that names the value.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The memory limit a topic gets when neither it nor `[defaults]` sets one.
pub const DEFAULT_MEMORY: u64 = 64 << 20;

/// The smallest memory a topic may set.
pub const MIN_MEMORY: u64 = 1 << 20;

/// The largest memory a topic may set: a 32-bit WebAssembly memory's size.
pub const MAX_MEMORY: u64 = 4 << 30;

pub use hourglass_client::DEFAULT_PAYLOAD;

/// The largest `max_payload`: Redis' own limit for one value is 512 MiB.
pub const MAX_PAYLOAD: u64 = 256 << 20;

/// Parse a human duration such as `30s`, `1h 30m`, `250ms` or `14d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("invalid duration {text:?} ({e}); write e.g. \"250ms\", \"30s\", \"5m\", \"14d\"")
    })
}

/// Parse a size such as `64MiB`, `512KiB` or `1GB`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("invalid size {text:?} ({e}); write e.g. \"64MiB\""))
}

/// A duration field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text)
            .map(Dur)
            .map_err(serde::de::Error::custom)
    }
}

/// A size field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        let text = String::deserialize(d)?;
        parse_size(&text)
            .map(Size)
            .map_err(serde::de::Error::custom)
    }
}

/// A count that must be at least 1 (concurrency, attempts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Positive(pub u32);

impl<'de> Deserialize<'de> for Positive {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Positive, D::Error> {
        match u32::deserialize(d)? {
            0 => Err(serde::de::Error::custom("must be at least 1")),
            n => Ok(Positive(n)),
        }
    }
}

/// A duration that must not be zero (a time limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonZeroDur(pub Duration);

impl<'de> Deserialize<'de> for NonZeroDur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NonZeroDur, D::Error> {
        match Dur::deserialize(d)?.0 {
            zero if zero.is_zero() => Err(serde::de::Error::custom(
                "must be longer than zero (every attempt would be stopped at once)",
            )),
            d => Ok(NonZeroDur(d)),
        }
    }
}

/// A backoff growth factor: finite, at least 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Factor(pub f64);

impl<'de> Deserialize<'de> for Factor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Factor, D::Error> {
        match f64::deserialize(d)? {
            f if f.is_finite() && f >= 1.0 => Ok(Factor(f)),
            f => Err(serde::de::Error::custom(format!(
                "{f} is not a growth factor; write a number of at least 1.0, e.g. 2.0"
            ))),
        }
    }
}

/// A fraction between 0 and 1 (jitter).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fraction(pub f64);

impl<'de> Deserialize<'de> for Fraction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Fraction, D::Error> {
        match f64::deserialize(d)? {
            f if (0.0..=1.0).contains(&f) => Ok(Fraction(f)),
            f => Err(serde::de::Error::custom(format!(
                "{f} is not between 0.0 and 1.0"
            ))),
        }
    }
}

/// A share written as a percentage, `"10%"`: more than 0 and less than 100
/// (a canary that gets nothing, or everything, is not a canary). Kept as a
/// fraction (0.1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share(pub f64);

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Share, D::Error> {
        let text = String::deserialize(d)?;
        let percent = text
            .trim()
            .strip_suffix('%')
            .and_then(|n| n.trim().parse::<f64>().ok());
        match percent {
            Some(p) if p > 0.0 && p < 100.0 => Ok(Share(p / 100.0)),
            _ => Err(serde::de::Error::custom(format!(
                "{text:?} is not a share of attempts; write a percentage above 0 and below 100, e.g. \"10%\""
            ))),
        }
    }
}

/// A start rate written as `"10/s"`, `"600/m"`, `"5/h"` or `"3/10s"`:
/// starts per period, as (starts, period).
#[derive(Debug, Clone, Copy)]
pub struct PerPeriod(pub u32, pub Duration);

impl<'de> Deserialize<'de> for PerPeriod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PerPeriod, D::Error> {
        let text = String::deserialize(d)?;
        parse_per_period(&text).map_err(serde::de::Error::custom)
    }
}

/// Parse [`PerPeriod`].
pub fn parse_per_period(text: &str) -> Result<PerPeriod, String> {
    let bad = || format!("{text:?} is not a rate like \"10/s\", \"600/m\", \"5/h\" or \"3/10s\"");
    let (n, per) = text.trim().split_once('/').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().ok().filter(|n| *n > 0).ok_or_else(bad)?;
    let per = match per.trim() {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        other => parse_duration(other).map_err(|_| bad())?,
    };
    if per.is_zero() {
        return Err(bad());
    }
    Ok(PerPeriod(n, per))
}
