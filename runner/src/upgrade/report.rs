//! What an upgrade reports: the jobs moved (or, in a dry run, movable), each
//! job left where it is with why (its check's first difference, or what
//! changed since), and what the checks cost.

use crate::redis::{Journaled, Moved};
use crate::wasm::Checked;

/// The outcome of `hourglass upgrade` (and of its API route).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Report {
    /// The topic.
    pub topic: String,
    /// The version the jobs move to.
    pub to: String,
    /// A dry run checks and moves nothing: `moved` lists the jobs that would.
    pub dry_run: bool,
    /// Jobs whose journal was checked.
    pub checked: u32,
    /// Jobs moved (in a dry run: that pass and would move).
    pub moved: Vec<MovedJob>,
    /// Jobs left where they are, each with why.
    pub left: Vec<Left>,
    /// The checks' CPU, all together (µs).
    pub cpu_us: u64,
    /// The checks' wall time, all together (µs).
    pub wall_us: u64,
    /// Recorded steps the checks replayed, all together.
    pub replayed: u64,
}

/// A job an upgrade moved (or, in a dry run, would move).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct MovedJob {
    /// The job.
    pub id: String,
    /// The version it was pinned to.
    pub from: Option<String>,
    /// Where its check got to.
    pub detail: String,
    /// What the candidate logged or printed during the check.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
}

/// A job an upgrade left where it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Left {
    /// The job.
    pub id: String,
    /// The version it stays pinned to, if it has one.
    pub version: Option<String>,
    /// Why: its check's first difference, or why it was not checked or not moved.
    pub reason: String,
    /// What the candidate logged or printed during the check.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
}

impl Report {
    pub(super) fn new(topic: &str, to: &str, dry_run: bool) -> Report {
        Report {
            topic: topic.to_owned(),
            to: to.to_owned(),
            dry_run,
            checked: 0,
            moved: Vec::new(),
            left: Vec::new(),
            cpu_us: 0,
            wall_us: 0,
            replayed: 0,
        }
    }

    /// A check ran.
    pub(super) fn count(&mut self, checked: &Checked) {
        self.checked += 1;
        self.cpu_us += checked.usage.cpu_us;
        self.wall_us += checked.usage.wall_us;
        self.replayed += u64::from(checked.replayed);
    }

    pub(super) fn leave(&mut self, left: Left) {
        self.left.push(left);
    }

    /// `job` passed its check (and, unless a dry run, moved).
    pub(super) fn moved(&mut self, job: &Journaled, checked: Checked) {
        self.moved.push(MovedJob {
            id: job.id.clone(),
            from: job.pinned().map(str::to_owned),
            detail: checked.detail,
            logs: checked.logs,
        });
    }

    /// The report in words, as `hourglass upgrade` prints it.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let verb = if self.dry_run { "can move" } else { "moved" };
        out.push_str(&format!(
            "{}: {} of {} checked journaled jobs {verb} to {}{}\n",
            self.topic,
            self.moved.len(),
            self.checked,
            self.to,
            if self.dry_run {
                " (dry run: none moved)"
            } else {
                ""
            }
        ));
        for m in &self.moved {
            let verb = if self.dry_run { "movable" } else { "moved  " };
            out.push_str(&format!(
                "  {verb} {} (from {}): {}\n",
                m.id,
                m.from.as_deref().unwrap_or("-"),
                m.detail
            ));
        }
        for left in &self.left {
            out.push_str(&format!("  left    {}: {}\n", left.id, left.reason));
            for line in &left.logs {
                out.push_str(&format!("          | {line}\n"));
            }
        }
        if self.checked > 0 {
            out.push_str(&format!(
                "checks: {} ms of CPU in all ({} µs a job), {} recorded steps replayed\n",
                self.cpu_us / 1000,
                self.cpu_us / u64::from(self.checked),
                self.replayed
            ));
        }
        out
    }
}

impl Left {
    pub(super) fn skipped(id: &str, version: Option<&str>, why: &str) -> Left {
        Left {
            id: id.to_owned(),
            version: version.map(str::to_owned),
            reason: why.to_owned(),
            logs: Vec::new(),
        }
    }

    pub(super) fn failed(job: &Journaled, checked: Checked) -> Left {
        Left {
            id: job.id.clone(),
            version: job.pinned().map(str::to_owned),
            reason: checked.detail,
            logs: checked.logs,
        }
    }

    pub(super) fn stale(job: &Journaled, how: Moved) -> Left {
        let why = match how {
            Moved::Gone => "it ended or was cancelled during its check",
            Moved::Running => {
                "an attempt started it during its check: not moved (checked again next time)"
            }
            Moved::Dead => "it was dead-lettered during its check",
            Moved::Changed | Moved::Moved => {
                "it ran, woke or was moved during its check: a stale check moves nothing (checked again next time)"
            }
        };
        Left {
            id: job.id.clone(),
            version: job.pinned().map(str::to_owned),
            reason: why.to_owned(),
            logs: Vec::new(),
        }
    }
}
