//! The stored form of a job: what never changes between attempts.
//!
//! Layout: version byte `1`, max attempts (u32 LE, 0 = the topic's default),
//! enqueued-at ms (u64 LE), then the payload bytes. Lua scripts never parse
//! it; only this module does. Attempts, due time and errors live beside it.

/// What is stored for a job at enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Attempts the job gets; 0 means the topic's `max_attempts` at run time.
    pub max_attempts: u32,
    /// When the job was accepted (ms since the Unix epoch).
    pub enqueued_at_ms: u64,
    /// The producer's bytes.
    pub payload: Vec<u8>,
}

const VERSION: u8 = 1;
const HEADER: usize = 1 + 4 + 8;

/// A stored record that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt job record ({0})")]
pub struct CorruptRecord(pub(crate) &'static str);

impl Record {
    /// The bytes stored in Redis.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.payload.len());
        out.push(VERSION);
        out.extend_from_slice(&self.max_attempts.to_le_bytes());
        out.extend_from_slice(&self.enqueued_at_ms.to_le_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// Read back what [`Record::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<Record, CorruptRecord> {
        if bytes.len() < HEADER {
            return Err(CorruptRecord("shorter than its header"));
        }
        if bytes[0] != VERSION {
            return Err(CorruptRecord("unknown version"));
        }
        let max_attempts = u32::from_le_bytes(bytes[1..5].try_into().expect("4 bytes"));
        let enqueued_at_ms = u64::from_le_bytes(bytes[5..13].try_into().expect("8 bytes"));
        Ok(Record {
            max_attempts,
            enqueued_at_ms,
            payload: bytes[HEADER..].to_vec(),
        })
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
            let r = Record {
                max_attempts: 3,
                enqueued_at_ms: 1_700_000_000_123,
                payload,
            };
            assert_eq!(Record::decode(&r.encode()), Ok(r));
        }
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
        ) {
            let r = Record { max_attempts, enqueued_at_ms, payload };
            prop_assert_eq!(Record::decode(&r.encode()), Ok(r));
        }

        #[test]
        fn arbitrary_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Record::decode(&bytes);
        }
    }
}
