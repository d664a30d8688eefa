//! Reading a flow: what a job's attempt needs of it ([`Flows::dependencies`])
//! and the whole of it as `flow show` draws it ([`Flows::show`]).

use redis::Value;

use super::batch::{BatchSummary, summary};
use super::plan::{CallbackKind, Policy};
use super::store::Described;
use super::wire::FlowRef;
use crate::reply::optional_bytes;
use crate::{Flows, JobEnd, QueueError, Standing, scripts};

/// One job a flow job depends on, as its attempt sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    /// Its name in the flow.
    pub name: String,
    /// Its topic.
    pub topic: String,
    /// Its id in that topic.
    pub id: String,
    /// What its failure does to the dependent.
    pub policy: Policy,
    /// How it ended (none: it has not, which a released job never sees).
    pub end: Option<JobEnd>,
}

/// What a flow job's attempt reads of its flow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upstream {
    /// The jobs it waits for, each with how it ended (none for a batch's
    /// callback: it reads [`Upstream::batch`]).
    pub dependencies: Vec<Dependency>,
    /// For a batch's callback: how the batch stands.
    pub batch: Option<BatchSummary>,
}

/// A flow as `flow show` draws it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowView {
    /// Its id.
    pub id: String,
    /// When it was created (ms).
    pub created_ms: u64,
    /// When its last job ended (ms), if all have.
    pub done_ms: Option<u64>,
    /// When it was cancelled (ms), if it was.
    pub cancelled_ms: Option<u64>,
    /// For a batch: `open` (jobs can be added) or `sealed`.
    pub batch: Option<String>,
    /// Its jobs, in the order described.
    pub jobs: Vec<FlowJobView>,
}

/// One job of a [`FlowView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowJobView {
    /// Its name in the flow.
    pub name: String,
    /// Its topic.
    pub topic: String,
    /// Its id in that topic.
    pub id: String,
    /// The jobs it waits for: index and policy.
    pub after: Vec<(u32, Policy)>,
    /// How it ended, if it has: `acked`, `dead`, `cancelled`.
    pub ended: Option<String>,
    /// Whether it has been enqueued into its topic (a root, or every
    /// dependency ended).
    pub released: bool,
    /// For a batch's callback: which.
    pub callback: Option<CallbackKind>,
    /// Why it ended so, for a job that did not ack (a skipped callback's
    /// `skipped: ...`, a cancel's, a dead letter's last error).
    pub reason: Option<String>,
}

impl Flows<'_> {
    /// What job `job`'s attempt needs of its flow: its dependencies and how
    /// each ended. `None` when the flow is gone (expired, or never existed).
    pub async fn dependencies(self, job: &FlowRef) -> Result<Option<Upstream>, QueueError> {
        let reply: Vec<Value> = scripts::FLOW_READ
            .on(&self.keys(&job.flow))
            .arg(job.index)
            .invoke_async(&mut self.q.conn.clone())
            .await?;
        let Some(first) = reply.first() else {
            return Err(QueueError::Protocol("flow_read answered nothing".into()));
        };
        let Some(described) = optional_bytes(first)? else {
            return Ok(None);
        };
        let described: Described = serde_json::from_slice(&described)
            .map_err(|e| QueueError::Protocol(format!("a flow job's description: {e}")))?;
        if described.callback.is_some() {
            return Ok(Some(Upstream {
                dependencies: Vec::new(),
                batch: Some(summary(&job.flow, &reply[1..])?),
            }));
        }
        let mut out = Vec::with_capacity(described.after.len());
        let ids: Vec<u32> = described.after.iter().map(|&(i, _)| i).collect();
        let views = self.describe(&job.flow, &ids).await?;
        for ((view, &(_, policy)), end) in views.into_iter().zip(&described.after).zip(&reply[1..])
        {
            let end = optional_bytes(end)?
                .map(|b| JobEnd::decode(&b))
                .transpose()
                .map_err(|e| QueueError::Protocol(e.to_string()))?;
            out.push(Dependency {
                name: view.name,
                topic: view.topic,
                id: view.id,
                policy,
                end,
            });
        }
        Ok(Some(Upstream {
            dependencies: out,
            batch: None,
        }))
    }

    /// The jobs that wait for job `job` (none for a batch's jobs: only its
    /// callbacks do), each with its name and how it stands: `acked`,
    /// `dead`, `cancelled`, or `None` not ended.
    pub async fn dependents(
        self,
        job: &FlowRef,
    ) -> Result<Vec<(String, Option<String>)>, QueueError> {
        let key = self.keys(&job.flow).flow;
        let list: Option<String> = redis::cmd("HGET")
            .arg(&key)
            .arg(format!("d:{}", job.index))
            .query_async(&mut self.q.conn.clone())
            .await?;
        let indices: Vec<u32> = list
            .unwrap_or_default()
            .split(',')
            .filter_map(|i| i.parse().ok())
            .collect();
        if indices.is_empty() {
            return Ok(Vec::new());
        }
        let described = self.describe(&job.flow, &indices).await?;
        let fields: Vec<String> = indices.iter().map(|i| format!("s:{i}")).collect();
        let states: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(&key)
            .arg(&fields)
            .query_async(&mut self.q.conn.clone())
            .await?;
        Ok(described.into_iter().map(|d| d.name).zip(states).collect())
    }

    /// The descriptions of jobs `indices` of flow `id`.
    pub(super) async fn describe(
        self,
        id: &str,
        indices: &[u32],
    ) -> Result<Vec<Described>, QueueError> {
        let mut out = Vec::with_capacity(indices.len());
        for chunk in indices.chunks(1000) {
            let fields: Vec<String> = chunk.iter().map(|i| format!("x:{i}")).collect();
            let values: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
                .arg(&self.keys(id).flow)
                .arg(&fields)
                .query_async(&mut self.q.conn.clone())
                .await?;
            for (field, v) in fields.iter().zip(values) {
                let v =
                    v.ok_or_else(|| QueueError::Protocol(format!("flow {id} lacks {field}")))?;
                out.push(
                    serde_json::from_slice(&v)
                        .map_err(|e| QueueError::Protocol(format!("flow {id}: {field}: {e}")))?,
                );
            }
        }
        Ok(out)
    }

    /// Flow `id` as it stands, or `None` when there is no such flow (or it
    /// ended longer ago than it is kept).
    pub async fn show(self, id: &str) -> Result<Option<FlowView>, QueueError> {
        let key = self.keys(id).flow;
        let head: Vec<Option<u64>> = redis::cmd("HMGET")
            .arg(&key)
            .arg(&["n", "created", "done", "cancelled"])
            .query_async(&mut self.q.conn.clone())
            .await?;
        let [Some(n), created, done, cancelled] = head[..] else {
            return Ok(None);
        };
        let batch: Option<String> = redis::cmd("HGET")
            .arg(&key)
            .arg("batch")
            .query_async(&mut self.q.conn.clone())
            .await?;
        let indices: Vec<u32> = (0..n as u32).collect();
        let described = self.describe(id, &indices).await?;
        let mut jobs = Vec::with_capacity(described.len());
        for (chunk, described) in indices.chunks(1000).zip(described.chunks(1000)) {
            let fields: Vec<String> = chunk
                .iter()
                .flat_map(|i| [format!("s:{i}"), format!("w:{i}")])
                .collect();
            let values: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(&key)
                .arg(&fields)
                .query_async(&mut self.q.conn.clone())
                .await?;
            for (d, pair) in described.iter().zip(values.chunks(2)) {
                let waiting = pair[1].as_deref().and_then(|w| w.parse::<i64>().ok());
                jobs.push(FlowJobView {
                    name: d.name.clone(),
                    topic: d.topic.clone(),
                    id: d.id.clone(),
                    after: d.after.clone(),
                    ended: pair[0].clone(),
                    released: waiting.is_none_or(|w| w <= 0),
                    callback: d.callback,
                    reason: None,
                });
            }
        }
        // the reasons of what did not ack (an acked job's end holds its
        // result, not read here)
        let failed: Vec<usize> = jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| j.ended.as_deref().is_some_and(|e| e != "acked"))
            .map(|(i, _)| i)
            .collect();
        for chunk in failed.chunks(1000) {
            let fields: Vec<String> = chunk.iter().map(|i| format!("r:{i}")).collect();
            let ends: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
                .arg(&key)
                .arg(&fields)
                .query_async(&mut self.q.conn.clone())
                .await?;
            for (&i, end) in chunk.iter().zip(ends) {
                jobs[i].reason = end
                    .and_then(|e| JobEnd::decode(&e).ok())
                    .and_then(|e| e.reason);
            }
        }
        Ok(Some(FlowView {
            id: id.to_owned(),
            created_ms: created.unwrap_or(0),
            done_ms: done,
            cancelled_ms: cancelled,
            batch,
            jobs,
        }))
    }

    /// Where job `id` of `topic` stands when its topic does not know it: a
    /// job of a flow still waiting there for its dependencies
    /// ([`Standing::InFlow`]), or one that ended in its flow without
    /// reaching its topic (cancelled while it waited, a skipped callback)
    /// or whose end its topic no longer keeps ([`Standing::Ended`], the
    /// flow's copy). [`Standing::Unknown`] for anything else.
    pub(crate) async fn standing_of(self, topic: &str, id: &str) -> Result<Standing, QueueError> {
        let Some((flow, _)) = id.split_once('/') else {
            return Ok(Standing::Unknown);
        };
        if super::check_flow_id(flow).is_err() {
            return Ok(Standing::Unknown);
        }
        let Some(view) = self.show(flow).await? else {
            return Ok(Standing::Unknown);
        };
        let Some((i, job)) = view
            .jobs
            .iter()
            .enumerate()
            .find(|(_, j)| j.id == id && j.topic == topic)
        else {
            return Ok(Standing::Unknown);
        };
        if job.ended.is_some() {
            let end: Option<Vec<u8>> = redis::cmd("HGET")
                .arg(self.keys(flow).flow)
                .arg(format!("r:{i}"))
                .query_async(&mut self.q.conn.clone())
                .await?;
            return Ok(match end.map(|e| JobEnd::decode(&e)) {
                Some(Ok(end)) => Standing::Ended(end),
                _ => Standing::Unknown,
            });
        }
        let waiting_for = job
            .after
            .iter()
            .filter_map(|&(d, _)| view.jobs.get(d as usize))
            .filter(|d| d.ended.is_none())
            .map(|d| d.name.clone())
            .collect();
        Ok(Standing::InFlow {
            flow: flow.to_owned(),
            index: i as u32,
            released: job.released,
            waiting_for,
        })
    }
}
