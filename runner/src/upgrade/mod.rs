//! Moving in-flight journaled jobs to a new handler version when a replay
//! of their journal proves it safe (`hourglass upgrade`, the API's
//! `POST /api/topics/{topic}/upgrade`, a rollout policy's `journaled =
//! "replay"` on promote).
//!
//! A journaled job runs every attempt on the version its journal is pinned
//! to. [`Upgrader::check`] reads each job asked for (`Queue::upgrades`),
//! runs the replay check of the candidate version against its journal
//! (`Runtime::check`: nothing live, nothing written) and keeps what it read
//! as the fence; [`Upgrader::apply`] moves those that passed in one script
//! per batch (`upgrade.lua`), each only if it is still as it was read (a
//! job that ran, woke, ended or moved meanwhile is left, and says so). A
//! dry run checks and moves nothing. What each check cost is in the report
//! (`report.rs`), with each job left behind and its first difference.

mod report;
mod service;

use std::sync::Arc;

use futures::StreamExt;

use crate::clock::now_ms;
use crate::config::TopicConfig;
use crate::redis::{Journaled, Moved, Position, Queue, QueueError};
use crate::wasm::{JobInput, LoadedHandler, Runtime, Sandbox};
pub use report::{Left, MovedJob, Report};
pub use service::{FileOf, Service};

/// Checks run at once: each takes an instance from the runtime's pool.
const AT_ONCE: usize = 4;

/// Which jobs to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    /// These, by id.
    Ids(Vec<String>),
    /// Every job of the topic with a journal.
    All,
}

/// Why an upgrade cannot start at all.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    /// The version is not one the topic keeps (or not a version).
    #[error("{0}")]
    Version(String),
    /// Redis did not answer.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl UpgradeError {
    /// Whether it is the caller's mistake (bad input), not the system's.
    pub fn is_input(&self) -> bool {
        matches!(self, UpgradeError::Version(_))
    }
}

/// The checks of one upgrade, and what each read (its fence).
pub struct Plan {
    topic: String,
    to: String,
    dry_run: bool,
    /// Jobs that passed, as read.
    pass: Vec<(Journaled, crate::wasm::Checked)>,
    report: Report,
}

impl Plan {
    /// The report as it stands before any job moved.
    pub fn report(&self) -> &Report {
        &self.report
    }
}

/// What an upgrade needs of the process running it.
#[derive(Clone)]
pub struct Upgrader {
    queue: Queue,
    runtime: Arc<Runtime>,
    max_payload: u64,
}

impl Upgrader {
    /// Upgrades through `queue`, checking on `runtime` (its instance pool
    /// gives each check its slot), with the runner's payload limit.
    pub fn new(queue: Queue, runtime: Arc<Runtime>, max_payload: u64) -> Upgrader {
        Upgrader {
            queue,
            runtime,
            max_payload,
        }
    }

    /// Check `which` jobs of `topic` against `candidate`, and unless
    /// `dry_run`, move those that pass: the report.
    pub async fn run(
        &self,
        topic: &TopicConfig,
        candidate: &LoadedHandler,
        which: Which,
        dry_run: bool,
    ) -> Result<Report, UpgradeError> {
        let plan = self.check(topic, candidate, which, dry_run).await?;
        self.apply(plan).await
    }

    /// Read and check `which` jobs of `topic` against `candidate`; nothing
    /// moves yet.
    pub async fn check(
        &self,
        topic: &TopicConfig,
        candidate: &LoadedHandler,
        which: Which,
        dry_run: bool,
    ) -> Result<Plan, UpgradeError> {
        let to = candidate.hash().to_owned();
        let keys = self.queue.keys(&topic.name);
        let kept = self.queue.rollouts().kept_versions(&keys).await?;
        if !kept.contains(&to) {
            return Err(UpgradeError::Version(format!(
                "topic {:?} keeps no version {to} (`hourglass versions {}` lists what it keeps): a job moved to it could not run",
                topic.name, topic.name
            )));
        }
        let ids = match which {
            Which::Ids(ids) => ids,
            Which::All => self.queue.upgrades().journaled(&keys).await?,
        };
        let sandbox = Sandbox::for_topic(topic, self.max_payload);
        let checks = futures::stream::iter(ids)
            .map(|id| self.check_one(topic, candidate, &sandbox, id))
            .buffered(AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        let mut report = Report::new(&topic.name, &to, dry_run);
        let mut pass = Vec::new();
        for checked in checks {
            match checked? {
                Checked::Skipped(left) => report.leave(left),
                Checked::Ran(ran) => {
                    let (job, checked) = *ran;
                    report.count(&checked);
                    if checked.passes {
                        pass.push((job, checked));
                    } else {
                        report.leave(Left::failed(&job, checked));
                    }
                }
            }
        }
        Ok(Plan {
            topic: topic.name.clone(),
            to,
            dry_run,
            pass,
            report,
        })
    }

    /// Move the jobs of `plan` that passed, each unless it changed since it
    /// was read (none in a dry run): the report.
    pub async fn apply(&self, plan: Plan) -> Result<Report, UpgradeError> {
        let Plan {
            topic,
            to,
            dry_run,
            pass,
            mut report,
        } = plan;
        if dry_run {
            for (job, checked) in pass {
                report.moved(&job, checked);
            }
            return Ok(report);
        }
        let keys = self.queue.keys(&topic);
        let jobs: Vec<&Journaled> = pass.iter().map(|(j, _)| j).collect();
        let moved = self.queue.upgrades().apply(&keys, &to, &jobs).await?;
        for ((job, checked), how) in pass.into_iter().zip(moved) {
            match how {
                Moved::Moved => report.moved(&job, checked),
                other => report.leave(Left::stale(&job, other)),
            }
        }
        let (moved, left) = (report.moved.len(), report.left.len());
        tracing::info!(topic, version = %to, moved, left, "upgrade: {moved} journaled jobs moved to {to} after a replay check, {left} left where they are");
        Ok(report)
    }

    /// Read job `id` and check it, or say why it is not checked.
    async fn check_one(
        &self,
        topic: &TopicConfig,
        candidate: &LoadedHandler,
        sandbox: &Sandbox,
        id: String,
    ) -> Result<Checked, QueueError> {
        let keys = self.queue.keys(&topic.name);
        let Some(job) = self.queue.upgrades().read(&keys, &id).await? else {
            return Ok(Checked::Skipped(Left::skipped(
                &id,
                None,
                "no live job with a journal",
            )));
        };
        let skip = |why: &str| Ok(Checked::Skipped(Left::skipped(&id, job.pinned(), why)));
        match (job.position, job.pinned()) {
            (Position::Dead, _) => {
                return skip(
                    "dead-lettered (`hourglass dead retry` replays it on its own version)",
                );
            }
            (Position::Running, _) => return skip("an attempt runs it now: try again later"),
            (_, None) => {
                return skip("its journal pins no version: it runs on what the topic serves");
            }
            (_, Some(v)) if v == candidate.hash() => return skip("on this version already"),
            _ => {}
        }
        let record = match &job.record {
            Ok(record) => record,
            Err(corrupt) => return skip(&format!("its record cannot be read: {corrupt}")),
        };
        let upstream = match &record.flow {
            Some(flow) => self
                .queue
                .flows()
                .dependencies(flow)
                .await?
                .unwrap_or_default(),
            None => Default::default(),
        };
        let input = JobInput {
            topic: topic.name.clone(),
            id: id.clone(),
            // what the job's next attempt would be
            attempt: job.attempts.unwrap_or(0) + 1,
            payload: record.payload.clone(),
            max_attempts: match record.max_attempts {
                0 => topic.max_attempts,
                n => n,
            },
            enqueued_at_ms: record.enqueued_at_ms,
            due_at_ms: job.due_ms.unwrap_or_else(now_ms),
            parent_result: record.parent_result.clone(),
            trace: None,
            pass_through: None,
            journal: Some(job.journal.clone()),
            upstream,
        };
        let checked = self.runtime.check(candidate, input, sandbox).await;
        Ok(Checked::Ran(Box::new((job, checked))))
    }
}

/// One job's check, or why it was not checked.
enum Checked {
    Skipped(Left),
    Ran(Box<(Journaled, crate::wasm::Checked)>),
}
