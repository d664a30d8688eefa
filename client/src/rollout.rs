//! Which handler version a topic serves, as every runner sees it: the
//! stable version, a canary with its share of attempts and its counts, a pin,
//! the retired versions and the last verdict (`rollout_sync.lua`,
//! `rollout_set.lua`); and the kept versions with their totals.
//!
//! Runners report their attempts per version and the version of their
//! handler file with [`Rollouts::sync`] every few hundred ms and route by
//! what it answers; verdicts and pins are [`Rollouts::change`]. Both
//! keys are in the topic's slot, so this works on a cluster.

use std::collections::HashMap;

use redis::Value;

use super::reply::string;
use super::{Queue, QueueError, TopicKeys, scripts};

/// Attempts of one version, and how many of them failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Tally {
    /// Attempts that ended (acked, retried, failed, crashed).
    pub attempts: u64,
    /// Those that did not end in an ack (crashes included).
    pub failures: u64,
    /// Those the handler could not finish: a trap, the time or memory limit.
    pub crashes: u64,
}

impl Tally {
    /// Failures per attempt, 0 with no attempts.
    pub fn failure_rate(&self) -> f64 {
        ratio(self.failures, self.attempts)
    }

    /// Crashes per attempt, 0 with no attempts.
    pub fn crash_rate(&self) -> f64 {
        ratio(self.crashes, self.attempts)
    }

    /// Add `other` to this.
    pub fn add(&mut self, other: Tally) {
        self.attempts += other.attempts;
        self.failures += other.failures;
        self.crashes += other.crashes;
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A canary being rolled out.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Canary {
    /// Its version.
    pub version: String,
    /// Its share of attempts (0..1).
    pub share: f64,
    /// When it started (ms).
    pub started_ms: u64,
    /// When its window ends (ms): the earliest it can be promoted.
    pub ends_ms: u64,
    /// The canary's attempts since it started, across runners.
    pub tally: Tally,
    /// The stable version's attempts over the same time.
    pub stable_tally: Tally,
}

/// The last decision about a canary.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Verdict {
    /// `promoted`, `rolled_back`, `aborted` or `superseded`.
    pub result: String,
    /// The canary it judged.
    pub version: String,
    /// Why, in words.
    pub reason: String,
    /// When (ms).
    pub at_ms: u64,
    /// Who: a runner's id, `cli` or `api`.
    pub by: String,
    /// After a promotion under `journaled = "replay"`: the journaled jobs
    /// moved to the promoted version by a replay check (none yet: `null`).
    pub moved: Option<u64>,
    /// And those left on their versions (their checks did not pass).
    pub left: Option<u64>,
}

/// A topic pinned to one version.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Pin {
    /// The version served.
    pub version: String,
    /// Since when (ms).
    pub at_ms: u64,
    /// Who pinned it.
    pub by: String,
}

/// Which version a topic serves, as stored in its slot.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rollout {
    /// The version that serves (all attempts but the canary's share).
    pub stable: Option<String>,
    /// The canary, while one is rolled out.
    pub canary: Option<Canary>,
    /// Set: every attempt runs this version, whatever else is said here.
    pub pinned: Option<Pin>,
    /// Versions rolled back or aborted: never rolled out again by a runner.
    pub retired: Vec<String>,
    /// The most recent verdict.
    pub last: Option<Verdict>,
    /// Bumped by every change (what a runner logs once).
    pub generation: u64,
    /// Verdicts so far, by result (`promoted`, `rolled_back`, `aborted`),
    /// and pins and unpins (`pins`, `unpins`).
    pub totals: HashMap<String, u64>,
}

/// What a kept version is to its topic now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Role {
    /// Serves every attempt the canary does not get.
    Stable,
    /// Being rolled out.
    Canary,
    /// Serves every attempt, by an operator's pin.
    Pinned,
    /// Rolled back or aborted.
    Retired,
    /// Kept, serving nothing: an earlier stable version.
    Kept,
}

/// One kept version of a topic's handler.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VersionInfo {
    /// The content hash.
    pub version: String,
    /// When a runner first loaded it for this topic (ms).
    pub first_seen_ms: u64,
    /// What it is now.
    pub role: Role,
    /// Its attempts across runners since it was first seen.
    pub tally: Tally,
    /// Live jobs whose journals pin them to it (counted by
    /// [`crate::Holdings::fill`]; 0 where nobody counted).
    pub live_jobs: u64,
}

/// A change of what a topic serves, by hand or by a runner's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Make the canary the stable version.
    Promote,
    /// Take the canary out, retired (a runner's verdict).
    RollBack,
    /// Take the canary out, retired (an operator's decision).
    Abort,
    /// Serve exactly this version.
    Pin(String),
    /// Serve what the files and the rollout say again.
    Unpin,
}

/// What a rollout policy asks of [`Rollouts::sync`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// The canary's share of attempts (0..1, exclusive).
    pub share: f64,
    /// The canary's window, ms.
    pub window_ms: u64,
}

impl Rollout {
    /// What `version` is to the topic now.
    pub fn role_of(&self, version: &str) -> Role {
        if self.pinned.as_ref().is_some_and(|p| p.version == version) {
            Role::Pinned
        } else if self.canary.as_ref().is_some_and(|c| c.version == version) {
            Role::Canary
        } else if self.stable.as_deref() == Some(version) {
            Role::Stable
        } else if self.retired.iter().any(|r| r == version) {
            Role::Retired
        } else {
            Role::Kept
        }
    }
}

/// A flat HGETALL reply as a map.
fn pairs(flat: &[Value]) -> Result<HashMap<String, String>, QueueError> {
    flat.chunks(2)
        .map(|pair| match pair {
            [k, v] => Ok((string(k)?, string(v)?)),
            other => Err(QueueError::Protocol(format!("a hash answered {other:?}"))),
        })
        .collect()
}

/// The rollout hash (see `rollout_sync.lua`) as a [`Rollout`].
fn parse(flat: &[Value]) -> Result<Rollout, QueueError> {
    let f = pairs(flat)?;
    let text = |k: &str| f.get(k).cloned();
    let num = |k: &str| f.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let tally = |side: &str| Tally {
        attempts: num(&format!("n_{side}")),
        failures: num(&format!("f_{side}")),
        crashes: num(&format!("c_{side}")),
    };
    let canary = text("canary").map(|version| Canary {
        version,
        share: f.get("share").and_then(|s| s.parse().ok()).unwrap_or(0.0),
        started_ms: num("started"),
        ends_ms: num("ends"),
        tally: tally("c"),
        stable_tally: tally("s"),
    });
    let pinned = text("pinned").map(|version| Pin {
        version,
        at_ms: num("pinned_at"),
        by: text("pinned_by").unwrap_or_default(),
    });
    let last = text("verdict").map(|result| Verdict {
        result,
        version: text("verdict_version").unwrap_or_default(),
        reason: text("reason").unwrap_or_default(),
        at_ms: num("verdict_at"),
        by: text("verdict_by").unwrap_or_default(),
        moved: f.get("verdict_moved").and_then(|n| n.parse().ok()),
        left: f.get("verdict_left").and_then(|n| n.parse().ok()),
    });
    let totals = ["promoted", "rolled_back", "aborted", "pins", "unpins"]
        .into_iter()
        .map(|k| (k.to_owned(), num(k)))
        .collect();
    Ok(Rollout {
        stable: text("stable"),
        canary,
        pinned,
        retired: text("retired")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        last,
        generation: num("gen"),
        totals,
    })
}

/// Which handler version serves each topic, and the kept versions ([`Queue::rollouts`]).
#[derive(Clone, Copy)]
pub struct Rollouts<'q> {
    pub(crate) q: &'q Queue,
}

impl Queue {
    /// Which handler version serves each topic, and the kept versions.
    pub fn rollouts(&self) -> Rollouts<'_> {
        Rollouts { q: self }
    }
}

impl Rollouts<'_> {
    /// Report attempts per version since the last report and the version of
    /// this runner's handler file (starting a canary when it is new and
    /// `policy` is set); the topic's rollout as it is now. A version in
    /// `held` (live jobs' journals pin them to it) is kept beyond `keep`.
    #[allow(clippy::too_many_arguments)]
    pub async fn sync(
        self,
        keys: &TopicKeys,
        now_ms: u64,
        file: Option<&str>,
        policy: Option<Policy>,
        keep: u32,
        who: &str,
        held: &[&str],
        counts: &[(&str, Tally)],
    ) -> Result<Rollout, QueueError> {
        let mut inv = scripts::ROLLOUT_SYNC.on(keys);
        inv.arg(now_ms).arg(file.unwrap_or(""));
        match policy {
            Some(p) => inv.arg(p.share.to_string()).arg(p.window_ms),
            None => inv.arg("").arg(0),
        };
        inv.arg(keep.max(1)).arg(who).arg(held.join(" "));
        for (version, t) in counts {
            inv.arg(*version)
                .arg(t.attempts)
                .arg(t.failures)
                .arg(t.crashes);
        }
        let flat: Vec<Value> = inv.invoke_async(&mut self.q.conn.clone()).await?;
        parse(&flat)
    }

    /// Apply `change` (by `who`, for `reason`). A verdict names the canary it
    /// judged in `canary` and is refused if another one runs by now; by hand
    /// it is `None`. Refusals are [`QueueError::Invalid`] saying why.
    pub async fn change(
        self,
        keys: &TopicKeys,
        change: &Change,
        who: &str,
        reason: &str,
        canary: Option<&str>,
        now_ms: u64,
    ) -> Result<(), QueueError> {
        let (action, version) = match change {
            Change::Promote => ("promote", canary.unwrap_or("")),
            Change::RollBack => ("rollback", canary.unwrap_or("")),
            Change::Abort => ("abort", canary.unwrap_or("")),
            Change::Pin(v) => {
                crate::record::check_version(v).map_err(QueueError::Invalid)?;
                ("pin", v.as_str())
            }
            Change::Unpin => ("unpin", ""),
        };
        let answer: String = scripts::ROLLOUT_SET
            .on(keys)
            .arg(now_ms)
            .arg(action)
            .arg(who)
            .arg(reason)
            .arg(version)
            .invoke_async(&mut self.q.conn.clone())
            .await?;
        let topic = &keys.topic;
        match answer.as_str() {
            "ok" => Ok(()),
            "no canary" => Err(QueueError::Invalid(format!(
                "topic {topic:?} has no canary being rolled out"
            ))),
            "stale" => Err(QueueError::Invalid(format!(
                "topic {topic:?} rolls out another canary by now"
            ))),
            "unknown version" => Err(QueueError::Invalid(format!(
                "topic {topic:?} keeps no version {version} (`hourglass versions {topic}` lists them)"
            ))),
            "not pinned" => Err(QueueError::Invalid(format!(
                "topic {topic:?} is not pinned"
            ))),
            other => Err(QueueError::Protocol(format!(
                "rollout_set answered {other:?}"
            ))),
        }
    }

    /// The topic's rollout as it is now (read only).
    pub async fn get(self, keys: &TopicKeys) -> Result<Rollout, QueueError> {
        let flat: Vec<Value> = redis::cmd("HGETALL")
            .arg(&keys.rollout)
            .query_async(&mut self.q.conn.clone())
            .await?;
        parse(&flat)
    }

    /// The versions the topic keeps (its catalogue, as `versions` lists
    /// them), in no order: what a runner may run a job pinned to.
    pub async fn kept_versions(self, keys: &TopicKeys) -> Result<Vec<String>, QueueError> {
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(&keys.versions)
            .query_async(&mut self.q.conn.clone())
            .await?;
        // the other fields are each version's `version:n/f/c` counts
        Ok(fields.into_iter().filter(|f| !f.contains(':')).collect())
    }

    /// The topic's kept versions, newest first, with their roles and totals.
    pub async fn versions(
        self,
        keys: &TopicKeys,
    ) -> Result<(Rollout, Vec<VersionInfo>), QueueError> {
        // both at once (one slot): a role always matches the counts beside it
        let (state, flat): (Vec<Value>, Vec<Value>) = redis::pipe()
            .atomic()
            .hgetall(&keys.rollout)
            .hgetall(&keys.versions)
            .query_async(&mut self.q.conn.clone())
            .await?;
        let rollout = parse(&state)?;
        let fields = pairs(&flat)?;
        let count = |v: &str, what: &str| {
            fields
                .get(&format!("{v}:{what}"))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        let mut versions: Vec<VersionInfo> = fields
            .iter()
            .filter(|(k, _)| !k.contains(':'))
            .map(|(v, seen)| VersionInfo {
                version: v.clone(),
                first_seen_ms: seen.parse().unwrap_or(0),
                role: rollout.role_of(v),
                tally: Tally {
                    attempts: count(v, "n"),
                    failures: count(v, "f"),
                    crashes: count(v, "c"),
                },
                live_jobs: 0,
            })
            .collect();
        versions.sort_by(|a, b| {
            b.first_seen_ms
                .cmp(&a.first_seen_ms)
                .then(a.version.cmp(&b.version))
        });
        Ok((rollout, versions))
    }
}
