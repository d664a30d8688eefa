//! The effects journal of a topic with `journal = "effects"`: what a
//! handler's sandbox asked of the world (outbound HTTP, clocks, random
//! bytes, follow-ups) and what it got, so that the job's next attempt is
//! handed the same answers instead of asking again.
//!
//! Entries are written in batches, one hash field `e:<n>` of the job's
//! journal ([`crate::journal`]) per batch, each batch [`encode`]d: the
//! answer of an HTTP request together with the clock and random reads
//! before it, written (fenced by the attempt, as steps are) before the
//! answer reaches the guest. Positions count per *scope* (the durable step
//! the call was made in, `""` outside any) and per kind, so a step whose
//! result is recorded skips the effects inside it without shifting the
//! others, and a clock read more or fewer times (a poll loop) shifts no
//! request. [`Replay::load`] turns the batches into what the next attempt
//! answers from.

use serde::{Deserialize, Serialize};

use super::QueueError;

mod replay;

pub use replay::{Recorded, Replay, to_json};

/// The largest request or response body an effect records, in bytes: a
/// bigger one stops the job's journal at that call (the rest runs live).
pub const MAX_BODY: usize = 1 << 20;

/// The stored form's version (the first byte of every batch).
const FORMAT: u8 = 1;

/// What kind of effect an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    /// An outbound HTTP request.
    Http,
    /// A read of the wall clock (ns since the Unix epoch).
    Wall,
    /// A read of the monotonic clock (ns).
    Monotonic,
    /// Bytes of `wasi:random/random`.
    Random,
    /// Bytes of `wasi:random/insecure`.
    InsecureRandom,
    /// A follow-up job queued.
    FollowUp,
}

impl Kind {
    /// As the CLI, the API and `/metrics` name it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Http => "http",
            Kind::Wall => "wall_clock",
            Kind::Monotonic => "monotonic_clock",
            Kind::Random => "random",
            Kind::InsecureRandom => "insecure_random",
            Kind::FollowUp => "follow_up",
        }
    }
}

/// What identifies a request when it is replayed: a request that differs
/// in any of these from the recorded one at its position is a divergence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The full URL.
    pub url: String,
    /// SHA-256 of the body.
    pub body_sha256: [u8; 32],
    /// The body's length in bytes.
    pub body_len: u64,
}

/// What a request got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// A response, its body whole.
    Response {
        /// The status code.
        status: u16,
        /// Every header, in order.
        headers: Vec<(String, Vec<u8>)>,
        /// The body.
        body: Vec<u8>,
    },
    /// No response: the `wasi:http` error code's name, and what it said.
    Failed {
        /// The error code (`ConnectionRefused`, `ConnectionReadTimeout`, ...).
        code: String,
        /// Its message.
        detail: String,
    },
}

impl Answer {
    /// Whether it says the request did not succeed and may be worth making
    /// again: no response, 408, 429 or a 5xx. Only such an answer is made
    /// live again when it is the last call a failed attempt made.
    pub fn failed(&self) -> bool {
        match self {
            Answer::Failed { .. } => true,
            Answer::Response { status, .. } => *status >= 500 || *status == 408 || *status == 429,
        }
    }

    /// Its status code, or its error code, for people.
    pub fn summary(&self) -> String {
        match self {
            Answer::Response { status, .. } => status.to_string(),
            Answer::Failed { code, .. } => code.clone(),
        }
    }
}

/// One recorded effect, or the journal's end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Entry {
    /// An outbound request and its answer.
    Http {
        /// The step it was made in (`""`: none).
        scope: String,
        /// Its position among the scope's requests (0-based).
        pos: u32,
        /// Its place among all the job's requests, in the order they were
        /// made (what "the last call" means).
        seq: u64,
        /// The attempt that made it.
        attempt: u32,
        /// When its answer arrived (ms since the Unix epoch).
        at_ms: u64,
        /// What was asked.
        request: Request,
        /// What came back.
        answer: Answer,
    },
    /// Consecutive reads of a clock ([`Kind::Wall`] or [`Kind::Monotonic`]).
    Clock {
        /// The step they were made in.
        scope: String,
        /// Which clock.
        kind: Kind,
        /// The position of the first read.
        first: u32,
        /// What each read returned (ns).
        values: Vec<u64>,
    },
    /// Random bytes drawn ([`Kind::Random`] or [`Kind::InsecureRandom`]).
    Random {
        /// The step they were drawn in.
        scope: String,
        /// Which source.
        kind: Kind,
        /// Where they start in the scope's stream of bytes.
        offset: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A follow-up job queued (it is enqueued only when the attempt acks).
    FollowUp {
        /// The step it was queued in.
        scope: String,
        /// Its position among the scope's follow-ups.
        pos: u32,
        /// The attempt that queued it.
        attempt: u32,
        /// Its topic.
        topic: String,
        /// SHA-256 of its payload.
        payload_sha256: [u8; 32],
        /// The id it was given (the host's, when the handler chose none):
        /// a replay hands the handler the same one.
        id: String,
    },
    /// The journal ends here: what was recorded before these positions
    /// replays, nothing after them is recorded and the job runs live.
    Stop {
        /// The attempt that stopped it.
        attempt: u32,
        /// When (ms).
        at_ms: u64,
        /// Why (a body over the cap, the journal full, a divergence).
        reason: String,
        /// Each scope's position per kind when it stopped (a scope not
        /// listed replays nothing).
        cursors: Vec<(String, Kind, u64)>,
    },
}

impl Entry {
    /// Bytes it adds to the journal, about (what the journal's cap counts).
    pub fn size(&self) -> usize {
        48 + match self {
            Entry::Http {
                scope,
                request,
                answer,
                ..
            } => {
                scope.len()
                    + request.url.len()
                    + match answer {
                        Answer::Response { headers, body, .. } => {
                            body.len()
                                + headers
                                    .iter()
                                    .map(|(n, v)| n.len() + v.len() + 2)
                                    .sum::<usize>()
                        }
                        Answer::Failed { code, detail } => code.len() + detail.len(),
                    }
            }
            Entry::Clock { scope, values, .. } => scope.len() + values.len() * 5,
            Entry::Random { scope, bytes, .. } => scope.len() + bytes.len(),
            Entry::FollowUp {
                scope, topic, id, ..
            } => scope.len() + topic.len() + id.len() + 32,
            Entry::Stop {
                reason, cursors, ..
            } => reason.len() + cursors.iter().map(|(s, _, _)| s.len() + 10).sum::<usize>(),
        }
    }
}

/// A batch of entries as stored: the format byte, then postcard.
pub fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut out = vec![FORMAT];
    out.extend(postcard::to_allocvec(entries).expect("entries serialize"));
    out
}

/// Read back what [`encode`] wrote.
pub fn decode(bytes: &[u8]) -> Result<Vec<Entry>, QueueError> {
    match bytes.split_first() {
        Some((&FORMAT, rest)) => postcard::from_bytes(rest)
            .map_err(|e| QueueError::Protocol(format!("an effects batch does not decode: {e}"))),
        Some((v, _)) => Err(QueueError::Protocol(format!(
            "an effects batch of format {v}: written by a newer hourglass"
        ))),
        None => Err(QueueError::Protocol("an empty effects batch".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_reads_back_as_written() {
        let entries = vec![
            Entry::Http {
                scope: String::new(),
                pos: 0,
                seq: 0,
                attempt: 1,
                at_ms: 1,
                request: Request {
                    method: "POST".into(),
                    url: "http://shop/0".into(),
                    body_sha256: [7; 32],
                    body_len: 3,
                },
                answer: Answer::Failed {
                    code: "ConnectionRefused".into(),
                    detail: "refused".into(),
                },
            },
            Entry::Clock {
                scope: "charge".into(),
                kind: Kind::Wall,
                first: 3,
                values: vec![1, 2, 3],
            },
            Entry::Random {
                scope: String::new(),
                kind: Kind::Random,
                offset: 0,
                bytes: vec![9; 16],
            },
        ];
        assert_eq!(decode(&encode(&entries)).unwrap(), entries);
        assert!(decode(&[]).is_err());
        assert!(
            decode(&[9, 1, 2])
                .unwrap_err()
                .to_string()
                .contains("newer")
        );
    }
}
