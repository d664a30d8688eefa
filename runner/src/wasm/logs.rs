//! What an attempt logged, kept for its job: every line of the `log`
//! import and of stdout and stderr (as the runner's log gets them), in the
//! stored line format (`hourglass_client::logs`), the newest `keep` bytes of
//! them. The committer hands them to the script that ends the attempt; a
//! topic that keeps no logs, and a batch call (whose lines belong to no one
//! job), get a tap that keeps nothing.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::redis::logs::{dropped_line, push_line};

/// The longest line kept whole: past it, a line is cut (and says so).
const LINE_MAX: usize = 8 << 10;

/// Where an attempt's lines are kept, if its topic keeps them (shared by
/// the host's `log` import and its stdout and stderr).
#[derive(Clone, Default)]
pub struct LogTap(Option<Arc<Mutex<Kept>>>);

struct Kept {
    keep: usize,
    attempt: u32,
    lines: VecDeque<String>,
    bytes: usize,
    dropped: u64,
}

impl LogTap {
    /// A tap keeping the newest `keep` bytes of attempt `attempt`'s lines
    /// (none if `keep` is 0).
    pub fn new(keep: u64, attempt: u32) -> LogTap {
        if keep == 0 {
            return LogTap(None);
        }
        LogTap(Some(Arc::new(Mutex::new(Kept {
            keep: usize::try_from(keep).unwrap_or(usize::MAX),
            attempt,
            lines: VecDeque::new(),
            bytes: 0,
            dropped: 0,
        }))))
    }

    /// Keep `text`, logged now on `stream` (a level, `stdout` or `stderr`).
    pub fn push(&self, stream: &str, text: &str) {
        let Some(kept) = &self.0 else { return };
        let mut k = kept.lock().expect("log tap lock");
        let most = LINE_MAX.min(k.keep / 4).max(64);
        let cut;
        let text = if text.len() > most {
            let mut at = most;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            cut = format!("{}… [{} bytes cut]", &text[..at], text.len() - at);
            cut.as_str()
        } else {
            text
        };
        let mut line = String::with_capacity(text.len() + 24);
        push_line(&mut line, crate::clock::now_ms(), k.attempt, stream, text);
        k.bytes += line.len();
        k.lines.push_back(line);
        while k.bytes > k.keep {
            let Some(old) = k.lines.pop_front() else {
                break;
            };
            k.bytes -= old.len();
            k.dropped += old.len() as u64;
        }
    }

    /// The lines kept so far, as stored ('' for none), and start afresh for
    /// `attempt` (a reused instance's next job).
    pub fn take(&self, attempt: u32) -> String {
        let Some(kept) = &self.0 else {
            return String::new();
        };
        let mut k = kept.lock().expect("log tap lock");
        k.attempt = attempt;
        if k.lines.is_empty() {
            return String::new();
        }
        let mut out = String::with_capacity(k.bytes + 32);
        if k.dropped > 0 {
            out.push_str(&dropped_line(k.dropped));
        }
        for line in k.lines.drain(..) {
            out.push_str(&line);
        }
        k.bytes = 0;
        k.dropped = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_lines_and_says_how_much_went() {
        let tap = LogTap::new(4096, 2);
        for i in 0..1000 {
            tap.push("info", &format!("line {i:04} {}", "x".repeat(40)));
        }
        let text = tap.take(3);
        assert!(text.len() <= 4096 + 40, "{}", text.len());
        let (lines, dropped) = crate::redis::logs::parse(text.as_bytes());
        assert_eq!(lines[0].stream, "dropped");
        assert!(dropped > 40_000, "{dropped}");
        let last = lines.last().unwrap();
        assert!(last.text.starts_with("line 0999"), "{last:?}");
        assert_eq!(last.attempt, 2);
        assert_eq!(tap.take(3), "", "taken once");
        tap.push("stderr", "next");
        assert!(tap.take(4).contains(" 3 stderr next"));
    }

    #[test]
    fn a_tap_that_keeps_nothing_and_a_huge_line() {
        let off = LogTap::new(0, 1);
        off.push("info", "dropped");
        assert_eq!(off.take(1), "");
        let tap = LogTap::new(64 << 10, 1);
        tap.push("info", &"é".repeat(100_000));
        let text = tap.take(1);
        assert!(
            text.len() < 9 << 10 && text.contains("bytes cut]"),
            "{}",
            text.len()
        );
    }
}
