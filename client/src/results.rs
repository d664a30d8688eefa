//! Jobs' ends and progress, for producers who wait on them.
//!
//! A topic with `results` keeps every job's end (acked with the result its
//! handler set, dead with the reason, cancelled) at its own key for the
//! topic's `keep`, written by the same script as the state change and
//! announced on the topic's events channel; a topic without it writes and
//! publishes nothing. A running job's latest progress sits in the topic's
//! progress hash while the job lives.
//!
//! Stored end: one line of JSON (state, reason, handler version, attempts,
//! time, the job's story, whether a result follows and how many bytes of
//! logs follow it), `\n`, then the result's bytes verbatim, then the job's
//! logs (`ack.lua` puts them there: the header's `"logs"`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{AttemptCost, CorruptRecord, clock::millis};

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EndState {
    /// Its handler acked.
    Acked,
    /// Dead-lettered: failed for good or out of attempts.
    Dead,
    /// Cancelled by an operator.
    Cancelled,
    /// Not started by its deadline and dropped (its topic's `on_expire =
    /// "drop"`; one dead-lettered on expiry ends `dead`, reason `expired`).
    Expired,
}

impl EndState {
    /// As written in JSON and shown: `acked`, `dead`, `cancelled`, `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndState::Acked => "acked",
            EndState::Dead => "dead",
            EndState::Cancelled => "cancelled",
            EndState::Expired => "expired",
        }
    }
}

/// A job's end, as kept for its topic's `results.keep`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd {
    /// How it ended.
    pub state: EndState,
    /// The result its handler set (acked jobs only, and only if it set one).
    pub result: Option<Vec<u8>>,
    /// Why it is dead, or who cancelled it.
    pub reason: Option<String>,
    /// The handler version that ran the last attempt.
    pub version: Option<String>,
    /// Attempts it took.
    pub attempts: u32,
    /// When it ended (ms since the Unix epoch).
    pub at_ms: u64,
    /// Its story: each attempt (the most recent [`crate::KEPT_ATTEMPTS`]).
    pub history: Vec<AttemptCost>,
    /// Its logs, as kept with the end (`ack.lua` adds them: never encoded
    /// here).
    pub logs: Option<Vec<u8>>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    /// Bytes of logs after the result (`ack.lua` writes it first).
    #[serde(default, skip_serializing)]
    logs: usize,
    state: EndState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    attempts: u32,
    at: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    history: Vec<AttemptCost>,
    result: bool,
}

impl JobEnd {
    /// The stored bytes.
    pub fn encode(&self) -> Vec<u8> {
        let header = Header {
            logs: 0,
            state: self.state,
            reason: self.reason.clone(),
            version: self.version.clone(),
            attempts: self.attempts,
            at: self.at_ms,
            history: self.history.clone(),
            result: self.result.is_some(),
        };
        let mut out = serde_json::to_vec(&header).expect("an end serializes");
        out.push(b'\n');
        if let Some(result) = &self.result {
            out.extend_from_slice(result);
        }
        out
    }

    /// The end a stored value's header line says (its result and logs not
    /// read): for a listing that reads only the start of each end.
    pub fn header_of(bytes: &[u8]) -> Option<JobEnd> {
        let split = bytes.iter().position(|&b| b == b'\n')?;
        let header: Header = serde_json::from_slice(&bytes[..split]).ok()?;
        Some(JobEnd {
            state: header.state,
            result: None,
            reason: header.reason,
            version: header.version,
            attempts: header.attempts,
            at_ms: header.at,
            history: header.history,
            logs: None,
        })
    }

    /// Read back what [`JobEnd::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<JobEnd, CorruptRecord> {
        let split = bytes
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(CorruptRecord("a kept end without its header line"))?;
        let header: Header = serde_json::from_slice(&bytes[..split])
            .map_err(|_| CorruptRecord("a kept end with an unreadable header"))?;
        let body = &bytes[split + 1..];
        let logs_at = body
            .len()
            .checked_sub(header.logs)
            .ok_or(CorruptRecord("a kept end shorter than its logs"))?;
        let (result, logs) = body.split_at(logs_at);
        Ok(JobEnd {
            state: header.state,
            result: header.result.then(|| result.to_vec()),
            reason: header.reason,
            version: header.version,
            attempts: header.attempts,
            at_ms: header.at,
            history: header.history,
            logs: (header.logs > 0).then(|| logs.to_vec()),
        })
    }
}

/// A running job's progress report, as stored and published (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Progress {
    /// The attempt that reported it.
    pub attempt: u32,
    /// 0–100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<u8>,
    /// A JSON object of the handler's choosing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
    /// When it was reported (ms since the Unix epoch).
    pub at_ms: u64,
}

/// One progress report to record for a running attempt.
#[derive(Debug, Clone)]
pub struct Report {
    /// The job's id.
    pub id: String,
    /// What it reported.
    pub progress: Progress,
}

/// Where a job stands, read in one step.
#[derive(Debug, Clone, PartialEq)]
pub enum Standing {
    /// Stored and not dead: waiting (`running: false`) or leased.
    Live {
        /// Leased to a runner now.
        running: bool,
        /// The latest progress, if it reported any.
        progress: Option<Progress>,
    },
    /// Not live, and its end is kept.
    Ended(JobEnd),
    /// A job of a flow that its topic does not hold yet: waiting in its
    /// flow for the jobs it depends on, or released and about to be
    /// enqueued. A wait waits for it as for a live job.
    InFlow {
        /// Its flow.
        flow: String,
        /// Its index in the flow.
        index: u32,
        /// Whether its flow released it (every dependency ended): it is
        /// being enqueued into its topic.
        released: bool,
        /// The names of the jobs it waits for that have not ended.
        waiting_for: Vec<String>,
    },
    /// Neither live nor kept: never enqueued, or its end expired (or its
    /// topic keeps no results).
    Unknown,
}

/// `keep` as the scripts take it: ms, `0` for none.
pub(super) fn keep_ms(keep: Option<Duration>) -> u64 {
    keep.map_or(0, |k| millis(k).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_round_trip_with_and_without_a_result() {
        for result in [
            None,
            Some(vec![]),
            Some(b"{\"receipt\":\"r-1\"}\n\x00".to_vec()),
        ] {
            let end = JobEnd {
                state: EndState::Acked,
                result,
                reason: None,
                version: Some("0123456789abcdef".into()),
                attempts: 2,
                at_ms: 1_700_000_000_000,
                history: Vec::new(),
                logs: None,
            };
            assert_eq!(JobEnd::decode(&end.encode()), Ok(end));
        }
        assert!(JobEnd::decode(b"no header").is_err());
    }

    #[test]
    fn logs_the_ack_puts_after_the_result_come_back_apart_from_it() {
        let end = JobEnd {
            state: EndState::Acked,
            result: Some(b"{\"ok\":1}".to_vec()),
            reason: None,
            version: None,
            attempts: 1,
            at_ms: 5,
            history: vec![AttemptCost::new(1, None, Default::default())],
            logs: None,
        };
        let stored = end.encode();
        let logs = b"5 1 info hello\n";
        // as ack.lua writes it
        let mut with = format!("{{\"logs\":{},", logs.len()).into_bytes();
        with.extend_from_slice(&stored[1..]);
        with.extend_from_slice(logs);
        let back = JobEnd::decode(&with).unwrap();
        assert_eq!(back.result, end.result);
        assert_eq!(back.logs.as_deref(), Some(&logs[..]));
        assert_eq!(back.history, end.history);
    }

    #[test]
    fn json_results_are_shown_as_json_and_bytes_as_base64() {
        let mut end = JobEnd {
            state: EndState::Acked,
            result: Some(br#"{"receipt":"r-1"}"#.to_vec()),
            reason: None,
            version: None,
            attempts: 1,
            at_ms: 5,
            history: Vec::new(),
            logs: None,
        };
        assert_eq!(end.to_json("a")["result"]["receipt"], "r-1");
        end.result = Some(vec![0xff, 0x00]);
        assert_eq!(end.to_json("a")["result_base64"], "/wA=");
    }
}
