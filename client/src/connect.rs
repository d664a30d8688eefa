//! Reaching Redis: one server, a cluster, or the primary Redis Sentinel
//! names, plain or TLS, with or without AUTH (user and password in the URL).
//! Scripts and pipelines run through [`Conn`], which hides which of the three
//! it is; wake-ups arrive on a plain pub/sub connection to one node (on a
//! cluster, PUBLISH reaches every node; with Sentinel, the primary).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::QueueError;
use super::redact::redact;
use super::sentinel::{Follow, Sentinel};

/// Where the pipeline lives and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The server, the cluster or the sentinels.
    pub servers: Servers,
    /// Certificates for `rediss://`, if not the system's.
    pub tls: Option<Tls>,
}

/// What kind of Redis deployment holds the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Servers {
    /// One server at this URL.
    One(String),
    /// A Redis Cluster with these seed nodes.
    Cluster(Vec<String>),
    /// The primary these sentinels name, followed through failovers.
    Sentinel(Sentinel),
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
            servers: Servers::One(url.to_owned()),
            tls: None,
        }
    }

    /// A Redis Cluster with these seed nodes.
    pub fn cluster(urls: Vec<String>) -> Endpoint {
        Endpoint {
            servers: Servers::Cluster(urls),
            tls: None,
        }
    }

    /// The primary `sentinel` names.
    pub fn sentinel(sentinel: Sentinel) -> Endpoint {
        Endpoint {
            servers: Servers::Sentinel(sentinel),
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
        match &self.servers {
            Servers::Cluster(urls) => {
                let mut builder = redis::cluster::ClusterClientBuilder::new(urls.clone())
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .overall_response_timeout(Some(Duration::from_secs(20)))
                    .retries(3)
                    .min_retry_wait(100)
                    .max_retry_wait(2000);
                if let Some(certs) = self.certificates() {
                    builder = builder.certs(certs);
                }
                let client = builder.build()?;
                Ok(Conn::Cluster(client.get_async_connection().await?))
            }
            Servers::One(url) => {
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_max_delay(Duration::from_secs(2))
                    .set_number_of_retries(3);
                let manager = self
                    .client(url)?
                    .get_connection_manager_with_config(config)
                    .await?;
                Ok(Conn::Single(manager))
            }
            Servers::Sentinel(sentinel) => Ok(Conn::Sentinel(
                sentinel
                    .follow(self.certificates(), CONNECT_TIMEOUT, RESPONSE_TIMEOUT)
                    .await?,
            )),
        }
    }

    /// A dedicated pub/sub connection: to the server, to the first cluster
    /// node that answers (PUBLISH reaches every node), or to the primary.
    pub(super) async fn pubsub(&self, conn: &Conn) -> Result<redis::aio::PubSub, QueueError> {
        let urls = match (&self.servers, conn) {
            (_, Conn::Sentinel(follow)) => return Ok(follow.pubsub().await?),
            (Servers::One(url), _) => std::slice::from_ref(url),
            (Servers::Cluster(urls), _) => urls.as_slice(),
            (Servers::Sentinel(_), _) => unreachable!("a sentinel endpoint connects with Follow"),
        };
        let mut last = None;
        for url in urls {
            match self.client(url)?.get_async_pubsub().await {
                Ok(pubsub) => return Ok(pubsub),
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or_else(
            || QueueError::Invalid("no redis URL to subscribe to".into()),
            QueueError::from,
        ))
    }

    /// The URLs given: the server's, the cluster's seeds or the sentinels'.
    pub fn urls(&self) -> &[String] {
        match &self.servers {
            Servers::One(url) => std::slice::from_ref(url),
            Servers::Cluster(urls) => urls,
            Servers::Sentinel(sentinel) => &sentinel.nodes,
        }
    }

    /// The URLs with any password replaced, for messages.
    pub fn shown(&self) -> String {
        match &self.servers {
            Servers::One(url) => redact(url),
            Servers::Cluster(urls) => urls
                .iter()
                .map(|u| redact(u))
                .collect::<Vec<_>>()
                .join(", "),
            Servers::Sentinel(sentinel) => sentinel.shown(),
        }
    }
}

impl Servers {
    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Servers::Cluster(_))
    }
}

/// How long to wait for a connection to a node.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for any answer.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// rustls needs a process-wide crypto provider: ring (aws-lc needs cmake).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A connection to one server or to a cluster; cheap to clone.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Follow),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(c) => c.req_packed_command(cmd),
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
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(c) => c.get_db(),
        }
    }
}
