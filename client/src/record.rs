//! The stored form of a job: what never changes between attempts.
//!
//! Layout: format byte `1`, max attempts (u32 LE, 0 = the topic's default),
//! enqueued-at ms (u64 LE), then the payload bytes. A job pinned to a handler
//! version is written in format `2`: the same header, then the version's
//! length (one byte) and the version (a content hash), then the payload. A
//! job that is not pinned is always written in format `1`, so runners that
//! predate pins read every record they can run. Anything more is written in
//! format `3`: the header, a flags byte saying which optional parts follow,
//! in this order: the version (bit 0: its length, one byte, then the
//! version), the parent's result handed to a follow-up (bit 1: u32 LE
//! length + bytes) and the producer's trace context (bit 2: `traceparent`
//! with a one-byte length, `tracestate` with a u16 LE length) and the
//! job's place in a flow (bit 3: [`crate::flow::FlowRef`]); then the
//! payload. A flag this build does not know is a
//! record from a newer hourglass, refused as such. Lua scripts never parse
//! it; only this module does. Attempts, due time and errors live beside it.

use super::{CorruptRecord, TraceContext};
use crate::flow::FlowRef;

/// What is stored for a job at enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Attempts the job gets; 0 means the topic's `max_attempts` at run time.
    pub max_attempts: u32,
    /// When the job was accepted (ms since the Unix epoch).
    pub enqueued_at_ms: u64,
    /// The producer's bytes.
    pub payload: Vec<u8>,
    /// The handler version (content hash) every attempt must run on, if the
    /// job is pinned to one.
    pub version: Option<String>,
    /// The result of the job that started this one, if it handed it on.
    pub parent_result: Option<Vec<u8>>,
    /// The producer's trace context, if it gave one.
    pub trace: Option<TraceContext>,
    /// The flow the job belongs to, if any.
    pub flow: Option<FlowRef>,
}

const PLAIN: u8 = 1;
const PINNED: u8 = 2;
const EXTENDED: u8 = 3;
const HEADER: usize = 1 + 4 + 8;

/// Format 3's flags: which optional parts follow the header.
const HAS_VERSION: u8 = 1;
const HAS_PARENT_RESULT: u8 = 2;
const HAS_TRACE: u8 = 4;
const HAS_FLOW: u8 = 8;
const KNOWN_FLAGS: u8 = HAS_VERSION | HAS_PARENT_RESULT | HAS_TRACE | HAS_FLOW;

impl Record {
    /// The record's bytes: what a job's stored value holds after its due
    /// time ([`Record::encode_stored`] writes both, [`split_stored`] splits
    /// them). A pin longer than 255 bytes cannot be stored:
    /// [`check_version`] refuses it before anything is encoded.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_after(&[])
    }

    /// A job's stored value of layout 3 with this record, waiting for
    /// `due_ms` (as [`split_stored`] reads it and `prelude.lua`'s
    /// `stored_value` writes it): built here so the enqueue script stores the
    /// bytes it is given instead of copying each value to prefix it.
    pub fn encode_stored(&self, due_ms: u64) -> Vec<u8> {
        let mut head = [0u8; 9];
        head[1..].copy_from_slice(&(due_ms as f64).to_be_bytes());
        self.encode_after(&head)
    }

    fn encode_after(&self, head: &[u8]) -> Vec<u8> {
        let pin = self.version.as_deref().unwrap_or("");
        let parent = self.parent_result.as_deref();
        let trace = self.trace.as_ref();
        let mut out = Vec::with_capacity(
            head.len()
                + HEADER
                + 9
                + pin.len()
                + parent.map_or(0, <[u8]>::len)
                + trace.map_or(0, |t| t.traceparent.len() + t.tracestate.len())
                + self.payload.len(),
        );
        let flags = if pin.is_empty() { 0 } else { HAS_VERSION }
            | if parent.is_some() {
                HAS_PARENT_RESULT
            } else {
                0
            }
            | if trace.is_some() { HAS_TRACE } else { 0 }
            | if self.flow.is_some() { HAS_FLOW } else { 0 };
        out.extend_from_slice(head);
        out.push(match flags {
            0 => PLAIN,
            HAS_VERSION => PINNED,
            _ => EXTENDED,
        });
        out.extend_from_slice(&self.max_attempts.to_le_bytes());
        out.extend_from_slice(&self.enqueued_at_ms.to_le_bytes());
        if flags & !HAS_VERSION != 0 {
            out.push(flags);
        }
        if !pin.is_empty() {
            out.push(u8::try_from(pin.len()).expect("check_version bounds a pin"));
            out.extend_from_slice(pin.as_bytes());
        }
        if let Some(parent) = parent {
            out.extend_from_slice(&(parent.len() as u32).to_le_bytes());
            out.extend_from_slice(parent);
        }
        if let Some(t) = trace {
            // TraceContext::parse bounds both
            out.push(u8::try_from(t.traceparent.len()).expect("a traceparent is short"));
            out.extend_from_slice(t.traceparent.as_bytes());
            let state = u16::try_from(t.tracestate.len()).expect("MAX_TRACESTATE bounds it");
            out.extend_from_slice(&state.to_le_bytes());
            out.extend_from_slice(t.tracestate.as_bytes());
        }
        if let Some(flow) = &self.flow {
            flow.write(&mut out);
        }
        out.extend_from_slice(&self.payload);
        out
    }

    /// Read back what [`Record::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<Record, CorruptRecord> {
        if bytes.len() < HEADER {
            return Err(CorruptRecord("shorter than its header"));
        }
        let max_attempts = u32::from_le_bytes(bytes[1..5].try_into().expect("4 bytes"));
        let enqueued_at_ms = u64::from_le_bytes(bytes[5..13].try_into().expect("8 bytes"));
        let mut rest = &bytes[HEADER..];
        let flags = match bytes[0] {
            PLAIN => 0,
            PINNED => HAS_VERSION,
            EXTENDED => {
                let (&flags, after) = rest
                    .split_first()
                    .ok_or(CorruptRecord("without its flags"))?;
                if flags & !KNOWN_FLAGS != 0 {
                    return Err(CorruptRecord("written by a newer hourglass"));
                }
                rest = after;
                flags
            }
            _ => return Err(CorruptRecord("unknown format")),
        };
        let mut version = None;
        if flags & HAS_VERSION != 0 {
            let (&len, after) = rest
                .split_first()
                .ok_or(CorruptRecord("pinned, without the version"))?;
            let pin = after
                .get(..len as usize)
                .ok_or(CorruptRecord("pinned, with the version cut short"))?;
            let pin = std::str::from_utf8(pin)
                .map_err(|_| CorruptRecord("pinned to a version that is not text"))?;
            version = Some(pin.to_owned());
            rest = &after[len as usize..];
        }
        let mut parent_result = None;
        if flags & HAS_PARENT_RESULT != 0 {
            let len = rest
                .get(..4)
                .ok_or(CorruptRecord("the parent's result cut short"))?;
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            let parent = rest
                .get(4..4 + len)
                .ok_or(CorruptRecord("the parent's result cut short"))?;
            parent_result = Some(parent.to_vec());
            rest = &rest[4 + len..];
        }
        let mut trace = None;
        if flags & HAS_TRACE != 0 {
            let cut = CorruptRecord("the trace context cut short");
            let (&len, after) = rest.split_first().ok_or(cut.clone())?;
            let parent = after.get(..len as usize).ok_or(cut.clone())?;
            let after = &after[len as usize..];
            let state_len = after.get(..2).ok_or(cut.clone())?;
            let state_len = u16::from_le_bytes(state_len.try_into().expect("2 bytes")) as usize;
            let state = after.get(2..2 + state_len).ok_or(cut)?;
            let text = |b: &[u8]| {
                std::str::from_utf8(b)
                    .map(str::to_owned)
                    .map_err(|_| CorruptRecord("a trace context that is not text"))
            };
            trace = Some(TraceContext {
                traceparent: text(parent)?,
                tracestate: text(state)?,
            });
            rest = &after[2 + state_len..];
        }
        let flow = match flags & HAS_FLOW {
            0 => None,
            _ => Some(FlowRef::read(&mut rest)?),
        };
        Ok(Record {
            max_attempts,
            enqueued_at_ms,
            payload: rest.to_vec(),
            version,
            parent_result,
            trace,
            flow,
        })
    }
}

/// Split a job's stored value into the due time it last waited for and its
/// record. Layout 3 stores a zero byte, that due time (ms, a big-endian
/// double, as Lua's `struct.pack('>d')` writes it) and the record
/// (`lua/prelude.lua`: stored); layout 2 stored the record alone, whose
/// first byte (its format) is never zero.
pub fn split_stored(value: &[u8]) -> (Option<u64>, &[u8]) {
    match value {
        [0, rest @ ..] if rest.len() >= 8 => {
            let due = f64::from_be_bytes(rest[..8].try_into().expect("8 bytes"));
            (Some(due as u64), &rest[8..])
        }
        _ => (None, value),
    }
}

/// A handler version as producers name it: the 16 hex digits `hourglass
/// versions` lists (the start of the component's SHA-256).
pub fn check_version(version: &str) -> Result<(), String> {
    if version.len() == 16 && version.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(format!(
            "{version:?} is not a handler version: 16 hex digits, as `hourglass versions TOPIC` lists them"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_value_splits_into_its_due_time_and_record() {
        let record = Record {
            max_attempts: 5,
            enqueued_at_ms: 1_795_922_205_848,
            payload: b"\0\x01payload".to_vec(),
            version: Some("0123456789abcdef".into()),
            parent_result: None,
            trace: None,
            flow: None,
        };
        let stored = record.encode_stored(1_795_922_205_900);
        assert_eq!(
            split_stored(&stored),
            (Some(1_795_922_205_900), &record.encode()[..])
        );
        assert_eq!(stored[0], 0, "layout 3 starts with a zero byte");
    }

    #[test]
    fn round_trips_binary_and_empty_payloads() {
        for payload in [
            vec![],
            vec![0, 255, 10, 13],
            b"{\"a\":1}".to_vec(),
            vec![7; 1 << 16],
        ] {
            for version in [None, Some("0123456789abcdef".to_owned())] {
                let r = Record {
                    max_attempts: 3,
                    enqueued_at_ms: 1_700_000_000_123,
                    payload: payload.clone(),
                    version: version.clone(),
                    parent_result: None,
                    trace: None,
                    flow: None,
                };
                assert_eq!(Record::decode(&r.encode()), Ok(r.clone()));
                let r = Record {
                    parent_result: Some(b"{\"receipt\":\"r-1\"}".to_vec()),
                    ..r
                };
                assert_eq!(r.encode()[0], EXTENDED);
                assert_eq!(Record::decode(&r.encode()), Ok(r.clone()));
                let r = Record {
                    trace: Some(
                        TraceContext::parse(
                            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                            Some("congo=t61rcWkgMzE"),
                        )
                        .unwrap(),
                    ),
                    ..r
                };
                assert_eq!(Record::decode(&r.encode()), Ok(r.clone()));
                let r = Record {
                    flow: Some(FlowRef {
                        flow: "album-7".into(),
                        index: 41,
                    }),
                    ..r
                };
                assert_eq!(Record::decode(&r.encode()), Ok(r));
            }
        }
    }

    #[test]
    fn an_unpinned_job_keeps_the_first_format() {
        let r = Record {
            max_attempts: 0,
            enqueued_at_ms: 1,
            payload: b"x".to_vec(),
            version: None,
            parent_result: None,
            trace: None,
            flow: None,
        };
        assert_eq!(r.encode()[0], 1, "runners before pins read it");
        assert_eq!(r.encode().len(), HEADER + 1);
    }

    #[test]
    fn versions_are_sixteen_hex_digits() {
        assert!(check_version("0123456789abcdef").is_ok());
        assert!(check_version("0123456789abcde").is_err());
        assert!(check_version("0123456789abcdeg").is_err());
        assert!(check_version("").is_err());
    }

    #[test]
    fn a_record_with_flags_this_build_does_not_know_is_from_a_newer_hourglass() {
        let mut bytes = Record {
            max_attempts: 0,
            enqueued_at_ms: 1,
            payload: b"x".to_vec(),
            version: None,
            parent_result: Some(vec![1]),
            trace: None,
            flow: None,
        }
        .encode();
        bytes[HEADER] |= 0x80;
        assert_eq!(
            Record::decode(&bytes),
            Err(CorruptRecord("written by a newer hourglass"))
        );
    }

    #[test]
    fn rejects_truncated_and_foreign_bytes() {
        assert!(Record::decode(b"").is_err());
        assert!(Record::decode(&[1, 0, 0]).is_err());
        assert!(Record::decode(&[9; 20]).is_err());
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn any_record_round_trips(
            max_attempts in any::<u32>(),
            enqueued_at_ms in any::<u64>(),
            payload in proptest::collection::vec(any::<u8>(), 0..2048),
            version in proptest::option::of("[0-9a-f]{16}"),
            parent_result in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
            trace in proptest::option::of(("[0-9a-f]{32}", "[0-9a-f]{16}", "[ -~]{0,40}")),
            flow in proptest::option::of(("[a-z0-9:@._-]{1,64}", any::<u32>())),
        ) {
            let flow = flow.map(|(flow, index)| FlowRef { flow, index });
            let trace = trace.map(|(t, s, state)| TraceContext {
                traceparent: format!("00-{t}-{s}-01"),
                tracestate: state,
            });
            let r = Record { max_attempts, enqueued_at_ms, payload, version, parent_result, trace, flow };
            prop_assert_eq!(Record::decode(&r.encode()), Ok(r));
        }

        #[test]
        fn arbitrary_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Record::decode(&bytes);
        }
    }
}
