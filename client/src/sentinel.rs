//! Reaching the primary that Redis Sentinel names, and following it through
//! a failover without a restart.
//!
//! Discovery is the `redis` crate's ([`SentinelClient`]: ask the sentinels,
//! check that the node they name calls itself master). What is ours is when
//! to ask again: a command that fails because the connection broke, or
//! because the node it reached is no longer writable (`READONLY`: a demoted
//! primary), forgets the connection, and the next command asks the
//! sentinels. The failed command is not repeated here: callers decide, as
//! they do for any Redis error (the runner retries, a producer gets the
//! error).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, TlsMode,
    Value,
};

use super::QueueError;

/// How to find the primary: the sentinels and the name they know it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentinel {
    /// The master's name in the sentinels' configuration (`sentinel monitor NAME ...`).
    pub master: String,
    /// The sentinels, as `redis://[user:password@]host:port` (or `rediss://`):
    /// the first URL's credentials are used for every sentinel, and
    /// `rediss://` means TLS to the sentinels and to the primary.
    pub nodes: Vec<String>,
    /// The primary's ACL user, if not `default`.
    pub username: Option<String>,
    /// The primary's password.
    pub password: Option<String>,
    /// The database on the primary.
    pub db: i64,
}

/// A connection to the current primary, re-found after a failover; cheap to clone.
#[derive(Clone)]
pub(super) struct Follow {
    inner: Arc<Inner>,
}

struct Inner {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The connection in use and its generation (so a failure on an old
    /// connection does not forget a newer one).
    current: Mutex<Option<(u64, MultiplexedConnection)>>,
    generation: Mutex<u64>,
    config: AsyncConnectionConfig,
    db: i64,
}

impl Sentinel {
    /// The client that asks the sentinels, with credentials and TLS for both sides.
    fn client(
        &self,
        certificates: Option<redis::TlsCertificates>,
    ) -> Result<SentinelClient, QueueError> {
        let mut addrs = Vec::with_capacity(self.nodes.len());
        let mut sentinel_auth = (None, None);
        for (i, url) in self.nodes.iter().enumerate() {
            let info = url.as_str().into_connection_info()?;
            if i == 0 {
                let settings = info.redis_settings();
                sentinel_auth = (
                    settings.username().map(str::to_owned),
                    settings.password().map(str::to_owned),
                );
            }
            addrs.push(info.addr().clone());
        }
        if addrs.is_empty() {
            return Err(QueueError::Invalid(
                "sentinel: no sentinel nodes to ask".into(),
            ));
        }
        let tls = self.nodes.iter().any(|u| u.starts_with("rediss://"));
        let mut builder =
            SentinelClientBuilder::new(addrs, &self.master, SentinelServerType::Master)?
                .set_client_to_redis_db(self.db);
        if let Some(user) = &sentinel_auth.0 {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = &sentinel_auth.1 {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if let Some(user) = &self.username {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &self.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if tls {
            builder = builder
                .set_client_to_sentinel_tls_mode(TlsMode::Secure)
                .set_client_to_redis_tls_mode(TlsMode::Secure);
            if let Some(certs) = certificates {
                builder = builder
                    .set_client_to_sentinel_certificates(certs.clone())
                    .set_client_to_redis_certificates(certs);
            }
        }
        Ok(builder.build()?)
    }

    /// Connect to the primary the sentinels name now.
    pub(super) async fn follow(
        &self,
        certificates: Option<redis::TlsCertificates>,
        connection_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Follow, QueueError> {
        let follow = Follow {
            inner: Arc::new(Inner {
                sentinels: tokio::sync::Mutex::new(self.client(certificates)?),
                current: Mutex::new(None),
                generation: Mutex::new(0),
                config: AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connection_timeout))
                    .set_response_timeout(Some(response_timeout)),
                db: self.db,
            }),
        };
        follow.current().await?;
        Ok(follow)
    }

    /// The master's name and the sentinels, for messages (passwords hidden).
    pub(super) fn shown(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|u| super::redact(u)).collect();
        format!(
            "master {:?} via sentinels {}",
            self.master,
            nodes.join(", ")
        )
    }
}

impl Follow {
    /// The connection to use now: the last one, or a new one to the primary
    /// the sentinels name.
    async fn current(&self) -> Result<(u64, MultiplexedConnection), RedisError> {
        if let Some(c) = self.inner.current.lock().expect("not poisoned").clone() {
            return Ok(c);
        }
        let mut sentinels = self.inner.sentinels.lock().await;
        // another caller may have connected while this one waited for the sentinels
        if let Some(c) = self.inner.current.lock().expect("not poisoned").clone() {
            return Ok(c);
        }
        let client = sentinels.async_get_client().await?;
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.inner.config)
            .await?;
        let generation = {
            let mut g = self.inner.generation.lock().expect("not poisoned");
            *g += 1;
            *g
        };
        let addr = client.get_connection_info().addr().to_string();
        tracing::info!("redis primary (via sentinel): {addr}");
        *self.inner.current.lock().expect("not poisoned") = Some((generation, conn.clone()));
        Ok((generation, conn))
    }

    /// After `error` on connection `generation`: forget it if the error means
    /// the primary is gone or is one no more.
    fn judge(&self, generation: u64, error: &RedisError) {
        let stale = error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_timeout()
            || matches!(error.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"));
        if stale {
            let mut current = self.inner.current.lock().expect("not poisoned");
            if current.as_ref().is_some_and(|(g, _)| *g == generation) {
                tracing::warn!("redis primary lost ({error}); asking the sentinels again");
                *current = None;
            }
        }
    }

    /// A pub/sub connection to the current primary.
    pub(super) async fn pubsub(&self) -> Result<redis::aio::PubSub, RedisError> {
        let client = self.inner.sentinels.lock().await.async_get_client().await?;
        client.get_async_pubsub().await
    }
}

impl ConnectionLike for Follow {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut conn) = self.current().await?;
            let result = conn.req_packed_command(cmd).await;
            if let Err(e) = &result {
                self.judge(generation, e);
            }
            // a script's own error comes back as a value: READONLY can hide there too
            if let Ok(Value::ServerError(e)) = &result
                && e.code() == "READONLY"
            {
                self.judge(generation, &RedisError::from(e.clone()));
            }
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut conn) = self.current().await?;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            match &result {
                Err(e) => self.judge(generation, e),
                Ok(values) => {
                    for v in values {
                        if let Value::ServerError(e) = v
                            && e.code() == "READONLY"
                        {
                            self.judge(generation, &RedisError::from(e.clone()));
                        }
                    }
                }
            }
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.db
    }
}
