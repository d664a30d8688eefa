//! A claim round: topics walked in strict priority order while capacity
//! lasts, capacity shared by weight inside a priority class that has weights
//! (deficit round robin), and each claimed job started as an attempt with
//! its version picked and its `InFlight` guard made: on the scheduler's own
//! thread if its handler is light (`[runner] light_cpu`), else on the pool.

use std::sync::Arc;

use super::{NEVER, Scheduler};
use crate::clock::millis;
use crate::redis::ClaimedJob;
use crate::worker::Topic;
use crate::worker::attempt::{self, InFlight};
use crate::worker::batch;
use crate::worker::rollout::Route;

/// Most jobs claimed from one topic in one script call.
const CLAIM_BATCH: usize = 256;
/// Most jobs claimed for a batched topic's calls in one script call.
const MAX_BATCHED_CLAIM: usize = 10_000;

impl Scheduler {
    /// Claim from due topics, highest priority first, while capacity lasts.
    /// Inside a priority class where a topic has a `weight`, capacity is
    /// shared in proportion to the weights instead (`claim_weighted`).
    pub(super) async fn claim_round(&mut self, now: u64) -> Result<(), crate::redis::QueueError> {
        let mut start = 0;
        while start < self.topics.len() && self.global.available_permits() > 0 {
            let priority = self.topics[start].cfg.priority;
            let end = start
                + self.topics[start..]
                    .iter()
                    .take_while(|t| t.cfg.priority == priority)
                    .count();
            let weighted = end - start > 1
                && self.topics[start..end]
                    .iter()
                    .any(|t| t.cfg.weight.is_some());
            if weighted {
                self.claim_weighted(start..end, now).await?;
            } else {
                for i in start..end {
                    if self.global.available_permits() == 0 {
                        break;
                    }
                    let most = self.free(i, now);
                    if most > 0 {
                        self.claim_from(i, now, most).await?;
                    }
                }
            }
            start = end;
        }
        Ok(())
    }

    /// How many jobs topic `i` could start now: 0 unless it is due, has a
    /// handler and has capacity.
    fn free(&self, i: usize, now: u64) -> usize {
        let topic = &self.topics[i];
        if self.next_due[i] > now + self.ahead(i) || !self.serves(i) {
            return 0;
        }
        self.global
            .available_permits()
            .min(topic.capacity.available())
            .min(CLAIM_BATCH)
    }

    /// Deficit round robin over one priority class: the free capacity is
    /// credited to the due topics in proportion to their weights (1 when
    /// unset), and the topic owed most claims next, until capacity runs out
    /// or no topic has due jobs. A topic that runs dry keeps no credit, so
    /// shares hold between backlogged topics and nobody saves up.
    async fn claim_weighted(
        &mut self,
        class: std::ops::Range<usize>,
        now: u64,
    ) -> Result<(), crate::redis::QueueError> {
        let mut live: Vec<usize> = class.filter(|&i| self.free(i, now) > 0).collect();
        let weight = |t: &Topic| f64::from(t.cfg.weight.unwrap_or(1));
        let total: f64 = live.iter().map(|&i| weight(&self.topics[i])).sum();
        let free = self.global.available_permits() as f64;
        // bounded, so a topic held back by its own capacity cannot hoard
        let cap = f64::from(self.config.runner.concurrency);
        for &i in &live {
            let owed = self.credit[i] + free * weight(&self.topics[i]) / total;
            self.credit[i] = owed.clamp(-cap, cap);
        }
        while !live.is_empty() && self.global.available_permits() > 0 {
            let (at, &i) = live
                .iter()
                .enumerate()
                .max_by(|a, b| self.credit[*a.1].total_cmp(&self.credit[*b.1]))
                .expect("live is not empty");
            let want = (self.credit[i].floor().max(1.0) as usize).min(self.free(i, now));
            let got = if want == 0 {
                0
            } else {
                self.claim_from(i, now, want).await?
            };
            self.credit[i] -= got as f64;
            if got < want {
                // ran dry: no credit saved for later
                self.credit[i] = self.credit[i].min(0.0);
            }
            if got < want || self.free(i, now) == 0 {
                live.swap_remove(at);
            }
        }
        Ok(())
    }

    /// Claim up to `most` jobs of topic `i` and start them; how many.
    async fn claim_from(
        &mut self,
        i: usize,
        now: u64,
        most: usize,
    ) -> Result<usize, crate::redis::QueueError> {
        let topic = self.topics[i].clone();
        let route = self.route[i].clone();
        if !self.serves(i) {
            return Ok(0);
        }
        // a job claimed ahead is held until it is due: its lease covers that too
        let due_by = now + self.ahead(i);
        let lease_until = due_by + millis(topic.cfg.timeout + self.config.runner.lease_margin);
        // a batched topic's slot takes up to `batch.max` jobs in one call
        let batch = topic.cfg.batch.map(|b| b.max as usize);
        let want = batch.map_or(most, |max| (most * max).min(MAX_BATCHED_CLAIM));
        let rate = topic.cfg.rate.map(|r| crate::redis::RateLimit {
            interval_ms: r.interval_ms(),
            burst: r.burst,
        });
        let claimed = self
            .shared
            .queue
            .pipeline()
            .claim_ahead(
                &topic.keys,
                now,
                due_by,
                lease_until,
                want,
                rate,
                topic.cfg.fairness.as_ref(),
            )
            .await?;
        let n = claimed.jobs.len();
        // kept while they run and commit, however long that takes (`leases.rs`)
        self.shared.leases.hold(
            &topic.keys,
            claimed.jobs.iter().map(|j| (j.id.as_str(), j.attempt)),
            lease_until,
            self.config.runner.lease_margin,
        );
        self.next_due[i] = match (topic.cfg.batch, claimed.next_due_ms) {
            // what is left comes due later: its first job waits for others
            (Some(b), Some(due)) if n < want => due + millis(b.wait),
            (_, due) => due.unwrap_or(NEVER),
        };
        if let Some(max) = batch {
            return Ok(self.start_batches(&topic, route.as_deref(), claimed.jobs, max));
        }
        for job in claimed.jobs {
            let slot = topic
                .capacity
                .slot(&self.global)
                .expect("checked free capacity");
            let (handler, canary) = match &route {
                Some(route) => route.pick(
                    job.last_failure.as_ref().and_then(|f| f.handler.as_deref()),
                    job.attempt >= job.max_attempts(topic.cfg.max_attempts),
                ),
                None => topic.handler.as_ref().map(|h| (h, false)),
            }
            .map(|(h, canary)| (h.clone(), canary))
            .expect("checked that the topic serves");
            let guard = InFlight::new(
                topic.clone(),
                job.id.clone(),
                job.attempt,
                handler.version().clone(),
                Some(slot),
                self.commits.clone(),
            );
            // a light handler's attempt stays on this thread (the one that
            // claims and commits), a heavier one goes to the pool's
            let pooled = !handler.light(self.config.runner.light_cpu);
            // boxed: the attempt's future is kilobytes (a whole wasm call's
            // state); unboxed, tokio copies all of it into its task, again at
            // each stage change and out again with the result (3% of the
            // runner's CPU in a no-op run's profile)
            let run = Box::pin(attempt::run(
                self.shared.clone(),
                handler,
                canary,
                job,
                guard,
                pooled,
            ));
            if pooled {
                self.tasks.spawn_on(run, &self.pool);
            } else {
                self.tasks.spawn(run);
            }
        }
        Ok(n)
    }
}

impl Scheduler {
    /// Start the calls of a batched topic: `jobs` in groups of `max`, each
    /// group one call holding one slot (the first job's guard holds it); how
    /// many calls.
    fn start_batches(
        &mut self,
        topic: &Arc<Topic>,
        route: Option<&Route>,
        jobs: Vec<ClaimedJob>,
        max: usize,
    ) -> usize {
        let by_key = topic.cfg.batch.is_some_and(|b| b.by_key);
        let mut calls = 0;
        for group in groups(jobs, max, by_key) {
            let first = &group[0];
            let handler = match route {
                Some(route) => route.pick(
                    first
                        .last_failure
                        .as_ref()
                        .and_then(|f| f.handler.as_deref()),
                    first.attempt >= first.max_attempts(topic.cfg.max_attempts),
                ),
                None => topic.handler.as_ref().map(|h| (h, false)),
            }
            .map(|(h, _)| h.clone())
            .expect("checked that the topic serves");
            let version = handler.version().clone();
            // grouped by key, a claim may bring more calls than free slots:
            // the rest go back uncounted (a guard dropped unused releases its job)
            let slot = topic.capacity.slot(&self.global);
            let started = slot.is_some();
            let mut guards = Vec::with_capacity(group.len());
            let mut slot = slot;
            for job in &group {
                guards.push(InFlight::new(
                    topic.clone(),
                    job.id.clone(),
                    job.attempt,
                    version.clone(),
                    slot.take(),
                    self.commits.clone(),
                ));
            }
            if !started {
                continue;
            }
            let run = Box::pin(batch::run(self.shared.clone(), handler, group, guards));
            // a call of many jobs is not light
            self.tasks.spawn_on(run, &self.pool);
            calls += 1;
        }
        calls
    }
}

/// Claimed `jobs` in calls of at most `max`, in claim order; `by_key`: each
/// call's jobs share a tenant key (calls in the order their keys came up).
fn groups(jobs: Vec<ClaimedJob>, max: usize, by_key: bool) -> Vec<Vec<ClaimedJob>> {
    let mut out: Vec<Vec<ClaimedJob>> = Vec::new();
    if !by_key {
        let mut jobs = jobs.into_iter().peekable();
        while jobs.peek().is_some() {
            out.push(jobs.by_ref().take(max).collect());
        }
        return out;
    }
    // the open call of each key, by its place in `out`
    let mut open: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for job in jobs {
        let key = job.key.clone().unwrap_or_default();
        match open.get(&key) {
            Some(&at) if out[at].len() < max => out[at].push(job),
            _ => {
                open.insert(key, out.len());
                out.push(vec![job]);
            }
        }
    }
    out
}
