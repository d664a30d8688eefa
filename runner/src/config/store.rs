//! `[redis]`: where the jobs live (one server, a cluster, the primary Redis
//! Sentinel names, or an embedded server), TLS, and whether answers wait for
//! replicas (`durability`).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::place::{Invalid, expand_env};
use super::units::{NonZeroDur, Positive};

/// Where the jobs live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// A `redis://`, `rediss://` or `unix://` URL.
    Url(String),
    /// The seed nodes of a Redis Cluster.
    Cluster(Vec<String>),
    /// The primary these sentinels name, followed through failovers.
    Sentinel(SentinelTarget),
    /// The runner starts and owns a local redis-server with its data in this folder.
    Embedded {
        /// The folder holding the AOF files and the unix socket.
        dir: PathBuf,
    },
}

/// `[redis] sentinel = { master, nodes, username, password, db }`.
pub type SentinelTarget = hourglass_client::Sentinel;

/// `[redis] durability = { replicas = 1, timeout = "250ms" }`.
pub type Durability = hourglass_client::Durability;

/// The `[redis]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// The server to use.
    pub target: RedisTarget,
    /// Prefix of every key, so several deployments can share one server.
    pub namespace: String,
    /// Certificates for `rediss://`, when the system's are not the ones.
    pub tls: Option<TlsFiles>,
    /// Replicas that must confirm every state change before it is answered.
    pub durability: Option<Durability>,
}

/// PEM files for TLS connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA that signed the server's certificate.
    pub ca: Option<PathBuf>,
    /// This client's certificate, for servers that require one.
    pub cert: Option<PathBuf>,
    /// The key of `cert`.
    pub key: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRedis {
    pub url: Option<Spanned<String>>,
    pub cluster: Option<Spanned<Vec<Spanned<String>>>>,
    pub sentinel: Option<Spanned<RawSentinel>>,
    pub namespace: Option<String>,
    /// Where embedded Redis keeps its data (default `.hourglass/redis` beside the config).
    pub data_dir: Option<PathBuf>,
    pub tls_ca: Option<Spanned<PathBuf>>,
    pub tls_cert: Option<Spanned<PathBuf>>,
    pub tls_key: Option<Spanned<PathBuf>>,
    pub durability: Option<Spanned<RawDurability>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSentinel {
    pub master: Spanned<String>,
    pub nodes: Spanned<Vec<Spanned<String>>>,
    pub username: Option<String>,
    pub password: Option<Spanned<String>>,
    #[serde(default)]
    pub db: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDurability {
    pub replicas: Positive,
    pub timeout: Option<NonZeroDur>,
}

impl RawRedis {
    pub fn resolve(self, base: &Path) -> Result<RedisConfig, Invalid> {
        let namespace = self.namespace.unwrap_or_else(|| "hourglass".into());
        let chosen: Vec<(&str, Range<usize>)> = [
            self.url.as_ref().map(|u| ("url", u.span())),
            self.cluster.as_ref().map(|c| ("cluster", c.span())),
            self.sentinel.as_ref().map(|s| ("sentinel", s.span())),
        ]
        .into_iter()
        .flatten()
        .collect();
        if let [_, (second, span), ..] = chosen.as_slice() {
            return Err((
                span.clone(),
                format!(
                    "field `{second}`: set one of `url`, `cluster` and `sentinel`, not {}",
                    chosen
                        .iter()
                        .map(|(f, _)| format!("`{f}`"))
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            ));
        }
        let target = if let Some(nodes) = self.cluster {
            RedisTarget::Cluster(urls(nodes, "cluster")?)
        } else if let Some(sentinel) = self.sentinel {
            RedisTarget::Sentinel(sentinel.into_inner().resolve()?)
        } else {
            match self.url {
                None => RedisTarget::Url("redis://127.0.0.1:6379/0".into()),
                Some(url) if url.get_ref() == "embedded" => RedisTarget::Embedded {
                    dir: base.join(self.data_dir.unwrap_or_else(|| ".hourglass/redis".into())),
                },
                Some(url) => {
                    let span = url.span();
                    let url = expand_env(url.get_ref()).map_err(|m| (span.clone(), m))?;
                    RedisTarget::Url(check_url(&url, "url").map_err(|m| (span, m))?)
                }
            }
        };
        let durability = match self.durability {
            None => None,
            Some(d) => {
                if matches!(target, RedisTarget::Embedded { .. }) {
                    return Err((
                        d.span(),
                        "field `durability`: the embedded server has no replicas to wait for"
                            .into(),
                    ));
                }
                let d = d.into_inner();
                Some(Durability {
                    replicas: d.replicas.0,
                    timeout: d.timeout.map_or(Duration::from_millis(250), |t| t.0),
                })
            }
        };
        let tls = tls_files(
            base,
            self.tls_ca,
            self.tls_cert,
            self.tls_key,
            match &target {
                RedisTarget::Url(u) => u.starts_with("rediss://"),
                RedisTarget::Cluster(nodes) => nodes.iter().all(|u| u.starts_with("rediss://")),
                RedisTarget::Sentinel(s) => s.nodes.iter().all(|u| u.starts_with("rediss://")),
                RedisTarget::Embedded { .. } => false,
            },
        )?;
        Ok(RedisConfig {
            target,
            namespace,
            tls,
            durability,
        })
    }
}

impl RawSentinel {
    fn resolve(self) -> Result<SentinelTarget, Invalid> {
        let master = self.master.get_ref().trim();
        if master.is_empty() || master.contains(char::is_whitespace) {
            return Err((
                self.master.span(),
                format!(
                    "field `sentinel.master`: {:?} is not a master name (as in `sentinel monitor NAME host port quorum`)",
                    self.master.get_ref()
                ),
            ));
        }
        let password = match self.password {
            None => None,
            Some(p) => {
                let span = p.span();
                Some(
                    expand_env(p.get_ref())
                        .map_err(|m| (span, format!("field `sentinel.password`: {m}")))?,
                )
            }
        };
        Ok(SentinelTarget {
            master: master.to_owned(),
            nodes: urls(self.nodes, "sentinel.nodes")?,
            username: self.username,
            password,
            db: self.db,
        })
    }
}

/// A non-empty list of redis URLs, `${NAME}` expanded.
fn urls(nodes: Spanned<Vec<Spanned<String>>>, field: &str) -> Result<Vec<String>, Invalid> {
    let span = nodes.span();
    let nodes = nodes.into_inner();
    if nodes.is_empty() {
        return Err((span, format!("field `{field}`: name at least one node")));
    }
    let mut urls = Vec::with_capacity(nodes.len());
    for node in nodes {
        let span = node.span();
        let url = expand_env(node.get_ref()).map_err(|m| (span.clone(), m))?;
        urls.push(check_url(&url, field).map_err(|m| (span, m))?);
    }
    Ok(urls)
}

/// The `tls_*` files, each one checked to exist; only for `rediss://`.
fn tls_files(
    base: &Path,
    ca: Option<Spanned<PathBuf>>,
    cert: Option<Spanned<PathBuf>>,
    key: Option<Spanned<PathBuf>>,
    secure: bool,
) -> Result<Option<TlsFiles>, Invalid> {
    let file = |f: Option<Spanned<PathBuf>>, field: &str| -> Result<Option<PathBuf>, Invalid> {
        let Some(f) = f else { return Ok(None) };
        let path = base.join(f.get_ref());
        if !path.is_file() {
            return Err((
                f.span(),
                format!("field `{field}`: {} is not a file", path.display()),
            ));
        }
        Ok(Some(path))
    };
    let tls_span = ca
        .as_ref()
        .or(cert.as_ref())
        .or(key.as_ref())
        .map(Spanned::span);
    let (cert_span, key_span) = (
        cert.as_ref().map(Spanned::span),
        key.as_ref().map(Spanned::span),
    );
    let files = TlsFiles {
        ca: file(ca, "tls_ca")?,
        cert: file(cert, "tls_cert")?,
        key: file(key, "tls_key")?,
    };
    if let Some(span) = cert_span.xor(key_span) {
        return Err((
            span,
            "fields `tls_cert` and `tls_key`: a client certificate needs both".into(),
        ));
    }
    match tls_span {
        None => Ok(None),
        Some(span) if !secure => Err((
            span,
            "fields `tls_*`: TLS settings need rediss:// URLs".into(),
        )),
        Some(_) => Ok(Some(files)),
    }
}

fn check_url(url: &str, field: &str) -> Result<String, String> {
    let known = ["redis://", "rediss://", "unix://", "redis+unix://"];
    if known.iter().any(|scheme| url.starts_with(scheme)) {
        Ok(url.to_owned())
    } else {
        Err(format!(
            "field `{field}`: {:?} is not a redis://, rediss:// or unix:// URL{}",
            super::redact(url),
            if field == "url" {
                ", nor \"embedded\""
            } else {
                ""
            }
        ))
    }
}
