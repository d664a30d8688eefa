//! A job's logs: what its handler logged (the SDK's log functions, stdout
//! and stderr) during each attempt, kept with the job, bounded.
//!
//! Stored as text, one line per entry: `<ms> <attempt> <stream> <text>\n`
//! (a message of several lines is several entries), where `stream` is a log
//! level (`trace` to `error`), `stdout` or `stderr`. The runner gathers an
//! attempt's lines and hands them to the script that ends the attempt
//! (`retry.lua`, `bury.lua`, `suspend.lua`, `ack.lua`), which adds them to
//! the job's entry in the topic's `logs` hash: past the topic's `logs.keep`
//! the oldest lines go first, and a first line `0 0 dropped <n>` then says
//! how many bytes went (`lua/prelude.lua`: logs_joined). A job that acks on
//! a topic without `results` leaves nothing; with `results`, its logs go
//! into its kept end ([`crate::JobEnd::logs`]) and expire with it.

use serde::Serialize;

use super::reply::bytes;
use super::{JobEnd, Queue, QueueError, TopicKeys};

/// The first line's stream when older lines were dropped.
pub const DROPPED: &str = "dropped";

/// The default `logs.keep`: 64 KiB a job.
pub const DEFAULT_KEEP: u64 = 64 << 10;

/// One logged line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogLine {
    /// When it was logged (ms since the Unix epoch; 0 on a `dropped` line).
    pub at_ms: u64,
    /// The attempt that logged it (0 on a `dropped` line).
    pub attempt: u32,
    /// `trace`, `debug`, `info`, `warn`, `error` (the SDK's log functions),
    /// `stdout`, `stderr`, or `dropped` (older lines were dropped here: `text`
    /// says how many bytes).
    pub stream: String,
    /// What it said.
    pub text: String,
}

/// A job's logs as kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobLogs {
    /// The job's id.
    pub id: String,
    /// Its lines, oldest first.
    pub lines: Vec<LogLine>,
    /// Bytes of older lines dropped to keep within the topic's `logs.keep`.
    pub dropped_bytes: u64,
    /// The bytes kept.
    pub bytes: usize,
    /// They are its kept end's (it acked on a topic with `results`), not a
    /// live job's.
    pub ended: bool,
}

/// Add `text` logged by `attempt` at `at_ms` on `stream` to `out`, one line
/// per line of it (carriage returns and a last newline dropped).
pub fn push_line(out: &mut String, at_ms: u64, attempt: u32, stream: &str, text: &str) {
    use std::fmt::Write;
    for line in text.trim_end_matches(['\n', '\r']).split('\n') {
        let _ = writeln!(
            out,
            "{at_ms} {attempt} {stream} {}",
            line.trim_end_matches('\r')
        );
    }
}

/// The line that says `bytes` of older lines were dropped.
pub fn dropped_line(bytes: u64) -> String {
    format!("0 0 {DROPPED} {bytes}\n")
}

/// Read stored log text: its lines and the bytes dropped (a line that does
/// not parse is kept whole as `stdout`).
pub fn parse(text: &[u8]) -> (Vec<LogLine>, u64) {
    let text = String::from_utf8_lossy(text);
    let mut dropped = 0;
    let lines = text
        .lines()
        .map(|line| {
            let mut parts = line.splitn(4, ' ');
            let (at, attempt, stream, rest) =
                (parts.next(), parts.next(), parts.next(), parts.next());
            match (
                at.and_then(|a| a.parse().ok()),
                attempt.and_then(|a| a.parse().ok()),
                stream,
            ) {
                (Some(at_ms), Some(attempt), Some(stream)) => {
                    let text = rest.unwrap_or("").to_owned();
                    if stream == DROPPED {
                        dropped += text.parse::<u64>().unwrap_or(0);
                    }
                    LogLine {
                        at_ms,
                        attempt,
                        stream: stream.to_owned(),
                        text,
                    }
                }
                _ => LogLine {
                    at_ms: 0,
                    attempt: 0,
                    stream: "stdout".into(),
                    text: line.to_owned(),
                },
            }
        })
        .collect();
    (lines, dropped)
}

impl JobLogs {
    /// Job `id`'s logs from their stored text.
    pub fn read(id: &str, text: &[u8], ended: bool) -> JobLogs {
        let (lines, dropped_bytes) = parse(text);
        JobLogs {
            id: id.to_owned(),
            lines,
            dropped_bytes,
            bytes: text.len(),
            ended,
        }
    }
}

impl Queue {
    /// Job `id`'s logs: a stored job's (live or dead), or those kept with
    /// its end; `None` when it has none (it logged nothing, its topic keeps
    /// no logs, or it is gone).
    pub async fn logs(&self, keys: &TopicKeys, id: &str) -> Result<Option<JobLogs>, QueueError> {
        let (live, end): (redis::Value, redis::Value) = redis::pipe()
            .hget(&keys.logs, id)
            .get(keys.result(id))
            .query_async(&mut self.conn.clone())
            .await?;
        if !matches!(live, redis::Value::Nil) {
            return Ok(Some(JobLogs::read(id, &bytes(&live)?, false)));
        }
        if matches!(end, redis::Value::Nil) {
            return Ok(None);
        }
        let end = JobEnd::decode(&bytes(&end)?).map_err(|e| QueueError::Protocol(e.to_string()))?;
        Ok(end.logs.map(|text| JobLogs::read(id, &text, true)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_a_message_of_several_lines_is_several() {
        let mut text = dropped_line(1234);
        push_line(&mut text, 5, 1, "info", "charged \"7\"");
        push_line(&mut text, 6, 2, "stderr", "first\r\nsecond\n");
        let (lines, dropped) = parse(text.as_bytes());
        assert_eq!(dropped, 1234);
        let shown: Vec<_> = lines
            .iter()
            .map(|l| (l.at_ms, l.attempt, l.stream.as_str(), l.text.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                (0, 0, "dropped", "1234"),
                (5, 1, "info", "charged \"7\""),
                (6, 2, "stderr", "first"),
                (6, 2, "stderr", "second"),
            ]
        );
    }
}
