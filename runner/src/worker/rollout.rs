//! Which handler version serves each attempt: the rollout task.
//!
//! Every few hundred ms the task reports, per topic, this runner's attempts
//! per version and the version its handler file holds (`rollout_sync.lua`:
//! a new file under a `rollout` policy starts a canary), judges the counts
//! all runners reported ([`judge`]: promote or roll back), and turns the
//! answer into a [`Route`] for the scheduler: the version that serves, and
//! the canary with its share. Versions that are not the file's come from the
//! kept versions ([`Versions`]). Everything it decides is in Redis, in the
//! topic's slot, so every runner routes alike and a restart resumes.
//!
//! A topic without `rollout` and without a pin has no route: the scheduler
//! serves its file's version, as before (a new file swaps in at once).
//! A version live jobs' journals pin them to is kept beyond `keep_versions`
//! (`holds.rs`); a promotion under `journaled = "replay"` moves journaled
//! jobs to the promoted version (`replay.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Shared;
use super::verdict::judge;
use crate::clock::{millis, now_ms};
use crate::config::TopicConfig;
use crate::metrics::MissingLabels;
use crate::redis::{MissingVersion, Policy, Rollout, Tally};
use crate::reload::{Snapshot, Versions};
use crate::wasm::LoadedHandler;
use describe::Seen;

mod describe;
mod holds;
mod replay;

/// How often a topic under a rollout policy (or with a canary) reports and
/// is judged: what bounds the time from a bad canary's failures to its
/// rollback on every runner.
const FAST: Duration = Duration::from_millis(250);
/// How often every other topic reports (its versions' counts, a pin).
const SLOW: Duration = Duration::from_secs(1);

/// What serves a topic's attempts, when it is not simply its file's version.
#[derive(Clone)]
pub(crate) struct Route {
    /// Every attempt the canary does not take; `None`: claim nothing (the
    /// version to serve is not kept here; said in the log).
    pub serve: Option<LoadedHandler>,
    /// The canary and its share of attempts.
    pub canary: Option<(LoadedHandler, f64)>,
}

impl Route {
    /// Whether `other` routes alike: the same versions, the same share.
    fn same_as(&self, other: &Route) -> bool {
        self.serve.as_ref().map(|h| h.hash()) == other.serve.as_ref().map(|h| h.hash())
            && self.canary.as_ref().map(|(h, s)| (h.hash(), *s))
                == other.canary.as_ref().map(|(h, s)| (h.hash(), *s))
    }

    /// The handler for an attempt whose job's last failed attempt ran
    /// `last_failed_on`, and whether it is the canary's: the canary takes its
    /// share of attempts, except a job that just failed on it (it retries on
    /// the stable version) and a job's last attempt (a bad canary must not
    /// use it up: it costs retries, never a dead letter).
    pub fn pick(
        &self,
        last_failed_on: Option<&str>,
        last_attempt: bool,
    ) -> Option<(&LoadedHandler, bool)> {
        match &self.canary {
            Some((canary, share))
                if !last_attempt
                    && last_failed_on != Some(canary.hash())
                    && rand::random::<f64>() < *share =>
            {
                Some((canary, true))
            }
            _ => self.serve.as_ref().map(|h| (h, false)),
        }
    }
}

/// Routes by topic; a topic missing here serves its file's version.
pub(crate) type Routes = HashMap<String, Arc<Route>>;

/// Report, judge and route every topic until the scheduler is gone; the
/// first round runs before this returns its task (routes are known before
/// the first claim).
pub(super) async fn start(
    shared: Arc<Shared>,
    versions: Arc<Versions>,
    routes: watch::Sender<Arc<Routes>>,
) -> tokio::task::JoinHandle<()> {
    let mut task = Task {
        shared,
        versions,
        routes,
        seen: HashMap::new(),
        said: HashSet::new(),
        next: HashMap::new(),
        reported: HashMap::new(),
        holdings: HashMap::new(),
        upgrades: HashSet::new(),
    };
    let mut serving = task.shared.served.subscribe();
    let current = serving.borrow_and_update().clone();
    task.round(&current, true).await;
    tokio::spawn(async move {
        loop {
            let current = serving.borrow_and_update().clone();
            task.round(&current, false).await;
            tokio::select! {
                // a reload: a new file may start a canary, a changed policy applies
                changed = serving.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(FAST) => {}
            }
        }
    })
}

struct Task {
    shared: Arc<Shared>,
    versions: Arc<Versions>,
    routes: watch::Sender<Arc<Routes>>,
    /// What was last seen per topic (each change is logged once).
    seen: HashMap<String, Seen>,
    /// Things said once (a version this runner lacks).
    said: HashSet<String>,
    /// When each slow topic reports next (ms).
    next: HashMap<String, u64>,
    /// The file version each topic last reported.
    reported: HashMap<String, Option<String>>,
    /// What each topic's journals held when a new file was last reported.
    holdings: HashMap<String, crate::redis::Holdings>,
    /// Promotions whose journaled jobs this runner tried to move.
    upgrades: HashSet<String>,
}

impl Task {
    /// One round over the topics that are due (all of them when `all`).
    async fn round(&mut self, serving: &Snapshot, all: bool) {
        let now = now_ms();
        // versions this runner is told to serve and lacks, per topic looked at
        let mut lacking: Vec<MissingVersion> = Vec::new();
        let mut looked: HashSet<&str> = HashSet::new();
        let mut routes: Routes = (**self.routes.borrow()).clone();
        routes.retain(|topic, _| serving.config.topic(topic).is_some());
        for cfg in &serving.config.topics {
            let file = serving.handlers.get(&cfg.name);
            let fast = cfg.rollout.is_some() || routes.contains_key(&cfg.name);
            // a new file is reported at once, whatever the topic's pace
            let new_file =
                self.reported.get(&cfg.name).map(|v| v.as_deref()) != Some(file.map(|h| h.hash()));
            let due = self.next.get(&cfg.name).copied().unwrap_or(0);
            if !all && !fast && !new_file && now < due {
                continue;
            }
            self.next.insert(cfg.name.clone(), now + millis(SLOW));
            looked.insert(&cfg.name);
            match self.sync(cfg, file, now, new_file).await {
                Some(state) => match self.route(cfg, file, &state, &mut lacking).await {
                    Some(route) => {
                        routes.insert(cfg.name.clone(), Arc::new(route));
                    }
                    None => {
                        routes.remove(&cfg.name);
                    }
                },
                // Redis away: keep routing as before
                None => {
                    looked.remove(cfg.name.as_str());
                    continue;
                }
            }
        }
        self.note_missing(serving, &looked, lacking);
        let mut used: HashSet<&str> = serving.handlers.values().map(|h| h.hash()).collect();
        for route in routes.values() {
            used.extend(route.serve.iter().map(|h| h.hash()));
            used.extend(route.canary.iter().map(|(h, _)| h.hash()));
        }
        self.versions.retain(&used);
        // the scheduler wakes for a change only
        self.routes.send_if_modified(|current| {
            let same = current.len() == routes.len()
                && routes
                    .iter()
                    .all(|(topic, r)| current.get(topic).is_some_and(|c| c.same_as(r)));
            if !same {
                *current = Arc::new(routes);
            }
            !same
        });
    }

    /// Report `cfg`'s counts and file version, judge a canary; the rollout
    /// as it stands, `None` if Redis did not answer (the counts are kept for
    /// the next report).
    async fn sync(
        &mut self,
        cfg: &TopicConfig,
        file: Option<&LoadedHandler>,
        now: u64,
        new_file: bool,
    ) -> Option<Rollout> {
        let held = self.held(cfg, file, new_file).await;
        let held: Vec<&str> = held.iter().map(String::as_str).collect();
        let (shared, topic) = (&self.shared, cfg.name.as_str());
        let keys = shared.queue.keys(topic);
        let tallies = shared.meter.take_tallies(topic);
        let counts: Vec<(&str, Tally)> = tallies.iter().map(|(v, t)| (&**v, *t)).collect();
        let policy = cfg.rollout.map(|p| Policy {
            share: p.canary,
            window_ms: millis(p.window),
        });
        let keep = shared.keep_versions;
        let synced = shared
            .queue
            .rollouts()
            .sync(
                &keys,
                now,
                file.map(|h| h.hash()),
                policy,
                keep,
                &shared.runner_id,
                &held,
                &counts,
            )
            .await;
        let mut state = match synced {
            Ok(state) => {
                self.reported
                    .insert(topic.to_owned(), file.map(|h| h.hash().to_owned()));
                state
            }
            Err(e) => {
                tracing::debug!(topic, "rollout report not sent, kept for the next: {e}");
                shared.meter.restore_tallies(topic, tallies);
                return None;
            }
        };
        let kept = self.versions.kept(topic);
        shared
            .meter
            .forget_versions(topic, |v| kept.iter().any(|k| k.version == v));
        if let (Some(policy), Some(canary)) = (&cfg.rollout, &state.canary)
            && let Some((change, reason)) = judge(policy, canary, now)
        {
            let judged = shared
                .queue
                .rollouts()
                .change(
                    &keys,
                    &change,
                    &shared.runner_id,
                    &reason,
                    Some(&canary.version),
                    now,
                )
                .await;
            match judged {
                Ok(()) => {
                    if let Ok(now_state) = shared.queue.rollouts().get(&keys).await {
                        state = now_state;
                    }
                }
                // another runner judged first: its verdict comes with the next report
                Err(e) => tracing::debug!(topic, "verdict not recorded: {e}"),
            }
        }
        self.describe(topic, &state);
        if new_file {
            self.kept_for_jobs(cfg).await;
        }
        self.replay_on_promote(cfg, &state, file);
        Some(state)
    }

    /// The route `state` asks of this runner for `cfg`, `None` to serve the
    /// file's version; a version it asks for and this runner lacks goes to
    /// `lacking`.
    async fn route(
        &mut self,
        cfg: &TopicConfig,
        file: Option<&LoadedHandler>,
        state: &Rollout,
        lacking: &mut Vec<MissingVersion>,
    ) -> Option<Route> {
        let topic = cfg.name.as_str();
        let mut lacks = |version: &str, role: &str| {
            lacking.push(MissingVersion {
                topic: topic.to_owned(),
                version: version.to_owned(),
                role: role.to_owned(),
            })
        };
        if let Some(pin) = &state.pinned {
            let serve = self.handler(topic, file, &pin.version, "pinned").await;
            if serve.is_none() {
                lacks(&pin.version, "pinned");
            }
            return Some(Route {
                serve,
                canary: None,
            });
        }
        cfg.rollout.as_ref()?;
        let stable = state.stable.as_deref()?;
        let serve = self.handler(topic, file, stable, "stable").await;
        if serve.is_none() {
            lacks(stable, "stable");
        }
        let canary = match &state.canary {
            Some(c) => {
                let canary = self.handler(topic, file, &c.version, "canary").await;
                if canary.is_none() {
                    lacks(&c.version, "canary");
                }
                canary.map(|h| (h, c.share))
            }
            None => None,
        };
        Some(Route { serve, canary })
    }

    /// Publish what this runner lacks for the topics looked at this round
    /// (the others keep what they had): `hourglass_version_missing` and the
    /// heartbeat's `missing`. A version found again is forgotten, so it is
    /// said again if it goes missing later.
    fn note_missing(
        &mut self,
        serving: &Snapshot,
        looked: &HashSet<&str>,
        lacking: Vec<MissingVersion>,
    ) {
        let mut all = self.shared.missing.lock().expect("missing lock");
        let gone: Vec<MissingVersion> = all
            .iter()
            .filter(|m| {
                (looked.contains(m.topic.as_str()) || serving.config.topic(&m.topic).is_none())
                    && !lacking.contains(m)
            })
            .cloned()
            .collect();
        for m in &gone {
            self.shared.metrics.version_missing.remove(&labels(m));
            self.said.remove(&said(&m.topic, &m.version));
        }
        all.retain(|m| !gone.contains(m));
        for m in lacking {
            if !all.contains(&m) {
                self.shared
                    .metrics
                    .version_missing
                    .get_or_create(&labels(&m))
                    .set(1);
                all.push(m);
            }
        }
    }

    /// The handler of `version` (in `role`: stable, pinned, canary) for
    /// `topic`: the file's, or a kept one; if this runner has neither,
    /// `None`, with a warning once.
    async fn handler(
        &mut self,
        topic: &str,
        file: Option<&LoadedHandler>,
        version: &str,
        role: &str,
    ) -> Option<LoadedHandler> {
        if let Some(h) = file.filter(|h| h.hash() == version) {
            return Some(h.clone());
        }
        match self.versions.load(version).await {
            Ok(h) => Some(h),
            Err(why) => {
                if self.said.insert(said(topic, version)) {
                    let has = file.map_or("no handler file".to_owned(), |h| {
                        format!("its file holds {}", h.hash())
                    });
                    if role == "canary" {
                        tracing::warn!(
                            topic,
                            version,
                            "its canary is {version}, which this runner does not have ({has}; {why}): it serves the stable version only"
                        );
                    } else {
                        tracing::warn!(
                            topic,
                            version,
                            "its {role} version is {version}, which this runner does not have ({has}; {why}): it claims nothing of this topic until it has it (put that file in its handlers_dir, or pin a version it has: docs, Rollouts, runners with different files)"
                        );
                    }
                }
                None
            }
        }
    }
}

/// The key of "`topic` lacks `version`" in the things said once.
fn said(topic: &str, version: &str) -> String {
    format!("{topic} {version}")
}

/// The gauge labels of `m`.
fn labels(m: &MissingVersion) -> MissingLabels {
    MissingLabels {
        topic: m.topic.clone(),
        version: m.version.clone(),
        role: match m.role.as_str() {
            "stable" => "stable",
            "pinned" => "pinned",
            _ => "canary",
        },
    }
}
