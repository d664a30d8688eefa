//! Waiting on jobs without polling: [`Waiters`] keeps one pub/sub
//! subscription per topic (its events channel, see `results.rs`) for any
//! number of waiters in this process and hands each message to the waiters
//! of its job. The runner pays nothing per waiter: its scripts publish a
//! job's end whether anyone listens or not (on topics that keep results).
//!
//! No end is missed: a watch subscribes first, then reads where the job
//! stands (one script, see `peek.lua`), and reads again whenever the
//! subscription was re-established (messages sent meanwhile are lost).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::Value;
use tokio::sync::{mpsc, watch};

use super::reply::{bytes, string};
use super::results::{JobEnd, Progress, Standing};
use super::{Queue, QueueError, TopicKeys, scripts};

/// What a watcher hears about its job.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    /// The running attempt reported progress.
    Progress(Progress),
    /// An attempt failed and the job will run again: `{"attempt", "next_due_ms",
    /// "failure": {"error", "handler", ...}}`.
    Attempt(serde_json::Value),
    /// The job ended; nothing follows.
    End(JobEnd),
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Waited {
    /// The job ended so (now or before the wait began, within `keep`).
    Ended(JobEnd),
    /// The time ran out; the job is still live.
    TimedOut,
    /// No such job: never enqueued, or its end is no longer kept (or its
    /// topic keeps no results).
    Unknown,
}

/// What a topic's listener passes to a watcher.
#[derive(Debug)]
enum Heard {
    /// A message for its job (the JSON after the id).
    Message(String),
    /// The subscription was (re)established: messages may have been lost.
    Resubscribed,
}

type Senders = HashMap<String, Vec<(u64, mpsc::UnboundedSender<Heard>)>>;

struct Channel {
    /// How many times the subscription was established (0: not yet).
    ready: watch::Receiver<u64>,
    watchers: Senders,
    task: tokio::task::JoinHandle<()>,
}

struct Inner {
    queue: Queue,
    channels: Mutex<(HashMap<String, Channel>, u64)>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let channels = self.channels.get_mut().expect("waiters");
        for channel in channels.0.values() {
            channel.task.abort();
        }
    }
}

/// Waiters on jobs of one namespace: share one per process (the API does);
/// each topic someone waits on costs one subscription, however many wait.
#[derive(Clone)]
pub struct Waiters {
    inner: Arc<Inner>,
}

impl Queue {
    /// Wait until job `id` of a topic ends, or `timeout` passes (a
    /// subscription of its own: for many waits at once, share a [`Waiters`]).
    /// The topic must keep results (`results` in queues.toml), else every
    /// wait answers [`Waited::Unknown`] once the job is gone.
    pub async fn wait_for(
        &self,
        keys: &TopicKeys,
        id: &str,
        timeout: Duration,
    ) -> Result<Waited, QueueError> {
        Waiters::new(self.clone()).wait_for(keys, id, timeout).await
    }
}

impl Queue {
    /// Where job `id` of a topic stands: live (with its progress), ended
    /// (with its kept end), or unknown.
    pub async fn standing(&self, keys: &TopicKeys, id: &str) -> Result<Standing, QueueError> {
        let mut inv = scripts::PEEK.on(keys);
        inv.key(keys.result(id)).arg(id);
        let reply: Vec<Value> = inv.invoke_async(&mut self.conn.clone()).await?;
        let [live, running, progress, end] = reply.as_slice() else {
            return Err(QueueError::Protocol(format!("peek answered {reply:?}")));
        };
        let flag = |v: &Value| matches!(v, Value::Int(1));
        if flag(live) {
            let progress = match progress {
                Value::Nil => None,
                v => serde_json::from_str(&string(v)?).ok(),
            };
            return Ok(Standing::Live {
                running: flag(running),
                progress,
            });
        }
        match end {
            Value::Nil => self.flows().standing_of(&keys.topic, id).await,
            v => JobEnd::decode(&bytes(v)?)
                .map(Standing::Ended)
                .map_err(|e| QueueError::Protocol(e.to_string())),
        }
    }
}

impl Waiters {
    /// Waiters over `queue`'s connection settings (subscriptions are
    /// connections of their own).
    pub fn new(queue: Queue) -> Waiters {
        Waiters {
            inner: Arc::new(Inner {
                queue,
                channels: Mutex::new((HashMap::new(), 0)),
            }),
        }
    }

    /// Watch job `id` of a topic: subscribed before it returns, with where
    /// the job stood right after ([`Watch::standing`]). Waits for Redis while
    /// it is away: bound it with a timeout.
    pub async fn watch(&self, keys: &TopicKeys, id: &str) -> Result<Watch, QueueError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (mut ready, token) = {
            let mut guard = self.inner.channels.lock().expect("waiters");
            let (channels, next) = &mut *guard;
            *next += 1;
            let token = *next;
            let channel = channels
                .entry(keys.events.clone())
                .or_insert_with(|| listen(&self.inner, &keys.events));
            channel
                .watchers
                .entry(id.to_owned())
                .or_default()
                .push((token, tx));
            (channel.ready.clone(), token)
        };
        let mut watch = Watch {
            rx,
            keys: keys.clone(),
            id: id.to_owned(),
            inner: self.inner.clone(),
            token,
            standing: Standing::Unknown,
            ended: false,
        };
        ready
            .wait_for(|n| *n > 0)
            .await
            .map_err(|_| QueueError::Protocol("the waiters' listener stopped".into()))?;
        watch.standing = self.inner.queue.standing(keys, id).await?;
        watch.ended = !matches!(
            watch.standing,
            Standing::Live { .. } | Standing::InFlow { .. }
        );
        Ok(watch)
    }

    /// Wait until job `id` of a topic ends, or `timeout` passes.
    pub async fn wait_for(
        &self,
        keys: &TopicKeys,
        id: &str,
        timeout: Duration,
    ) -> Result<Waited, QueueError> {
        let waiting = async {
            let mut watch = self.watch(keys, id).await?;
            match watch.standing() {
                Standing::Ended(end) => return Ok(Waited::Ended(end.clone())),
                Standing::Unknown => return Ok(Waited::Unknown),
                Standing::Live { .. } | Standing::InFlow { .. } => {}
            }
            while let Some(event) = watch.next().await? {
                if let JobEvent::End(end) = event {
                    return Ok(Waited::Ended(end));
                }
            }
            Ok(Waited::Unknown)
        };
        match tokio::time::timeout(timeout, waiting).await {
            Ok(waited) => waited,
            Err(_) => Ok(Waited::TimedOut),
        }
    }
}

/// One job being watched; dropping it stops the watch.
pub struct Watch {
    rx: mpsc::UnboundedReceiver<Heard>,
    keys: TopicKeys,
    id: String,
    inner: Arc<Inner>,
    token: u64,
    standing: Standing,
    ended: bool,
}

impl Watch {
    /// Where the job stood once the watch was subscribed.
    pub fn standing(&self) -> &Standing {
        &self.standing
    }

    /// The next event of the job; `None` once it ended (or it was not live
    /// when the watch began).
    pub async fn next(&mut self) -> Result<Option<JobEvent>, QueueError> {
        while !self.ended {
            let Some(heard) = self.rx.recv().await else {
                return Err(QueueError::Protocol("the waiters' listener stopped".into()));
            };
            let json = match heard {
                Heard::Message(json) => json,
                Heard::Resubscribed => String::from(r#"{"event":"end"}"#),
            };
            let Ok(event) = serde_json::from_str::<serde_json::Value>(&json) else {
                continue;
            };
            match event.get("event").and_then(|e| e.as_str()) {
                Some("end") => match self.inner.queue.standing(&self.keys, &self.id).await? {
                    Standing::Ended(end) => {
                        self.ended = true;
                        return Ok(Some(JobEvent::End(end)));
                    }
                    Standing::Unknown => self.ended = true,
                    Standing::Live { .. } | Standing::InFlow { .. } => {}
                },
                Some("attempt") => return Ok(Some(JobEvent::Attempt(event))),
                // a progress report has no "event" field: it is the stored JSON
                _ => {
                    if let Ok(progress) = serde_json::from_value::<Progress>(event) {
                        return Ok(Some(JobEvent::Progress(progress)));
                    }
                }
            }
        }
        Ok(None)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut guard = self.inner.channels.lock().expect("waiters");
        if let Some(channel) = guard.0.get_mut(&self.keys.events)
            && let Some(senders) = channel.watchers.get_mut(&self.id)
        {
            senders.retain(|(token, _)| *token != self.token);
            if senders.is_empty() {
                channel.watchers.remove(&self.id);
            }
        }
    }
}

/// Start listening on `channel` for `inner`'s watchers.
fn listen(inner: &Arc<Inner>, channel: &str) -> Channel {
    let (ready_tx, ready) = watch::channel(0);
    let weak = Arc::downgrade(inner);
    let queue = inner.queue.clone();
    let task = tokio::spawn(forward(queue, weak, channel.to_owned(), ready_tx));
    Channel {
        ready,
        watchers: HashMap::new(),
        task,
    }
}

/// Subscribe to `channel` and hand each message to the watchers of its job,
/// reconnecting with backoff while the waiters exist.
async fn forward(queue: Queue, inner: Weak<Inner>, channel: String, ready: watch::Sender<u64>) {
    let mut pause = Duration::from_millis(100);
    loop {
        match queue.subscribe(&channel).await {
            Ok(mut pubsub) => {
                pause = Duration::from_millis(100);
                ready.send_modify(|n| *n += 1);
                if *ready.borrow() > 1 {
                    tell_all(&inner, &channel);
                }
                let mut messages = pubsub.on_message();
                while let Some(msg) = messages.next().await {
                    let text: String = msg.get_payload().unwrap_or_default();
                    let Some((id, json)) = text.split_once('\n') else {
                        continue;
                    };
                    let Some(inner) = inner.upgrade() else { return };
                    let guard = inner.channels.lock().expect("waiters");
                    if let Some(senders) = guard.0.get(&channel).and_then(|c| c.watchers.get(id)) {
                        for (_, tx) in senders {
                            let _ = tx.send(Heard::Message(json.to_owned()));
                        }
                    }
                }
                tracing::debug!(channel, "waiters' subscription lost; reconnecting");
            }
            Err(e) => tracing::debug!(
                channel,
                "waiters cannot subscribe, retrying in {pause:?}: {e}"
            ),
        }
        if inner.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// Tell every watcher of `channel` to look again (the subscription is new).
fn tell_all(inner: &Weak<Inner>, channel: &str) {
    let Some(inner) = inner.upgrade() else { return };
    let guard = inner.channels.lock().expect("waiters");
    if let Some(c) = guard.0.get(channel) {
        for senders in c.watchers.values() {
            for (_, tx) in senders {
                let _ = tx.send(Heard::Resubscribed);
            }
        }
    }
}
