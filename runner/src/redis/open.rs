//! Opening the configured Redis: the server, a cluster or the embedded
//! server this process starts, with TLS files read from `[redis]`; patiently
//! (waiting while Redis is unreachable) for the runner, at once for the CLI.

use std::time::Duration;

use anyhow::Context;

use super::embedded::EmbeddedRedis;
use super::{Endpoint, Queue, QueueError, Tls};
use crate::config::{Config, RedisTarget};

/// Connect to the configured Redis, starting the embedded server if asked to.
pub async fn connect(config: &Config) -> anyhow::Result<(Queue, Option<EmbeddedRedis>)> {
    let (urls, cluster, embedded) = match &config.redis.target {
        RedisTarget::Url(url) => (vec![url.clone()], false, None),
        RedisTarget::Cluster(nodes) => (nodes.clone(), true, None),
        RedisTarget::Embedded { dir } => {
            let dir = dir.clone();
            let server = tokio::task::spawn_blocking(move || EmbeddedRedis::start(&dir)).await??;
            (vec![server.url().to_owned()], false, Some(server))
        }
    };
    let tls = match &config.redis.tls {
        None => None,
        Some(files) => {
            let read = |path: &Option<std::path::PathBuf>| {
                path.as_ref()
                    .map(|p| std::fs::read(p).with_context(|| format!("reading {}", p.display())))
                    .transpose()
            };
            Some(Tls {
                ca: read(&files.ca)?,
                client: read(&files.cert)?.zip(read(&files.key)?),
            })
        }
    };
    let endpoint = Endpoint { urls, cluster, tls };
    let shown = endpoint.shown();
    let queue = Queue::open(&endpoint, &config.redis.namespace)
        .await
        .with_context(|| format!("connecting to redis at {shown}"))?
        .with_max_payload(config.runner.max_payload);
    queue
        .ping()
        .await
        .with_context(|| format!("redis at {shown} does not answer"))?;
    Ok((queue, embedded))
}

/// Connect like [`connect`], but while Redis is unreachable keep trying (with
/// backoff, saying so once); only a misconfiguration (credentials, URL, TLS,
/// an embedded server that cannot start) fails.
pub async fn connect_patiently(config: &Config) -> anyhow::Result<(Queue, Option<EmbeddedRedis>)> {
    let mut pause = Duration::from_secs(1);
    let mut waiting_since = None;
    loop {
        match connect(config).await {
            Ok(connected) => {
                if let Some(since) = waiting_since {
                    let since: tokio::time::Instant = since;
                    tracing::info!(
                        "redis answers after {:.1}s; starting",
                        since.elapsed().as_secs_f64()
                    );
                }
                return Ok(connected);
            }
            Err(e) => {
                let retryable = e
                    .downcast_ref::<QueueError>()
                    .is_some_and(QueueError::is_retryable);
                if !retryable {
                    return Err(e);
                }
                if waiting_since.is_none() {
                    tracing::warn!(
                        "{e:#}; waiting for it (retrying with backoff up to 30s; nothing is lost, jobs wait in Redis)"
                    );
                    waiting_since = Some(tokio::time::Instant::now());
                } else {
                    tracing::debug!("{e:#}; retrying in {pause:?}");
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(30));
            }
        }
    }
}
