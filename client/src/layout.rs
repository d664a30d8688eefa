//! The layout version of a namespace: which shape of keys and records
//! hourglass keeps in Redis, so a build never serves data it does not
//! understand.
//!
//! - Layout 1: everything written before layouts had a number (no
//!   `layout` key). This build reads it unchanged.
//! - Layout 2: layout 1 plus the per-topic `rollout` and `versions`
//!   hashes and records of format 2 (jobs pinned to a handler
//!   version, which a layout-1 runner dead-letters as unreadable). Also
//!   within layout 2, additive: the per-topic `account` hash (the accounts
//!   of tagged jobs, which older builds ignore) and the `{:usage}` hours.
//! - Layout 3 (this build): the waiting jobs in a time index instead of
//!   one zset (`pending`): buckets of a few dozen jobs by due time, each a
//!   small zset Redis keeps compact, under a zset of buckets (`due`); each
//!   stored job value carries the due time it waits for before its record
//!   (`lua/index.lua`). About 90 bytes less per waiting job, and a change
//!   touches a small structure whatever the backlog. `hourglass migrate`
//!   moves layout 2's waiting jobs onto the index in steps of 1,000; every
//!   claim also moves what runners of layout 2 still put back there.
//!
//! The namespace's `layout` key says which, and so does each topic's own
//! `layout` key (in the topic's slot, for scripts on a cluster).
//!
//! Every enqueue stamps its topic's `layout` key (`SET NX`, in the script),
//! so data a build of this layout wrote is told from older data even before
//! a runner has stamped the namespace. A namespace with no `layout` key is:
//! - new, if it holds nothing but topics stamped with this layout: the first
//!   runner or command stamps it;
//! - layout 1, if a runner of layout 1 has been here (its heartbeat) or a
//!   topic holds jobs without a stamp: this build waits (runner) or refuses
//!   (CLI) until `hourglass migrate` ([`Layouts::migrate`]) has stamped it.

use super::keys::{RunnerKeys, TopicKeys, layout_key};
use super::{Queue, QueueError, scripts};

/// The layout this build reads and writes.
pub const LAYOUT: u32 = 3;

/// Waiting jobs `migrate` moves onto the time index per step.
const MIGRATE_STEP: usize = 1_000;

/// What a namespace holds, as far as its layout goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// No stamp and no data from before layouts had a number: the first
    /// runner stamps it with [`LAYOUT`].
    New,
    /// Data from before layouts had a number.
    Unversioned,
    /// Stamped with this version.
    Version(u32),
}

impl Layout {
    /// The version number (1 for unversioned data, `LAYOUT` for a new namespace).
    pub fn number(self) -> u32 {
        match self {
            Layout::New => LAYOUT,
            Layout::Unversioned => 1,
            Layout::Version(v) => v,
        }
    }
}

/// What one run of [`Layouts::migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// The layout found.
    pub from: u32,
    /// The layout left.
    pub to: u32,
    /// Topics stamped in this run (topics stamped by an earlier, interrupted run are not listed).
    pub topics: Vec<String>,
}

/// The namespace's layout version ([`Queue::layout`]).
#[derive(Clone, Copy)]
pub struct Layouts<'q> {
    pub(crate) q: &'q Queue,
}

impl Queue {
    /// The namespace's layout version: read, stamp, migrate.
    pub fn layout(&self) -> Layouts<'_> {
        Layouts { q: self }
    }
}

impl Layouts<'_> {
    /// The layout of this namespace. `topics` are the topics the caller
    /// knows of (its queues.toml): their keys and the runners' heartbeats
    /// tell data from an empty namespace when no `layout` key is there.
    pub async fn read(self, topics: &[&str]) -> Result<Layout, QueueError> {
        let stamp: Option<String> = redis::cmd("GET")
            .arg(layout_key(&self.q.namespace))
            .query_async(&mut self.q.conn.clone())
            .await?;
        if let Some(stamp) = stamp {
            return stamp.trim().parse().map(Layout::Version).map_err(|_| {
                QueueError::Protocol(format!("layout key holds {stamp:?}, not a number"))
            });
        }
        // layout-1 runners were here: they wrote heartbeats before any stamp
        let runners: u64 = redis::cmd("EXISTS")
            .arg(RunnerKeys::new(&self.q.namespace).info)
            .query_async(&mut self.q.conn.clone())
            .await?;
        if runners > 0 {
            return Ok(Layout::Unversioned);
        }
        // a topic with jobs and no stamp was written by a layout-1 build
        // (one call per topic: on a cluster a command may not span slots)
        for topic in topics {
            let k = TopicKeys::new(&self.q.namespace, topic);
            let (data, stamp): (u64, Option<String>) = redis::pipe()
                .cmd("EXISTS")
                .arg(&[
                    &k.pending,
                    &k.legacy_pending,
                    &k.lease,
                    &k.dead,
                    &k.job,
                    &k.seq,
                    &k.versions,
                ])
                .get(&k.layout)
                .query_async(&mut self.q.conn.clone())
                .await?;
            if data > 0 && stamp.is_none() {
                return Ok(Layout::Unversioned);
            }
        }
        Ok(Layout::New)
    }

    /// Stamp a new namespace, and `topics`, with [`LAYOUT`] (the first
    /// runner or command on it). Never overwrites a stamp.
    pub async fn stamp(self, topics: &[&str]) -> Result<(), QueueError> {
        for topic in topics {
            let _: bool = redis::cmd("SET")
                .arg(TopicKeys::new(&self.q.namespace, topic).layout)
                .arg(LAYOUT)
                .arg("NX")
                .query_async(&mut self.q.conn.clone())
                .await
                .map(|r: Option<String>| r.is_some())?;
        }
        let _: Option<String> = redis::cmd("SET")
            .arg(layout_key(&self.q.namespace))
            .arg(LAYOUT)
            .arg("NX")
            .query_async(&mut self.q.conn.clone())
            .await?;
        Ok(())
    }

    /// Upgrade this namespace to [`LAYOUT`], online and in bounded steps:
    /// each topic is stamped on its own (a command per topic), the namespace
    /// last, so an interrupted run leaves a namespace still at its old
    /// layout and a rerun finishes the work. `topics` are the ones to stamp
    /// (queues.toml's, the runners' and any found by [`Layouts::topics`]).
    pub async fn migrate(self, topics: &[String]) -> Result<Migrated, QueueError> {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let from = self.read(&names).await?;
        match from {
            Layout::Version(v) if v > LAYOUT => {
                return Err(QueueError::Invalid(newer_message(&self.q.namespace, v)));
            }
            Layout::Version(v) if v == LAYOUT => {
                return Ok(Migrated {
                    from: v,
                    to: v,
                    topics: Vec::new(),
                });
            }
            _ => {}
        }
        let mut stamped = Vec::new();
        for topic in topics {
            let k = TopicKeys::new(&self.q.namespace, topic);
            // layout 1 to 2 changed no data; 2 to 3 moves the waiting jobs
            // onto the time index, a bounded step per call
            loop {
                let left: u64 = scripts::MIGRATE
                    .on(&k)
                    .arg(MIGRATE_STEP)
                    .invoke_async(&mut self.q.conn.clone())
                    .await?;
                if left == 0 {
                    break;
                }
            }
            let before: Option<String> = redis::cmd("SET")
                .arg(&k.layout)
                .arg(LAYOUT)
                .arg("GET")
                .query_async(&mut self.q.conn.clone())
                .await?;
            if before.as_deref() != Some(LAYOUT.to_string().as_str()) {
                stamped.push(topic.clone());
            }
        }
        let _: () = redis::cmd("SET")
            .arg(layout_key(&self.q.namespace))
            .arg(LAYOUT)
            .query_async(&mut self.q.conn.clone())
            .await?;
        Ok(Migrated {
            from: from.number(),
            to: LAYOUT,
            topics: stamped,
        })
    }

    /// Topic names found in Redis under this namespace by `SCAN` (one server
    /// or Sentinel; a cluster answers for one node only, so there the
    /// topics come from queues.toml and the runners).
    pub async fn topics(self) -> Result<Vec<String>, QueueError> {
        if self.q.endpoint.servers.is_cluster() {
            return Ok(Vec::new());
        }
        let pattern = format!("{}:{{*}}:*", self.q.namespace);
        let mut found = std::collections::BTreeSet::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut self.q.conn.clone())
                .await?;
            for key in keys {
                let rest = &key[self.q.namespace.len() + 2..];
                if let Some(end) = rest.find('}')
                    && !rest[..end].starts_with(':')
                {
                    found.insert(rest[..end].to_owned());
                }
            }
            if next == 0 {
                return Ok(found.into_iter().collect());
            }
            cursor = next;
        }
    }
}

/// Why a build refuses a namespace stamped by a newer one.
pub fn newer_message(namespace: &str, found: u32) -> String {
    format!(
        "namespace {namespace:?} has layout {found}, written by a newer hourglass; this one knows layouts up to {LAYOUT}: run the newer hourglass (or that version's `hourglass migrate` back, if it offers one)"
    )
}

/// Why a build waits for (runner) or refuses (CLI) a namespace of an older layout.
pub fn older_message(namespace: &str, found: u32) -> String {
    format!(
        "namespace {namespace:?} has layout {found}; this hourglass uses layout {LAYOUT}: run `hourglass migrate` (online, safe to interrupt and rerun; runners of layout {found} keep working meanwhile)"
    )
}

#[cfg(test)]
mod tests {
    use super::LAYOUT;

    #[test]
    fn the_scripts_stamp_this_layout() {
        let prelude = include_str!("../lua/prelude.lua");
        assert!(
            prelude.contains(&format!("local LAYOUT = '{LAYOUT}'")),
            "prelude.lua's LAYOUT is not {LAYOUT}"
        );
    }
}
