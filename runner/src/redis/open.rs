//! Opening the configured Redis: the server, a cluster or the embedded
//! server this process starts, with TLS files read from `[redis]`; patiently
//! (waiting while Redis is unreachable) for the runner, at once for the CLI.

use std::time::Duration;

use anyhow::Context;

use super::embedded::EmbeddedRedis;
use super::layout::{self, LAYOUT, Layout};
use super::{Endpoint, Queue, QueueError, Servers, Tls};
use crate::config::{Config, RedisTarget};

/// Connect to the configured Redis, starting the embedded server if asked
/// to, and check that its layout is this build's (stamping a new namespace).
pub async fn connect(config: &Config) -> anyhow::Result<(Queue, Option<EmbeddedRedis>)> {
    let (queue, embedded) = connect_any_layout(config).await?;
    check_layout(&queue, config).await?;
    Ok((queue, embedded))
}

/// A layout this build does not serve: `older` ones `hourglass migrate`
/// upgrades; newer ones need a newer build.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct LayoutMismatch {
    /// The namespace's layout is older than this build's.
    pub older: bool,
    message: String,
}

/// Serve only this build's layout; stamp a new namespace (and its topics).
pub async fn check_layout(queue: &Queue, config: &Config) -> anyhow::Result<()> {
    let topics: Vec<&str> = config.topics.iter().map(|t| t.name.as_str()).collect();
    let namespace = &config.redis.namespace;
    match queue.layout().read(&topics).await? {
        Layout::New => queue.layout().stamp(&topics).await?,
        // stamped: topic stamps only tell data apart while the namespace has none
        Layout::Version(v) if v == LAYOUT => {}
        Layout::Version(v) if v > LAYOUT => {
            return Err(LayoutMismatch {
                older: false,
                message: layout::newer_message(namespace, v),
            }
            .into());
        }
        found => {
            return Err(LayoutMismatch {
                older: true,
                message: layout::older_message(namespace, found.number()),
            }
            .into());
        }
    }
    Ok(())
}

/// Connect to the configured Redis, whatever layout its namespace has
/// (`hourglass migrate`).
pub async fn connect_any_layout(config: &Config) -> anyhow::Result<(Queue, Option<EmbeddedRedis>)> {
    let (servers, embedded) = match &config.redis.target {
        RedisTarget::Url(url) => (Servers::One(url.clone()), None),
        RedisTarget::Cluster(nodes) => (Servers::Cluster(nodes.clone()), None),
        RedisTarget::Sentinel(sentinel) => (Servers::Sentinel(sentinel.clone()), None),
        RedisTarget::Embedded { dir } => {
            let dir = dir.clone();
            let server = tokio::task::spawn_blocking(move || EmbeddedRedis::start(&dir)).await??;
            (Servers::One(server.url().to_owned()), Some(server))
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
    let endpoint = Endpoint { servers, tls };
    let shown = endpoint.shown();
    let queue = Queue::open(&endpoint, &config.redis.namespace)
        .await
        .with_context(|| format!("connecting to redis at {shown}"))?
        .with_max_payload(config.runner.max_payload)
        .with_durability(config.redis.durability);
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
        match connect_any_layout(config).await {
            Ok(connected) => {
                if let Some(since) = waiting_since {
                    let since: tokio::time::Instant = since;
                    tracing::info!(
                        "redis answers after {:.1}s; starting",
                        since.elapsed().as_secs_f64()
                    );
                }
                until_layout_served(&connected.0, config).await?;
                warn_if_evicting(&connected.0).await;
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

/// Wait while the namespace has an older layout (a rolling upgrade: the
/// runners of the old layout keep serving until `hourglass migrate` has
/// run), saying why once; refuse a newer one.
async fn until_layout_served(queue: &Queue, config: &Config) -> anyhow::Result<()> {
    let mut said = false;
    loop {
        match check_layout(queue, config).await {
            Ok(()) => {
                if said {
                    tracing::info!("the namespace is at layout {LAYOUT} now; starting");
                }
                return Ok(());
            }
            Err(e) => match e.downcast_ref::<LayoutMismatch>() {
                Some(m) if m.older => {
                    if !said {
                        tracing::warn!("{e}; waiting for it (checking every 2s)");
                        said = true;
                    }
                }
                Some(_) => return Err(e),
                None => tracing::debug!("checking the layout: {e:#}; retrying"),
            },
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Say so at start when Redis may evict keys: jobs would vanish without a trace.
async fn warn_if_evicting(queue: &Queue) {
    match queue.admin().eviction_policy().await {
        Ok(Some(policy)) if policy != "noeviction" => tracing::warn!(
            "redis maxmemory-policy is {policy}: under memory pressure Redis deletes keys, and jobs with them; set `maxmemory-policy noeviction` (writes are then refused when memory is full, and retried)"
        ),
        Ok(_) => {}
        // INFO may be renamed or denied (a managed Redis): nothing to say
        Err(e) => tracing::debug!("cannot read maxmemory-policy: {e}"),
    }
}
