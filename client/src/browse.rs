//! Browsing a topic's jobs by state, a page at a time ([`Queue::browse`]):
//! `browse.lua` walks the state's structure from a cursor (by rank, never
//! reading what comes before it: a page of a million dead letters costs
//! what a page of ten does), filtering by id prefix, tenant key, handler
//! version and error text within a bounded look; then one pipeline reads
//! what a row shows of each job found.

use base64::Engine;
use redis::Value;
use serde::Serialize;

use super::reply::{bytes, number, optional_string, string};
use super::{DeadInfo, EndState, Failure, Queue, QueueError, Suspension, TopicKeys, scripts};

/// Most jobs one look may examine, whatever the filters: a page with
/// filters that match little comes back short, with a cursor to go on.
pub const BROWSE_LOOK: usize = 5_000;

/// Most jobs a page holds.
pub const BROWSE_MOST: usize = 500;

/// A state to browse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum BrowseState {
    /// Waiting for a later time (durable jobs asleep among them), by due time.
    Scheduled,
    /// Due, waiting for a slot: by priority, then due time (a fair topic's
    /// queued jobs after them, by turn).
    Ready,
    /// Leased to a runner, by lease deadline.
    Running,
    /// Durable jobs asleep or waiting for a signal (in no order).
    Suspended,
    /// Dead letters, newest first.
    Dead,
    /// Recently ended (a topic with `results`: the newest 10,000), newest first.
    Ended,
}

impl BrowseState {
    fn as_str(self) -> &'static str {
        match self {
            BrowseState::Scheduled => "scheduled",
            BrowseState::Ready => "ready",
            BrowseState::Running => "running",
            BrowseState::Suspended => "suspended",
            BrowseState::Dead => "dead",
            BrowseState::Ended => "ended",
        }
    }
}

/// What to browse: a state, from a cursor, filtered.
#[derive(Debug, Clone, Default)]
pub struct Browse {
    /// The page's cursor, as the last page answered it (`None`: the first).
    pub cursor: Option<String>,
    /// Most jobs (1 to [`BROWSE_MOST`]).
    pub limit: usize,
    /// Only ids starting so.
    pub prefix: Option<String>,
    /// Only jobs of this tenant key (`-`: only jobs without one).
    pub key: Option<String>,
    /// Only jobs whose last attempt ran on this handler version.
    pub version: Option<String>,
    /// Only jobs whose failure (or story) holds this text.
    pub error: Option<String>,
}

/// One job as a page lists it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRow {
    /// Its id.
    pub id: String,
    /// Due (scheduled, ready), leased until (running), dead or ended at (ms);
    /// null for a suspended job and one in a fair topic's queue.
    pub at_ms: Option<u64>,
    /// Attempts started.
    pub attempts: u32,
    /// Its last failure (or why it is dead), its first 300 characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The handler version its last attempt ran on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Its tenant key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Its priority (0, the highest, to 9).
    pub priority: u8,
    /// The size of its stored record (payload and header), bytes.
    pub bytes: u64,
    /// What a suspended job waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspended: Option<Suspension>,
    /// How an ended job ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<EndState>,
}

/// A page of a topic's jobs in one state.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BrowsePage {
    /// The topic.
    pub topic: String,
    /// The state browsed.
    pub state: BrowseState,
    /// The jobs found, in the state's order.
    pub jobs: Vec<JobRow>,
    /// The next page's cursor; null when the state was read to its end.
    pub next: Option<String>,
}

impl Queue {
    /// A page of `topic`'s jobs in `state` as of `now_ms` ([`Browse`]).
    pub async fn browse(
        &self,
        keys: &TopicKeys,
        state: BrowseState,
        page: &Browse,
        now_ms: u64,
    ) -> Result<BrowsePage, QueueError> {
        let cursor = match &page.cursor {
            None => String::new(),
            Some(c) => base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| {
                    QueueError::Invalid(format!("cursor {c:?} is not one a page gave"))
                })?,
        };
        let limit = page.limit.clamp(1, BROWSE_MOST);
        let text = |o: &Option<String>| o.clone().unwrap_or_default();
        let reply: Vec<Value> = scripts::BROWSE
            .on(keys)
            .arg(state.as_str())
            .arg(now_ms)
            .arg(limit)
            .arg(BROWSE_LOOK)
            .arg(cursor)
            .arg(text(&page.prefix))
            .arg(text(&page.key))
            .arg(text(&page.version))
            .arg(text(&page.error))
            .invoke_async(&mut self.conn.clone())
            .await?;
        let (next, found) = reply
            .split_first()
            .ok_or_else(|| QueueError::Protocol("browse answered nothing".into()))?;
        let next = string(next)?;
        let mut ids = Vec::with_capacity(found.len() / 2);
        let mut scores = Vec::with_capacity(found.len() / 2);
        for pair in found.chunks(2) {
            let [id, score] = pair else {
                return Err(QueueError::Protocol(format!("browse answered {pair:?}")));
            };
            ids.push(string(id)?);
            let score = string(score)?;
            scores.push(
                score
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s >= 0.0)
                    .map(|s| s as u64),
            );
        }
        let jobs = self.rows(keys, state, ids, scores).await?;
        Ok(BrowsePage {
            topic: keys.topic.clone(),
            state,
            jobs,
            next: (!next.is_empty())
                .then(|| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(next)),
        })
    }

    /// What a page shows of each of `ids`: one pipeline.
    async fn rows(
        &self,
        keys: &TopicKeys,
        state: BrowseState,
        ids: Vec<String>,
        scores: Vec<Option<u64>>,
    ) -> Result<Vec<JobRow>, QueueError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        let why = if state == BrowseState::Dead {
            &keys.dead_info
        } else {
            &keys.error
        };
        pipe.cmd("HMGET").arg(&keys.attempt).arg(&ids);
        pipe.cmd("HMGET").arg(why).arg(&ids);
        pipe.cmd("HMGET").arg(format!("{}:of", keys.fair)).arg(&ids);
        pipe.cmd("HMGET").arg(&keys.priority).arg(&ids);
        pipe.cmd("HMGET").arg(&keys.suspended).arg(&ids);
        for id in &ids {
            if state == BrowseState::Ended {
                // the end's header line (its story may make it a few KiB)
                pipe.cmd("GETRANGE")
                    .arg(keys.result(id))
                    .arg(0)
                    .arg(32 << 10);
            } else {
                pipe.cmd("HSTRLEN").arg(&keys.job).arg(id);
            }
        }
        let reply: Vec<Value> = pipe.query_async(&mut self.conn.clone()).await?;
        let column = |i: usize| -> Result<Vec<Option<String>>, QueueError> {
            match reply.get(i) {
                Some(Value::Array(v)) => v.iter().map(optional_string).collect(),
                other => Err(QueueError::Protocol(format!("browse read {other:?}"))),
            }
        };
        let (attempts, failures, tenants, priorities, waits) =
            (column(0)?, column(1)?, column(2)?, column(3)?, column(4)?);
        let mut rows = Vec::with_capacity(ids.len());
        for (j, (id, at_ms)) in ids.into_iter().zip(scores).enumerate() {
            let extra = &reply[5 + j];
            let mut row = JobRow {
                id,
                at_ms,
                attempts: attempts[j]
                    .as_deref()
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0),
                error: None,
                version: None,
                key: tenants[j].clone().filter(|k| !k.is_empty()),
                priority: priorities[j]
                    .as_deref()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0),
                bytes: 0,
                suspended: waits[j]
                    .as_deref()
                    .and_then(|w| serde_json::from_str(w).ok()),
                ended: None,
            };
            match (state, &failures[j]) {
                (BrowseState::Dead, Some(json)) => {
                    if let Ok(info) = serde_json::from_str::<DeadInfo>(json) {
                        row.attempts = info.attempts;
                        row.error = Some(cut(&info.reason));
                        row.version = info.handler;
                    }
                }
                (_, Some(json)) => {
                    let f = Failure::parse(json.clone());
                    row.version = f
                        .attempts
                        .last()
                        .and_then(|a| a.handler.clone())
                        .or(f.handler.clone());
                    row.error = f.failed().then(|| cut(&f.error));
                }
                _ => {}
            }
            if state == BrowseState::Ended {
                if let Ok(head) = bytes(extra)
                    && let Some(end) = super::JobEnd::header_of(&head)
                {
                    row.ended = Some(end.state);
                    row.attempts = end.attempts;
                    row.error = end.reason.as_deref().map(cut);
                    row.version = end.version;
                }
            } else {
                row.bytes = number(extra).unwrap_or(0);
            }
            rows.push(row);
        }
        Ok(rows)
    }
}

/// The first 300 characters of `text`.
fn cut(text: &str) -> String {
    match text.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}
