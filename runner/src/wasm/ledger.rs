//! What a replay check notes while a candidate version runs against a
//! job's journal (`check.rs`): where the check ended and why, and what the
//! candidate logged. Every import that would reach the world in an attempt
//! ends the check instead (`host/`, `outbound/`, `journal/`), so the
//! ledger is below all of them and knows none of them.

use std::sync::Mutex;

use tokio::sync::Notify;

/// Log lines kept for a check's report, and their bytes.
const MAX_LINES: usize = 200;
const MAX_BYTES: usize = 64 << 10;

/// Where the candidate arrived when the check stopped it: past this point
/// the journal holds nothing it asked for, so it would run live from here
/// (or wait here). The check passes if nothing the journal recorded was
/// left behind on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Step number `n` (of this run), named `name`, which the journal does not hold.
    Step {
        /// Its number among the steps the candidate asked for, from 1.
        n: u32,
        /// Its name.
        name: String,
    },
    /// Sleep number `n`; `recorded`: the job sleeps there now.
    Sleep {
        /// Its number among the candidate's sleeps, from 1.
        n: u32,
        /// The journal holds it (the job waits there).
        recorded: bool,
    },
    /// A wait for signal `name`; `recorded`: the job waits there now.
    Wait {
        /// The signal.
        name: String,
        /// The journal holds it.
        recorded: bool,
    },
    /// An outbound request the journal does not answer (what and where).
    Request(String),
    /// A signal sent to another job.
    Signal(String),
    /// The handler returned this outcome.
    Returned(String),
}

/// How a check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    /// The candidate asked for something else than the journal holds here.
    Differs(String),
    /// The candidate arrived at the end of what the journal answers.
    Arrives(Arrival),
}

/// One check's ledger, shared by everything its store runs.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    state: Mutex<State>,
    ended: Notify,
}

#[derive(Debug, Default)]
struct State {
    end: Option<End>,
    lines: Vec<String>,
    bytes: usize,
    dropped: usize,
}

impl Ledger {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("ledger lock")
    }

    /// End the check here (the first end stands) and wake whoever waits
    /// for it: the candidate is not run any further.
    pub(crate) fn end(&self, end: End) {
        let mut s = self.state();
        if s.end.is_none() {
            s.end = Some(end);
            self.ended.notify_one();
        }
    }

    /// Whether the check has ended.
    pub(crate) fn has_ended(&self) -> bool {
        self.state().end.is_some()
    }

    /// Until the check ends.
    pub(crate) async fn ended(&self) {
        if !self.has_ended() {
            self.ended.notified().await;
        }
    }

    /// How it ended, if it did.
    pub(crate) fn take_end(&self) -> Option<End> {
        self.state().end.take()
    }

    /// A line the candidate logged or printed, kept for the report (up to
    /// [`MAX_LINES`] and [`MAX_BYTES`]).
    pub(crate) fn line(&self, line: String) {
        let mut s = self.state();
        if s.lines.len() >= MAX_LINES || s.bytes + line.len() > MAX_BYTES {
            s.dropped += 1;
            return;
        }
        s.bytes += line.len();
        s.lines.push(line);
    }

    /// The lines kept, and a note of those dropped.
    pub(crate) fn take_lines(&self) -> Vec<String> {
        let mut s = self.state();
        let mut lines = std::mem::take(&mut s.lines);
        if s.dropped > 0 {
            lines.push(format!("[{} more lines not kept]", s.dropped));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_end_stands_and_lines_are_bounded() {
        let l = Ledger::default();
        assert!(!l.has_ended());
        l.end(End::Differs("first".into()));
        l.end(End::Differs("second".into()));
        assert_eq!(l.take_end(), Some(End::Differs("first".into())));
        for n in 0..MAX_LINES + 3 {
            l.line(format!("line {n}"));
        }
        let lines = l.take_lines();
        assert_eq!(lines.len(), MAX_LINES + 1);
        assert_eq!(lines.last().unwrap(), "[3 more lines not kept]");
    }
}
