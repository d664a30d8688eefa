//! Durations ("30s", "5m", "14d", "250ms") and sizes ("64MiB") as they are
//! written in `queues.toml`, deserialized with an error that names the value.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The memory limit a topic gets when neither it nor `[defaults]` sets one.
pub const DEFAULT_MEMORY: u64 = 64 << 20;

/// The largest memory a topic may set: a 32-bit WebAssembly memory's size.
pub const MAX_MEMORY: u64 = 4 << 30;

/// The payload limit when `[runner] max_payload` is not set.
pub const DEFAULT_PAYLOAD: u64 = 1 << 20;

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
