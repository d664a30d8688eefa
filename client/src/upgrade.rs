//! Moving journaled jobs to another handler version (`hourglass upgrade`),
//! and what a topic's journals hold ([`Upgrades::holds`]).
//!
//! A journaled job runs every attempt on the version its journal is pinned
//! to (`v`, `step.lua`). To move it, the runner reads it ([`Upgrades::read`]:
//! record, attempt counter, state, what it waits for and its journal, in one
//! atomic step), runs the replay check on the new version, and moves those
//! that pass ([`Upgrades::apply`], `upgrade.lua`), fenced by what it read:
//! a job that ran, woke, ended or was moved since stays where it is.

use std::collections::BTreeMap;

use redis::Value;

use super::journal::Journal;
use super::record::{Record, split_stored};
use super::reply::{bytes, string};
use super::{CorruptRecord, Queue, QueueError, TopicKeys, scripts};

/// Ids read per step when listing a topic's journaled jobs.
const PAGE: usize = 500;

/// What [`Upgrades::read`] reads of a job: its stored value, attempt
/// counter, lease, death, suspension, journal and the journal's length.
type Read = (
    Option<Vec<u8>>,
    Option<u32>,
    Option<f64>,
    Option<f64>,
    Option<String>,
    Value,
    u64,
);

/// Where a journaled job is, as read for a replay check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// Waiting: suspended (a durable sleep or wait), scheduled or due.
    Waiting,
    /// An attempt runs it now.
    Running,
    /// Dead-lettered.
    Dead,
}

/// A journaled job as the replay check reads it, and the fence its move
/// takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journaled {
    /// The job.
    pub id: String,
    /// Its record (payload, attempts, ...), or why it cannot be read.
    pub record: Result<Record, CorruptRecord>,
    /// When it is due (ms), while it waits.
    pub due_ms: Option<u64>,
    /// Its attempt counter: attempts started so far (a suspension gives its
    /// attempt back).
    pub attempts: Option<u32>,
    /// Where it is.
    pub position: Position,
    /// What it waits for, as stored (`None`: not suspended).
    pub suspended: Option<String>,
    /// Its journal.
    pub journal: Journal,
    /// The number of fields of its journal (the fence).
    pub fields: u64,
}

impl Journaled {
    /// The version its journal pins it to.
    pub fn pinned(&self) -> Option<&str> {
        self.journal.version.as_deref()
    }
}

/// How a move went for one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// Its journal is pinned to the new version now.
    Moved,
    /// It ended or was cancelled meanwhile.
    Gone,
    /// An attempt runs it now.
    Running,
    /// It was dead-lettered meanwhile.
    Dead,
    /// Its attempts, journal, suspension or pin changed since it was read.
    Changed,
}

/// What one job's journal holds, as [`Upgrades::holds`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The job.
    pub id: String,
    /// The version its journal pins it to, if any.
    pub version: Option<String>,
    /// Whether it is dead-lettered (else live).
    pub dead: bool,
    /// How `patched(name)` answered it, by name (`true`: the new path).
    pub patches: BTreeMap<String, bool>,
}

/// The jobs whose journals pin them to one version.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeldJobs {
    /// Live ones (waiting, suspended or running): they finish on it.
    pub live: u64,
    /// Dead letters (`dead retry` replays them on it).
    pub dead: u64,
    /// Some of the live ones, by id (at most [`HeldJobs::SOME`]).
    pub some: Vec<String>,
}

impl HeldJobs {
    /// How many live ids [`HeldJobs::some`] holds at most.
    pub const SOME: usize = 10;
}

/// How many live jobs took each path of a change (`patched(name)`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PatchCount {
    /// The change's name.
    pub name: String,
    /// Live jobs that took the old path: while any is left, the code needs it.
    pub old_path: u64,
    /// Live jobs that took the new path.
    pub new_path: u64,
}

/// A version live jobs are pinned to that the topic no longer keeps (it
/// was forgotten before it held them, or by an older hourglass): those jobs
/// are dead-lettered when they run, unless `hourglass upgrade` moves them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Unkept {
    /// The version.
    pub version: String,
    /// Its jobs.
    pub jobs: HeldJobs,
}

/// What a topic's journals hold: the jobs pinned to each version, and the
/// jobs on each path of each change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holdings {
    /// By version.
    pub versions: BTreeMap<String, HeldJobs>,
    /// By change, in name order.
    pub patches: Vec<PatchCount>,
}

impl Holdings {
    /// Counted from what [`Upgrades::holds`] read.
    pub fn of(holds: &[Hold]) -> Holdings {
        let mut versions: BTreeMap<String, HeldJobs> = BTreeMap::new();
        let mut patches: BTreeMap<&str, PatchCount> = BTreeMap::new();
        for h in holds {
            if let Some(v) = &h.version {
                let held = versions.entry(v.clone()).or_default();
                if h.dead {
                    held.dead += 1;
                } else {
                    held.live += 1;
                    if held.some.len() < HeldJobs::SOME {
                        held.some.push(h.id.clone());
                    }
                }
            }
            if h.dead {
                continue;
            }
            for (name, &new_path) in &h.patches {
                let count = patches.entry(name).or_insert_with(|| PatchCount {
                    name: name.clone(),
                    ..PatchCount::default()
                });
                if new_path {
                    count.new_path += 1;
                } else {
                    count.old_path += 1;
                }
            }
        }
        Holdings {
            versions,
            patches: patches.into_values().collect(),
        }
    }

    /// The versions live jobs are pinned to.
    pub fn held(&self) -> Vec<&str> {
        self.versions
            .iter()
            .filter(|(_, h)| h.live > 0)
            .map(|(v, _)| v.as_str())
            .collect()
    }

    /// Put each version's live jobs in `versions`.
    pub fn fill(&self, versions: &mut [crate::VersionInfo]) {
        for v in versions {
            v.live_jobs = self.of_version(&v.version).live;
        }
    }

    /// The versions live jobs are pinned to that are not among `kept`.
    pub fn unkept(&self, kept: &[crate::VersionInfo]) -> Vec<Unkept> {
        self.versions
            .iter()
            .filter(|(v, h)| h.live > 0 && !kept.iter().any(|k| &k.version == *v))
            .map(|(v, h)| Unkept {
                version: v.clone(),
                jobs: h.clone(),
            })
            .collect()
    }

    /// The live and dead jobs of `version`.
    pub fn of_version(&self, version: &str) -> HeldJobs {
        self.versions.get(version).cloned().unwrap_or_default()
    }
}

/// Moving journaled jobs between versions ([`Queue::upgrades`]).
#[derive(Clone, Copy)]
pub struct Upgrades<'q> {
    pub(crate) q: &'q Queue,
}

impl Upgrades<'_> {
    /// The ids of every job of the topic with a journal (live or dead), in
    /// no order.
    pub async fn journaled(self, keys: &TopicKeys) -> Result<Vec<String>, QueueError> {
        let mut ids = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, page): (u64, Vec<(String, String)>) = redis::cmd("HSCAN")
                .arg(&keys.journal)
                .arg(cursor)
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut self.q.conn.clone())
                .await?;
            ids.extend(page.into_iter().map(|(id, _)| id));
            if next == 0 {
                break;
            }
            cursor = next;
        }
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    /// Read job `id` for a replay check: `None` if it is gone or has no
    /// journal. One atomic step (the topic's slot), so what is read agrees.
    pub async fn read(self, keys: &TopicKeys, id: &str) -> Result<Option<Journaled>, QueueError> {
        let journal_key = keys.journal_of(id);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .hget(&keys.job, id)
            .hget(&keys.attempt, id)
            .zscore(&keys.lease, id)
            .zscore(&keys.dead, id)
            .hget(&keys.suspended, id)
            .hgetall(&journal_key)
            .hlen(&journal_key);
        let (stored, attempts, lease, dead, suspended, fields, n): Read =
            pipe.query_async(&mut self.q.conn.clone()).await?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        if n == 0 {
            return Ok(None);
        }
        let (due_ms, record) = split_stored(&stored);
        let position = match (lease, dead) {
            (_, Some(_)) => Position::Dead,
            (Some(_), None) => Position::Running,
            (None, None) => Position::Waiting,
        };
        Ok(Some(Journaled {
            id: id.to_owned(),
            record: Record::decode(record),
            due_ms: due_ms.filter(|_| position == Position::Waiting),
            attempts,
            position,
            suspended,
            journal: Journal::from_reply(&fields)?,
            fields: n,
        }))
    }

    /// Move each of `jobs` (as read, each checked) to `version`, unless it
    /// changed since it was read (`upgrade.lua`): how it went for each, in
    /// order.
    pub async fn apply(
        self,
        keys: &TopicKeys,
        version: &str,
        jobs: &[&Journaled],
    ) -> Result<Vec<Moved>, QueueError> {
        crate::record::check_version(version).map_err(QueueError::Invalid)?;
        let mut out = Vec::with_capacity(jobs.len());
        // a few hundred jobs a call: Lua's unpack limit is far, and one call stays short
        for chunk in jobs.chunks(200) {
            let mut inv = scripts::UPGRADE.on(keys);
            inv.arg(version);
            for j in chunk {
                inv.arg(&j.id)
                    .arg(j.attempts.map_or_else(String::new, |a| a.to_string()))
                    .arg(j.fields)
                    .arg(j.suspended.as_deref().unwrap_or(""))
                    .arg(j.pinned().unwrap_or(""));
            }
            let answers: Vec<String> = self.q.invoke_durable(&inv).await?;
            for answer in answers {
                out.push(match answer.as_str() {
                    "moved" => Moved::Moved,
                    "gone" => Moved::Gone,
                    "running" => Moved::Running,
                    "dead" => Moved::Dead,
                    "changed" => Moved::Changed,
                    other => {
                        return Err(QueueError::Protocol(format!("upgrade answered {other:?}")));
                    }
                });
            }
        }
        Ok(out)
    }

    /// What every journal of the topic holds: its job's pin, whether the
    /// job is dead, its patch marks (`holds.lua`, in bounded steps). A topic
    /// without journals costs one `EXISTS`.
    pub async fn holds(self, keys: &TopicKeys) -> Result<Vec<Hold>, QueueError> {
        let mut out = Vec::new();
        let mut cursor = "0".to_owned();
        loop {
            let reply: Vec<Value> = scripts::HOLDS
                .on(keys)
                .arg(&cursor)
                .arg(PAGE)
                .invoke_async(&mut self.q.conn.clone())
                .await?;
            let Some((next, rest)) = reply.split_first() else {
                return Err(QueueError::Protocol("holds answered nothing".into()));
            };
            for job in rest.chunks(4) {
                let [id, version, state, patches] = job else {
                    return Err(QueueError::Protocol(format!("holds answered {job:?}")));
                };
                let version = string(version)?;
                let patches = String::from_utf8_lossy(&bytes(patches)?).into_owned();
                out.push(Hold {
                    id: string(id)?,
                    version: (!version.is_empty()).then_some(version),
                    dead: string(state)? == "dead",
                    patches: patches
                        .lines()
                        .filter_map(|p| {
                            let (mark, name) = p.split_at_checked(1)?;
                            Some((name.to_owned(), mark == "1"))
                        })
                        .collect(),
                });
            }
            cursor = string(next)?;
            if cursor == "0" {
                break;
            }
        }
        // HSCAN may return an id twice
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out.dedup_by(|a, b| a.id == b.id);
        Ok(out)
    }
}

impl Upgrades<'_> {
    /// [`Upgrades::holds`], counted.
    pub async fn holdings(self, keys: &TopicKeys) -> Result<Holdings, QueueError> {
        Ok(Holdings::of(&self.holds(keys).await?))
    }
}

impl Queue {
    /// Moving journaled jobs to another handler version, and what a topic's
    /// journals hold.
    pub fn upgrades(&self) -> Upgrades<'_> {
        Upgrades { q: self }
    }
}

/// A promotion's move of its journaled jobs (`journaled = "replay"`), in
/// the rollout's verdict.
impl crate::Rollouts<'_> {
    /// Take the move of the journaled jobs to `version`, just promoted
    /// (`journaled = "replay"`): `true` for the one runner that gets it,
    /// `false` if another has it or another verdict came since.
    pub async fn claim_upgrade(
        self,
        keys: &TopicKeys,
        version: &str,
        who: &str,
        now_ms: u64,
    ) -> Result<bool, QueueError> {
        let answer: String = scripts::ROLLOUT_SET
            .on(keys)
            .arg(now_ms)
            .arg("upgrading")
            .arg(who)
            .arg("")
            .arg(version)
            .invoke_async(&mut self.q.conn.clone())
            .await?;
        Ok(answer == "ok")
    }

    /// Record in the promotion's verdict how many journaled jobs moved to
    /// `version` and how many were left.
    pub async fn upgraded(
        self,
        keys: &TopicKeys,
        version: &str,
        (moved, left): (u64, u64),
        who: &str,
        now_ms: u64,
    ) -> Result<(), QueueError> {
        let _: String = scripts::ROLLOUT_SET
            .on(keys)
            .arg(now_ms)
            .arg("upgraded")
            .arg(who)
            .arg(format!("{moved} {left}"))
            .arg(version)
            .invoke_async(&mut self.q.conn.clone())
            .await?;
        Ok(())
    }
}
