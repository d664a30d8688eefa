//! How far an attempt has got through its job's journal: the recorded
//! steps, timed-out waits and timers it has not reached yet.
//!
//! An attempt that still has some ahead of it is *replaying*: the code
//! that wrote the journal went past this point. `patched` answers from
//! that (a change met while replaying is one the job's first code did not
//! have), and a replay check (`check.rs`) passes only if the candidate
//! reaches everything the journal holds, in the order steps were recorded.

use std::collections::BTreeSet;

use crate::redis::Journal;

/// The name of the step holding how a wait for signal `name` ended
/// (recorded only when it timed out).
pub(in crate::wasm) fn wait_step(name: &str) -> String {
    format!("~signal:{name}")
}

/// What of a journal an attempt has not reached yet.
#[derive(Debug, Default)]
pub(in crate::wasm) struct Place {
    /// Recorded steps and timed-out waits not reached, in the order they
    /// were recorded: (time, attempt, name).
    steps: Vec<(u64, u32, String)>,
    /// Recorded timers (`~sleep:<n>`, `~signal:<name>`) not reached.
    timers: BTreeSet<String>,
    /// Steps asked for so far in this attempt.
    pub asked: u32,
}

/// Whether a step reached was the next one the journal recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::wasm) enum Reached {
    /// Not recorded (or reached already).
    New,
    /// The next one, or recorded in the same millisecond as the next.
    InOrder,
    /// Recorded after `0`, which is not reached yet.
    Early(String),
}

impl Place {
    /// Nothing of `journal` reached yet.
    pub fn new(journal: &Journal) -> Place {
        if journal.steps.is_empty() && journal.timers.is_empty() {
            return Place::default();
        }
        let mut steps: Vec<(u64, u32, String)> = journal
            .steps
            .iter()
            .map(|(name, s)| (s.at_ms, s.attempt, name.clone()))
            .collect();
        steps.sort();
        Place {
            steps,
            timers: journal.timers.keys().cloned().collect(),
            asked: 0,
        }
    }

    /// The attempt reached step `name`.
    pub fn step(&mut self, name: &str) -> Reached {
        self.asked += 1;
        let Some(at) = self.steps.iter().position(|(_, _, n)| n == name) else {
            return Reached::New;
        };
        let (when, attempt, _) = self.steps.remove(at);
        match self.steps.first() {
            Some((w, a, first)) if (*w, *a) < (when, attempt) => Reached::Early(first.clone()),
            _ => Reached::InOrder,
        }
    }

    /// The attempt reached sleep number `n`.
    pub fn sleep(&mut self, n: u32) {
        self.timers.remove(&format!("~sleep:{n}"));
    }

    /// The attempt reached the wait for signal `name`.
    pub fn wait(&mut self, name: &str) {
        let step = wait_step(name);
        self.steps.retain(|(_, _, n)| *n != step);
        self.timers.remove(&step);
    }

    /// The first recorded thing the attempt has not reached, as words
    /// (`step "reserve"`, `sleep 2`, `the wait for signal "approved"`).
    pub fn left(&self) -> Option<String> {
        if let Some((_, _, name)) = self.steps.first() {
            return Some(match name.strip_prefix("~signal:") {
                Some(signal) => format!("the wait for signal {signal:?}"),
                None => format!("step {name:?}"),
            });
        }
        self.timers
            .iter()
            .next()
            .map(|t| match t.strip_prefix("~sleep:") {
                Some(n) => format!("sleep {n}"),
                None => format!(
                    "the wait for signal {:?}",
                    t.strip_prefix("~signal:").unwrap_or(t)
                ),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::Step;

    fn journal(steps: &[(&str, u64)], timers: &[&str]) -> Journal {
        let mut j = Journal::default();
        for (name, at_ms) in steps {
            let step = Step {
                attempt: 1,
                at_ms: *at_ms,
                value: Vec::new(),
            };
            j.steps.insert((*name).to_owned(), step);
        }
        for t in timers {
            j.timers.insert((*t).to_owned(), 0);
        }
        j
    }

    #[test]
    fn steps_are_reached_in_the_order_they_were_recorded() {
        let mut p = Place::new(&journal(&[("charge", 10), ("reserve", 20)], &["~sleep:1"]));
        assert_eq!(p.left().as_deref(), Some("step \"charge\""));
        assert_eq!(p.step("reserve"), Reached::Early("charge".into()));
        assert_eq!(p.step("charge"), Reached::InOrder);
        assert_eq!(p.step("email"), Reached::New);
        assert_eq!(p.left().as_deref(), Some("sleep 1"));
        p.sleep(1);
        assert_eq!(p.left(), None);
        assert_eq!(p.asked, 3);
    }

    #[test]
    fn steps_of_one_millisecond_come_in_any_order() {
        let mut p = Place::new(&journal(&[("a", 10), ("b", 10)], &[]));
        assert_eq!(p.step("b"), Reached::InOrder);
        assert_eq!(p.step("a"), Reached::InOrder);
    }

    #[test]
    fn a_wait_reaches_its_timer_and_its_timeout() {
        let mut p = Place::new(&journal(&[("~signal:ok", 5)], &["~signal:ok"]));
        assert_eq!(p.left().as_deref(), Some("the wait for signal \"ok\""));
        p.wait("ok");
        assert_eq!(p.left(), None);
    }
}
