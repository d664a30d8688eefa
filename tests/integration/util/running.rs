//! An in-process runner (`Running`) and the event helpers tests read it with.

use hourglass::clock::now_ms;
use hourglass::events::{Event, EventKind};
use hourglass::redis::{Enqueued, NewJob, Queue};
use hourglass::{Config, Notice, Runner};
use std::time::Duration;
use tokio::sync::{broadcast, oneshot};

/// A runner serving in the background until [`Running::stop`] or drop.
pub struct Running {
    pub events: broadcast::Receiver<Event>,
    pub notices: broadcast::Receiver<Notice>,
    /// The handlers' outbound HTTP requests per (topic, status).
    pub outbound: std::sync::Arc<hourglass::wasm::OutboundCounts>,
    /// Handler instances alive.
    pub instances: hourglass::wasm::InUse,
    /// Where the API, dashboard and metrics answer, if queues.toml has `[http]`
    /// (`listen = "127.0.0.1:0"` takes a free port).
    pub http: Option<std::net::SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    _http_stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    pub async fn start(config: Config) -> Running {
        init_logs();
        let config_http = config.http.as_ref().map(|h| h.listen);
        let runner = Runner::start(config).await.expect("runner starts");
        let events = runner.subscribe();
        let notices = runner.subscribe_reloads();
        let outbound = runner.outbound_counts();
        let instances = runner.instances_in_use();
        let (stop, stopped) = oneshot::channel::<()>();
        // the server stops when its sender drops (with the Running)
        let (http, http_stop) = match config_http {
            Some(addr) => {
                let listener = hourglass::http::bind(addr).await.unwrap();
                let addr = listener.local_addr().unwrap();
                let (stop, stopped) = oneshot::channel::<()>();
                tokio::spawn(hourglass::http::serve(listener, runner.ops(), async {
                    let _ = stopped.await;
                }));
                (Some(addr), Some(stop))
            }
            None => (None, None),
        };
        let task = tokio::spawn(runner.run(async {
            let _ = stopped.await;
        }));
        Running {
            events,
            notices,
            outbound,
            instances,
            http,
            _http_stop: http_stop,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Shut down gracefully and wait for it.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap().unwrap();
    }

    /// Collect events until `done` says the collection is complete.
    pub async fn until(
        &mut self,
        within: Duration,
        mut done: impl FnMut(&[Event]) -> bool,
    ) -> Vec<Event> {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + within;
        while !done(&seen) {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Ok(event)) => seen.push(event),
                Ok(Err(broadcast::error::RecvError::Lagged(n))) => {
                    panic!("test fell {n} events behind")
                }
                Ok(Err(e)) => panic!("event stream ended: {e}"),
                Err(_) => panic!("timed out after {within:?}; events so far: {seen:#?}"),
            }
        }
        seen
    }

    /// Wait for the first reload notice that `wanted` accepts; the runner
    /// serves what it reports by then.
    pub async fn notice(&mut self, within: Duration, wanted: impl Fn(&Notice) -> bool) -> Notice {
        let deadline = tokio::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, self.notices.recv()).await {
                Ok(Ok(n)) if wanted(&n) => return n,
                Ok(Ok(n)) => seen.push(n),
                Ok(Err(e)) => panic!("notice stream: {e}"),
                Err(_) => panic!("no such notice within {within:?}; saw {seen:#?}"),
            }
        }
    }

    /// Wait until each (topic, id) of `jobs` has acked or been dead-lettered.
    pub async fn until_all_settled(
        &mut self,
        jobs: &[(&str, &str)],
        within: Duration,
    ) -> Vec<Event> {
        self.until(within, |seen| {
            jobs.iter().all(|(t, id)| {
                seen.iter()
                    .any(|e| e.topic == *t && e.id == *id && is_final(&e.kind))
            })
        })
        .await
    }

    /// Wait until `topics` have nothing scheduled, ready or running in Redis,
    /// then take every event sent until then: with these, a late duplicate
    /// run cannot be missed.
    pub async fn after_drained(
        &mut self,
        queue: &Queue,
        topics: &[&str],
        within: Duration,
    ) -> Vec<Event> {
        let deadline = tokio::time::Instant::now() + within;
        for topic in topics {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            eventually(left, &format!("{topic} drained"), || async {
                match queue.stats(&queue.keys(topic), now_ms()).await.unwrap() {
                    s if s.ready + s.scheduled + s.running == 0 => Ok(()),
                    s => Err(format!("{s:?}")),
                }
            })
            .await;
        }
        // Redis has every attempt's end; its event follows the commit at once
        let mut events = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            events.push(event);
        }
        while let Some(open) = unfinished(&events) {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Ok(event)) => events.push(event),
                Ok(Err(e)) => panic!("event stream: {e}"),
                Err(_) => panic!("{open} started and never ended; events: {events:#?}"),
            }
        }
        events
    }

    /// Events until `id` in `topic` is acked or dead.
    pub async fn until_settled(&mut self, topic: &str, id: &str, within: Duration) -> Vec<Event> {
        self.until(within, |seen| {
            seen.iter()
                .any(|e| e.topic == topic && e.id == id && is_final(&e.kind))
        })
        .await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A job with an attempt started and not yet ended in `events`, if any.
fn unfinished(events: &[Event]) -> Option<String> {
    let mut open = std::collections::HashMap::<(&str, &str), i64>::new();
    for e in events {
        let delta = match e.kind {
            EventKind::Started { .. } => 1,
            // the attempt's end comes after it, as the state change
            EventKind::Ran { .. } => 0,
            _ => -1,
        };
        *open.entry((&e.topic, &e.id)).or_default() += delta;
    }
    open.into_iter()
        .find(|(_, n)| *n > 0)
        .map(|((topic, id), _)| format!("{topic}/{id}"))
}

pub fn is_final(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Acked | EventKind::Dead { .. })
}

/// Enqueue one job due `delay_ms` from now; its id.
pub async fn enqueue(
    queue: &Queue,
    topic: &str,
    payload: &str,
    delay_ms: u64,
    max_attempts: u32,
) -> String {
    let now = now_ms();
    let job = NewJob {
        id: None,
        payload: payload.as_bytes().to_vec(),
        due_at_ms: now + delay_ms,
        max_attempts,
        ..Default::default()
    };
    match &queue
        .enqueue(&queue.keys(topic), &[job], now)
        .await
        .unwrap()[..]
    {
        [Enqueued::New(id)] => id.clone(),
        other => panic!("unexpected enqueue answer {other:?}"),
    }
}

/// The last thing that happened to a job: `Ok(())` acked, `Err(reason)` dead.
pub fn settled(events: &[Event], topic: &str, id: &str) -> Result<(), String> {
    match of(events, topic, id).last() {
        Some(EventKind::Acked) => Ok(()),
        Some(EventKind::Dead { reason }) => Err(reason.clone()),
        other => panic!("{topic}/{id} did not settle: {other:?}"),
    }
}

/// The reasons of a job's retries, in order.
pub fn retry_reasons(events: &[Event], topic: &str, id: &str) -> Vec<String> {
    of(events, topic, id)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::Retried { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

/// The events of one job, in order.
pub fn of<'a>(events: &'a [Event], topic: &str, id: &str) -> Vec<&'a EventKind> {
    events
        .iter()
        .filter(|e| e.topic == topic && e.id == id)
        .map(|e| &e.kind)
        .collect()
}

/// How many attempts of `topic`/`id` started.
pub fn starts(events: &[Event], topic: &str, id: &str) -> usize {
    of(events, topic, id)
        .iter()
        .filter(|k| matches!(k, EventKind::Started { .. }))
        .count()
}

pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "info,wasmtime=warn,cranelift=warn",
        ))
        .with_test_writer()
        .try_init();
}

/// Enqueue `n` jobs due at `due` to each topic, ids `<topic><i>`, in one call per topic.
pub async fn backlog(queue: &Queue, topics: &[&str], n: usize, due: u64) {
    for topic in topics {
        let jobs: Vec<NewJob> = (0..n)
            .map(|i| NewJob {
                id: Some(format!("{topic}{i}")),
                payload: b"{}".to_vec(),
                due_at_ms: due,
                max_attempts: 0,
                ..Default::default()
            })
            .collect();
        queue
            .enqueue(&queue.keys(topic), &jobs, now_ms())
            .await
            .unwrap();
    }
}

/// The topic of every attempt started, in order.
pub fn start_order(events: &[Event]) -> Vec<&str> {
    events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Started { .. }))
        .map(|e| e.topic.as_str())
        .collect()
}

/// Poll `check` every 20 ms until it answers `Ok`, for at most `within`;
/// past that, fail naming `what` and the last `Err` it gave (what it saw).
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not within {within:?}; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
