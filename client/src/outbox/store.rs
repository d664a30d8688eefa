//! The outbox's Redis side: delivering parked entries (follow-ups into
//! their topics, ends to their flows) and taking those left behind.

use std::collections::BTreeMap;

use redis::Value;

use super::{Entry, decode_entry};
use crate::clock::millis;
use crate::flow::Notice;
use crate::reply::{bytes, string};
use crate::{
    CorruptRecord, Enqueued, NewJob, OUTBOX_SWEEP, Pipeline, QueueError, TopicKeys, scripts,
};

impl Pipeline<'_> {
    /// Deliver parked entries: enqueue their follow-ups into their topics,
    /// tell flows the ends they carry (enqueueing the dependents that
    /// become ready), then clear them from the parent topic's outbox.
    /// `entries` holds (token, entry) with tokens as [`Pipeline::take_outbox`]
    /// returns them, or [`outbox_token`](crate::outbox_token) of an ack. Answers how many new
    /// jobs each target topic got.
    pub async fn deliver(
        self,
        parent: &TopicKeys,
        entries: &[(String, Entry)],
        now_ms: u64,
    ) -> Result<BTreeMap<String, usize>, QueueError> {
        let mut new = self.enqueue_parked(entries, now_ms).await?;
        for (token, entry) in entries {
            for spec in &entry.flows {
                let origin = format!("{}#{token}", parent.outbox);
                for (topic, n) in self.q.flows().create_once(spec, &origin, now_ms).await? {
                    *new.entry(topic).or_default() += n;
                }
            }
        }
        let notices: Vec<&Notice> = entries.iter().flat_map(|(_, e)| &e.notices).collect();
        if !notices.is_empty() {
            for (topic, n) in self.q.flows().end(&notices, now_ms).await? {
                *new.entry(topic).or_default() += n;
            }
        }
        self.clear(parent, entries).await?;
        Ok(new)
    }

    /// The follow-ups of `entries`, enqueued into their topics: how many
    /// were new in each.
    pub(crate) async fn enqueue_parked(
        self,
        entries: &[(String, Entry)],
        now_ms: u64,
    ) -> Result<BTreeMap<String, usize>, QueueError> {
        let mut by_topic: BTreeMap<&str, Vec<NewJob>> = BTreeMap::new();
        for (_, entry) in entries {
            for p in &entry.jobs {
                by_topic.entry(&p.topic).or_default().push(p.job.clone());
            }
        }
        let mut new = BTreeMap::new();
        for (topic, jobs) in by_topic {
            let answers = self.q.enqueue(&self.q.keys(topic), &jobs, now_ms).await?;
            let fresh = answers
                .iter()
                .filter(|a| matches!(a, Enqueued::New(_)))
                .count();
            new.insert(topic.to_owned(), fresh);
        }
        Ok(new)
    }

    /// Forget delivered entries.
    pub(crate) async fn clear(
        self,
        parent: &TopicKeys,
        entries: &[(String, Entry)],
    ) -> Result<(), QueueError> {
        let mut inv = scripts::OUTBOX_CLEAR.on(parent);
        for (token, _) in entries {
            inv.arg(token);
        }
        let _: u64 = inv.invoke_async(&mut self.q.conn.clone()).await?;
        Ok(())
    }

    /// Take up to `limit` outbox entries whose delivery is overdue, holding them
    /// for this caller for [`OUTBOX_SWEEP`]; deliver them with [`Pipeline::deliver`].
    /// An entry that cannot be decoded is returned as an error string.
    pub async fn take_outbox(
        self,
        keys: &TopicKeys,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(String, Result<Entry, CorruptRecord>)>, QueueError> {
        let reply: Vec<Value> = scripts::OUTBOX_TAKE
            .on(keys)
            .arg(now_ms)
            .arg(now_ms + millis(OUTBOX_SWEEP))
            .arg(limit)
            .invoke_async(&mut self.q.conn.clone())
            .await?;
        reply
            .chunks(2)
            .map(|pair| match pair {
                [token, entry] => Ok((string(token)?, decode_entry(&bytes(entry)?))),
                other => Err(QueueError::Protocol(format!("outbox answered {other:?}"))),
            })
            .collect()
    }
}
