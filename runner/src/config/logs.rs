//! `logs = { keep = "64KiB" }` or `logs = false`, per topic and in
//! `[defaults]`: how much of what a handler logs (its log functions, stdout
//! and stderr) each job keeps in Redis (`hourglass logs`, the API, the
//! console). On by default, 64 KiB a job; an attempt that logs nothing
//! writes nothing.

use serde::Deserialize;
use toml::Spanned;

use super::units::Size;

/// The least and the most `logs.keep` may be.
pub const LOGS_KEEP_RANGE: std::ops::RangeInclusive<u64> = (1 << 10)..=(16 << 20);

/// `logs` as written.
#[derive(Debug, Clone)]
pub(super) enum RawLogs {
    /// `logs = false` (none kept) or `logs = true` (the default).
    On(bool),
    /// `logs = { keep = "64KiB" }`.
    Keep(RawKeep),
}

// by hand, not untagged: a typo inside the table is then an error naming it
impl<'de> Deserialize<'de> for RawLogs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RawLogs, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = RawLogs;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("`false`, `true` or a table `{ keep = \"64KiB\" }`")
            }

            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<RawLogs, E> {
                Ok(RawLogs::On(on))
            }

            fn visit_map<M: serde::de::MapAccess<'de>>(self, map: M) -> Result<RawLogs, M::Error> {
                RawKeep::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(RawLogs::Keep)
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKeep {
    pub keep: Option<Spanned<Size>>,
}

/// The bytes of logs a job of a topic keeps (0: none), from its `logs` or
/// the `[defaults]` one; an error (with where) for a `keep` out of range.
pub(super) fn resolve(
    topic: Option<&RawLogs>,
    defaults: Option<&RawLogs>,
    name: &str,
) -> Result<u64, (Option<std::ops::Range<usize>>, String)> {
    match topic.or(defaults) {
        None | Some(RawLogs::On(true)) | Some(RawLogs::Keep(RawKeep { keep: None })) => {
            Ok(hourglass_client::logs::DEFAULT_KEEP)
        }
        Some(RawLogs::On(false)) => Ok(0),
        Some(RawLogs::Keep(RawKeep { keep: Some(keep) })) => {
            let bytes = keep.get_ref().0;
            if LOGS_KEEP_RANGE.contains(&bytes) {
                Ok(bytes)
            } else {
                Err((
                    Some(keep.span()),
                    format!(
                        "field `logs.keep`: topic {name:?}: between 1KiB and 16MiB a job (or `logs = false` to keep none)"
                    ),
                ))
            }
        }
    }
}
