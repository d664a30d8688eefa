//! The stored form of a job: what never changes between attempts.
//!
//! Layout: format byte `1`, max attempts (u32 LE, 0 = the topic's default),
//! enqueued-at ms (u64 LE), then the payload bytes. A job pinned to a handler
//! version is written in format `2`: the same header, then the version's
//! length (one byte) and the version (a content hash), then the payload. A
//! job that is not pinned is always written in format `1`, so runners that
//! predate pins read every record they can run. Lua scripts never parse it;
//! only this module does. Attempts, due time and errors live beside it.

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
}

const PLAIN: u8 = 1;
const PINNED: u8 = 2;
const HEADER: usize = 1 + 4 + 8;

/// A stored record that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt job record ({0})")]
pub struct CorruptRecord(pub(crate) &'static str);

impl Record {
    /// The bytes stored in Redis.
    /// A pin longer than 255 bytes cannot be stored: [`check_version`]
    /// refuses it before anything is encoded.
    pub fn encode(&self) -> Vec<u8> {
        let pin = self.version.as_deref().unwrap_or("");
        let mut out = Vec::with_capacity(HEADER + 1 + pin.len() + self.payload.len());
        out.push(if pin.is_empty() { PLAIN } else { PINNED });
        out.extend_from_slice(&self.max_attempts.to_le_bytes());
        out.extend_from_slice(&self.enqueued_at_ms.to_le_bytes());
        if !pin.is_empty() {
            out.push(u8::try_from(pin.len()).expect("check_version bounds a pin"));
            out.extend_from_slice(pin.as_bytes());
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
        let (version, payload) = match bytes[0] {
            PLAIN => (None, &bytes[HEADER..]),
            PINNED => {
                let len = *bytes
                    .get(HEADER)
                    .ok_or(CorruptRecord("pinned, without the version"))?
                    as usize;
                let pin = bytes
                    .get(HEADER + 1..HEADER + 1 + len)
                    .ok_or(CorruptRecord("pinned, with the version cut short"))?;
                let pin = std::str::from_utf8(pin)
                    .map_err(|_| CorruptRecord("pinned to a version that is not text"))?;
                (Some(pin.to_owned()), &bytes[HEADER + 1 + len..])
            }
            _ => return Err(CorruptRecord("unknown format")),
        };
        Ok(Record {
            max_attempts,
            enqueued_at_ms,
            payload: payload.to_vec(),
            version,
        })
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
                    version,
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
        ) {
            let r = Record { max_attempts, enqueued_at_ms, payload, version };
            prop_assert_eq!(Record::decode(&r.encode()), Ok(r));
        }

        #[test]
        fn arbitrary_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Record::decode(&bytes);
        }
    }
}
