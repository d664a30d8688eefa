//! Reaching Redis: one server or a cluster, plain or TLS, with or without
//! AUTH (user and password in the URL). Scripts and pipelines run through
//! [`Conn`], which hides which of the two it is; wake-ups arrive on a plain
//! pub/sub connection to one node (on a cluster, PUBLISH reaches every node).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::QueueError;

/// Where the pipeline lives and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The server's URL, or a cluster's seed nodes.
    pub urls: Vec<String>,
    /// Whether `urls` are the seeds of a Redis Cluster.
    pub cluster: bool,
    /// Certificates for `rediss://`, if not the system's.
    pub tls: Option<Tls>,
}

/// PEM certificates for TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// The CA to trust instead of the system's.
    pub ca: Option<Vec<u8>>,
    /// A client certificate and its key, for servers that require one.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Endpoint {
    /// One plain server.
    pub fn url(url: &str) -> Endpoint {
        Endpoint {
            urls: vec![url.to_owned()],
            cluster: false,
            tls: None,
        }
    }

    fn certificates(&self) -> Option<redis::TlsCertificates> {
        self.tls.as_ref().map(|tls| redis::TlsCertificates {
            client_tls: tls
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: tls.ca.clone(),
        })
    }

    /// A client for one node (the server, or one seed of a cluster).
    pub(super) fn client(&self, url: &str) -> Result<redis::Client, QueueError> {
        Ok(match self.certificates() {
            Some(certs) => redis::Client::build_with_tls(url, certs)?,
            None => redis::Client::open(url)?,
        })
    }

    /// Connect; reconnects by itself afterwards.
    pub(super) async fn connect(&self) -> Result<Conn, QueueError> {
        install_crypto_provider();
        if self.cluster {
            let mut builder = redis::cluster::ClusterClientBuilder::new(self.urls.clone())
                .connection_timeout(Duration::from_secs(5))
                .response_timeout(Duration::from_secs(10))
                .overall_response_timeout(Some(Duration::from_secs(20)))
                .retries(3)
                .min_retry_wait(100)
                .max_retry_wait(2000);
            if let Some(certs) = self.certificates() {
                builder = builder.certs(certs);
            }
            let client = builder.build()?;
            Ok(Conn::Cluster(client.get_async_connection().await?))
        } else {
            let url = self
                .urls
                .first()
                .ok_or_else(|| QueueError::Invalid("no redis URL to connect to".into()))?;
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(5)))
                .set_response_timeout(Some(Duration::from_secs(10)))
                .set_max_delay(Duration::from_secs(2))
                .set_number_of_retries(3);
            let manager = self
                .client(url)?
                .get_connection_manager_with_config(config)
                .await?;
            Ok(Conn::Single(manager))
        }
    }

    /// The URLs with any password replaced, for messages.
    pub fn shown(&self) -> String {
        self.urls
            .iter()
            .map(|u| redact(u))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// rustls needs a process-wide crypto provider: ring (aws-lc needs cmake).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A connection to one server or to a cluster; cheap to clone.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// `redis://user:secret@host` → `redis://user:***@host`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod redact_tests {
    use super::redact;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(
            redact("rediss://alice:s3@cr%40t@h/"),
            "rediss://alice:***@h/"
        );
        assert_eq!(redact("redis://h:6379/0"), "redis://h:6379/0");
        assert_eq!(redact("unix:///tmp/r.sock"), "unix:///tmp/r.sock");
    }
}
