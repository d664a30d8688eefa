//! Durable handlers' journals: what a job's steps returned, when its sleeps
//! and waits end, the signals sent to it, and the handler version it is
//! pinned to; and what a suspended job waits for.
//!
//! A job's journal is one hash, `<keys.journal>:<id>` (the topic's hash
//! tag), written by `step.lua` (one step, fenced by the attempt, as soon as
//! the step returns), `suspend.lua` (a sleep's or a wait's wake time),
//! `signal.lua` and `wake.lua`; the topic's hash `keys.journal` marks the
//! jobs that have one, so that a claim reads only those journals and an ack
//! of a topic that never journals pays one `EXISTS`. Fields:
//!
//! | field       | value                                                     |
//! |-------------|-----------------------------------------------------------|
//! | `v`         | the handler version that wrote the first entry            |
//! | `s:<name>`  | a step's result ([`Step::encode`])                         |
//! | `t:<name>`  | a sleep's or a signal wait's wake time (ms, decimal)      |
//! | `g:<name>`  | a signal's payload, the first one sent under that name    |
//! | `e:<n>`     | batch `n` of an effects journal ([`crate::effects`])      |
//! | `p:<name>`  | how `patched(name)` answered the job: `1` new path, `0` old |
//!
//! The journal lives as long as its job: an ack or a cancel deletes it, a
//! dead letter keeps it for `hourglass dead retry` (deleted with the dead
//! letter, or when it is replayed on another version).

use std::collections::BTreeMap;

use redis::Value;

use super::QueueError;
use super::effects::{self, Entry};
use super::reply::{bytes, string};

/// The largest result one step may record, in bytes.
pub const MAX_STEP: usize = 256 << 10;
/// The longest step or signal name, in bytes.
pub const MAX_NAME: usize = 256;
/// The largest signal payload, in bytes.
pub const MAX_SIGNAL: usize = 64 << 10;

/// One recorded step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The attempt that ran it.
    pub attempt: u32,
    /// When it returned (ms since the Unix epoch).
    pub at_ms: u64,
    /// What it returned.
    pub value: Vec<u8>,
}

impl Step {
    /// Stored form: attempt (u32 LE), completion time (u64 LE), the value.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.value.len());
        out.extend_from_slice(&self.attempt.to_le_bytes());
        out.extend_from_slice(&self.at_ms.to_le_bytes());
        out.extend_from_slice(&self.value);
        out
    }

    /// Read back what [`Step::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<Step, QueueError> {
        if bytes.len() < 12 {
            return Err(QueueError::Protocol(
                "a journal step shorter than its header".into(),
            ));
        }
        Ok(Step {
            attempt: u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")),
            at_ms: u64::from_le_bytes(bytes[4..12].try_into().expect("8 bytes")),
            value: bytes[12..].to_vec(),
        })
    }
}

/// A job's journal, as a claim or `inspect` reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Journal {
    /// The handler version the job is pinned to.
    pub version: Option<String>,
    /// Each recorded step by name.
    pub steps: BTreeMap<String, Step>,
    /// Each sleep's or wait's wake time by name (ms).
    pub timers: BTreeMap<String, u64>,
    /// Signals sent to the job by name.
    pub signals: BTreeMap<String, Vec<u8>>,
    /// An effects journal's batches by number (`journal = "effects"`).
    pub effects: BTreeMap<u32, Vec<Entry>>,
    /// How `patched(name)` answered the job, by name: `true` the new path.
    pub patches: BTreeMap<String, bool>,
}

impl Journal {
    /// The journal in an `HGETALL` reply (field, value, field, value, ...).
    pub(crate) fn from_reply(v: &Value) -> Result<Journal, QueueError> {
        // (field, value) pairs, read in place: a claim hands over every journal it reads
        let pairs: Vec<(&Value, &Value)> = match v {
            Value::Array(flat) if flat.len() % 2 == 0 => {
                flat.chunks(2).map(|p| (&p[0], &p[1])).collect()
            }
            Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
            Value::Nil => Vec::new(),
            v => return Err(QueueError::Protocol(format!("a journal reply: {v:?}"))),
        };
        let mut journal = Journal::default();
        for (field, value) in pairs {
            let field = string(field)?;
            let value = bytes(value)?;
            match field.split_once(':') {
                Some(("s", name)) => {
                    journal.steps.insert(name.to_owned(), Step::decode(&value)?);
                }
                Some(("t", name)) => {
                    let at = String::from_utf8_lossy(&value)
                        .parse::<f64>()
                        .map_err(|_| {
                            QueueError::Protocol(format!("a journal timer {field:?} is not a time"))
                        })?;
                    journal.timers.insert(name.to_owned(), at as u64);
                }
                Some(("g", name)) => {
                    journal.signals.insert(name.to_owned(), value);
                }
                Some(("p", name)) => {
                    journal.patches.insert(name.to_owned(), value == b"1");
                }
                Some(("e", n)) => {
                    let n = n.parse().map_err(|_| {
                        QueueError::Protocol(format!("a journal batch {field:?} is not numbered"))
                    })?;
                    journal.effects.insert(n, effects::decode(&value)?);
                }
                _ if field == "v" => journal.version = Some(String::from_utf8_lossy(&value).into()),
                // a field of a newer hourglass: not ours to read
                _ => {}
            }
        }
        Ok(journal)
    }

    /// The bytes its steps, signals and effects hold (what the topic's
    /// `journal_max` bounds).
    pub fn size(&self) -> usize {
        let steps: usize = self
            .steps
            .iter()
            .map(|(n, s)| n.len() + s.value.len() + 12)
            .sum();
        let signals: usize = self.signals.iter().map(|(n, p)| n.len() + p.len()).sum();
        let effects: usize = self.effects.values().flatten().map(Entry::size).sum();
        let patches: usize = self.patches.keys().map(|n| n.len() + 1).sum();
        steps + signals + effects + patches
    }
}

/// What a suspended job waits for, kept in the topic's suspended hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Suspension {
    /// The journal field holding its wake time (`t:<name>`).
    pub timer: String,
    /// When it wakes if nothing wakes it earlier (ms).
    pub until_ms: u64,
    /// When it was suspended (ms).
    pub since_ms: u64,
    /// The signal it waits for, if it waits for one (else it sleeps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
}

/// A job to suspend: its attempt (the fence), the version that ran it, and
/// what it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspending {
    /// The job.
    pub id: String,
    /// The attempt that suspends it.
    pub attempt: u32,
    /// The handler version that ran the attempt (the journal's pin, if it
    /// has none yet).
    pub version: String,
    /// What it waits for.
    pub suspension: Suspension,
    /// Its story, this attempt included (kept in the topic's error hash).
    pub story: Vec<crate::AttemptCost>,
    /// The attempt's log lines (`logs.rs`; '' for none).
    pub logs: String,
}

/// What a signal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signalled {
    /// The job waited for it: it is due now.
    Woken,
    /// Kept until the job waits for it.
    Kept,
    /// A signal of this name was sent to the job already; the first stands.
    Duplicate,
    /// The job is dead-lettered.
    Dead,
    /// No such live job (never enqueued, done or cancelled).
    NoSuchJob,
}

/// What `wake` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// It was suspended; it is due now.
    Woken,
    /// The job is not suspended (waiting, running or dead).
    NotSuspended,
    /// No such live job.
    NoSuchJob,
}

/// A step or signal name as the host accepts it: 1 to [`MAX_NAME`] bytes,
/// no control characters.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("a {what} name must not be empty"));
    }
    if name.len() > MAX_NAME {
        return Err(format!(
            "{what} name of {} bytes is over the limit of {MAX_NAME} bytes",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("{what} name {name:?} holds a control character"));
    }
    Ok(())
}

mod store;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_reads_back_as_written() {
        let step = Step {
            attempt: 3,
            at_ms: 1_700_000_000_123,
            value: b"{\"charge\":\"ch_1\"}".to_vec(),
        };
        assert_eq!(Step::decode(&step.encode()).unwrap(), step);
        assert!(Step::decode(b"short").is_err());
    }

    #[test]
    fn names_are_bounded_and_printable() {
        assert!(check_name("step", "charge").is_ok());
        assert!(check_name("step", "").unwrap_err().contains("empty"));
        let long = "x".repeat(MAX_NAME + 1);
        assert!(
            check_name("step", &long)
                .unwrap_err()
                .contains("limit of 256 bytes")
        );
        assert!(
            check_name("signal", "a\nb")
                .unwrap_err()
                .contains("control")
        );
    }
}
