//! The operators' window at `[http] listen`: the JSON API under `/api/`, the
//! dashboard at `/`, Prometheus `/metrics`, `/healthz` and `/readyz`.
//!
//! Served by a runner (`hourglass run`) or without claiming jobs
//! (`hourglass serve`). Every route is one function: reads in `api.rs`,
//! changes in `change.rs` (jobs, pause) and `dead.rs` (dead letters), a
//! topic's handler versions and rollout (reads and changes) in `rollout.rs`,
//! moving journaled jobs to another version in `upgrade.rs`,
//! jobs' results, events and waits in `wait.rs`, what autoscalers read
//! in `scale.rs`, the `[[schedule]]`s with their next fire times in
//! `schedules.rs`,
//! the metrics scrape in `scrape.rs`, the embedded page in `dashboard.rs`.
//! Authentication (`auth`) runs before all of them.

mod answers;
mod api;
mod browse;
mod change;
mod dashboard;
mod dead;
mod error;
mod exposition;
mod flows;
mod job_in;
mod keys;
mod openapi;
mod rollout;
mod scale;
mod schedules;
mod scrape;
mod signal;
mod story;
mod stream;
mod upgrade;
mod views;
mod wait;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::watch;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::config::{Config, TopicConfig};
use crate::metrics::Metrics;
use crate::redis::{Queue, Waiters};
use crate::reload::{ReloadRecord, Serving};
use crate::wasm::OutboundCounts;
pub use error::ApiError;

/// The largest request body: a bulk enqueue of thousands of jobs.
const MAX_BODY: usize = 64 << 20;

/// Who the API's changes are by, as Redis records them (a rollout's verdict
/// or pin) and as the log says.
const WHO: &str = "api";

/// What the HTTP server needs of the process serving it.
#[derive(Clone)]
pub struct Ops {
    pub(crate) queue: Queue,
    pub(crate) serving: watch::Receiver<Arc<Serving>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) outbound: Option<Arc<OutboundCounts>>,
    pub(crate) reloads: Option<Arc<dyn Fn() -> Vec<ReloadRecord> + Send + Sync>>,
    /// Everyone waiting on a job through this server.
    pub(crate) waiters: Waiters,
    /// Where the API's enqueue spans go (or not).
    pub(crate) telemetry: Arc<crate::telemetry::Telemetry>,
    /// Upgrades of journaled jobs (a runner's; `hourglass serve` has none).
    pub(crate) upgrades: Option<Arc<crate::upgrade::Service>>,
}

impl Ops {
    /// Serve `config` without running jobs (`hourglass serve`), exporting
    /// the API's spans as its `[telemetry]` says.
    pub fn without_jobs(queue: Queue, config: Config) -> anyhow::Result<Ops> {
        let metrics = Arc::new(Metrics::new());
        let telemetry = match &config.telemetry {
            Some(cfg) => crate::telemetry::Telemetry::start(cfg, metrics.spans_dropped.clone())?,
            None => crate::telemetry::Telemetry::off(),
        };
        Ok(Ops {
            waiters: Waiters::new(queue.clone()),
            queue,
            serving: watch::channel(Arc::new(Serving::without_jobs(config))).1,
            metrics,
            outbound: None,
            reloads: None,
            telemetry,
            upgrades: None,
        })
    }

    /// What is served now.
    fn serving(&self) -> Arc<Serving> {
        self.serving.borrow().clone()
    }
}

/// The state every route shares.
struct App {
    ops: Ops,
    scrape: scrape::Cache,
    /// The console's overview, read once for every stream.
    stream: stream::Overview,
}

type AppState = State<Arc<App>>;

/// The router: every route, behind authentication.
fn router(ops: Ops) -> Router {
    let app = Arc::new(App {
        ops,
        scrape: scrape::Cache::default(),
        stream: stream::Overview::default(),
    });
    let (api, description) = api();
    let mut description = description
        .to_pretty_json()
        .expect("the description serializes");
    description.push('\n');
    let api = api
        .route(
            "/openapi.json",
            get(move || async move { ([(header::CONTENT_TYPE, "application/json")], description) }),
        )
        .fallback(api::not_found);
    Router::new()
        .nest("/api", api)
        .route("/metrics", get(scrape::metrics))
        .route("/healthz", get(api::healthz))
        .route("/readyz", get(api::readyz))
        .merge(dashboard::routes())
        .layer(middleware::from_fn_with_state(app.clone(), auth))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(app)
}

/// The API's routes under `/api` and their OpenAPI description: one
/// registration per route makes both (`openapi.rs`).
fn api() -> (Router<Arc<App>>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(api::topics))
        .routes(routes!(api::topic))
        .routes(routes!(change::enqueue, browse::list))
        .routes(routes!(browse::bulk))
        .routes(routes!(story::logs))
        .routes(routes!(api::job, change::cancel))
        .routes(routes!(wait::result))
        .routes(routes!(wait::events))
        .routes(routes!(signal::signal))
        .routes(routes!(signal::wake))
        .routes(routes!(upgrade::upgrade))
        .routes(routes!(api::dead, dead::purge_all))
        .routes(routes!(dead::retry_all))
        .routes(routes!(dead::purge))
        .routes(routes!(dead::retry))
        .routes(routes!(change::pause))
        .routes(routes!(change::resume))
        .routes(routes!(keys::list))
        .routes(routes!(keys::pause))
        .routes(routes!(keys::resume))
        .routes(routes!(keys::weight))
        .routes(routes!(rollout::versions))
        .routes(routes!(rollout::rollout))
        .routes(routes!(rollout::promote))
        .routes(routes!(rollout::abort))
        .routes(routes!(rollout::pin, rollout::unpin))
        .routes(routes!(flows::create, story::flows))
        .routes(routes!(flows::show))
        .routes(routes!(flows::cancel))
        .routes(routes!(flows::add))
        .routes(routes!(flows::seal))
        .routes(routes!(api::stats))
        .routes(routes!(api::runners))
        .routes(routes!(api::usage))
        .routes(routes!(story::history))
        .routes(routes!(stream::stream))
        .routes(routes!(api::reloads))
        .routes(routes!(scale::all))
        .routes(routes!(scale::topic))
        .routes(routes!(schedules::list))
        .split_for_parts()
}

/// The API's OpenAPI description as `/api/openapi.json` serves it (and
/// `docs/openapi.json` holds it), pretty-printed.
pub fn openapi_json() -> String {
    let mut text = api()
        .1
        .to_pretty_json()
        .expect("the description serializes");
    text.push('\n');
    text
}

/// Connections the kernel holds for the API before it accepts them. Producers
/// that wait for their jobs open a connection each and may all arrive at once
/// (2,000 waiters in one burst overflowed tokio's default of 1,024: the
/// overflow came back as connection resets). Linux caps it at
/// `net.core.somaxconn` (4,096 by default).
const BACKLOG: u32 = 4_096;

/// Bind `[http] listen`; fails at once if the address is taken.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    let listen = || {
        let socket = match addr {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        // as std's and tokio's own bind: a restart may reuse a port whose
        // last connections linger in TIME_WAIT
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(BACKLOG)
    };
    listen().map_err(|e: std::io::Error| {
        anyhow::anyhow!("[http] listen = \"{addr}\": cannot listen: {e}")
    })
}

/// Serve on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    ops: Ops,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!("dashboard and API on http://{addr}/ (metrics at /metrics)");
    axum::serve(listener, router(ops))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

/// Paths anyone may read: the page itself holds no data, and orchestrators
/// probe health without a token.
fn is_open(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/api/openapi.json") || dashboard::is_asset(path)
}

/// Bearer-token check: every change needs the operator's token; reads too
/// unless `public_read`; the read-only token (`read_token`) reads and is
/// refused any change (403); a wrong token is refused wherever it is given.
/// No token configured (loopback only) means open.
async fn auth(State(app): AppState, request: Request, next: Next) -> Response {
    let serving = app.ops.serving();
    let Some(http) = &serving.config.http else {
        return next.run(request).await;
    };
    let Some(token) = &http.token else {
        return next.run(request).await;
    };
    let read = matches!(*request.method(), Method::GET | Method::HEAD);
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.strip_prefix("Bearer ").unwrap_or(""));
    // hashed first: the comparison takes the same time whatever the length
    let same = |given: &str, token: &crate::config::Token| -> bool {
        Sha256::digest(given.as_bytes())
            .ct_eq(&Sha256::digest(token.expose()))
            .into()
    };
    let open = is_open(request.uri().path());
    match given {
        Some(given) if same(given, token) => next.run(request).await,
        Some(given) if http.read_token.as_ref().is_some_and(|r| same(given, r)) => {
            if read || open {
                next.run(request).await
            } else {
                ApiError::new(
                    StatusCode::FORBIDDEN,
                    "the read-only token ([http] read_token) may not change anything: this needs [http] token",
                )
                .into_response()
            }
        }
        // a token given is checked even where none is needed: a wrong one is
        // a mistake worth telling
        Some(_) if !open => ApiError::new(StatusCode::UNAUTHORIZED, "wrong token").into_response(),
        _ if open || (read && http.public_read) => next.run(request).await,
        _ => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this server needs `Authorization: Bearer <token>` ([http] token, or read_token to read, in queues.toml)",
        )
        .into_response(),
    }
}

/// Every topic's counts as of now, with the live runners: what the topic
/// list, the stats route and the metrics scrape all read.
struct Overview {
    serving: Arc<Serving>,
    runners: Vec<crate::redis::RunnerInfo>,
    /// (topic, counts) for the configured topics, or (a file without topics)
    /// those the live runners serve.
    topics: Vec<(String, crate::redis::TopicStats)>,
}

impl Ops {
    /// Read the overview: one call for the runners, one pipeline per topic
    /// (O(1) commands), all at once.
    async fn overview(&self) -> Result<Overview, crate::redis::QueueError> {
        let serving = self.serving();
        let q = &self.queue;
        let now = crate::clock::now_ms();
        let runners = q.runners().list(now).await?;
        let names = topic_names(&serving, &runners);
        let keys: Vec<_> = names.iter().map(|n| q.keys(n)).collect();
        let stats = futures::future::try_join_all(keys.iter().map(|k| q.stats(k, now))).await?;
        Ok(Overview {
            serving,
            runners,
            topics: names.into_iter().zip(stats).collect(),
        })
    }
}

/// The configured topics, or (a file without topics) those the live runners serve.
fn topic_names(serving: &Serving, runners: &[crate::redis::RunnerInfo]) -> Vec<String> {
    let mut names: Vec<String> = serving
        .config
        .topics
        .iter()
        .map(|t| t.name.clone())
        .collect();
    if names.is_empty() {
        names = runners
            .iter()
            .flat_map(|r| r.topics.iter().cloned())
            .collect();
        names.sort();
        names.dedup();
    }
    names
}

/// The topic a path names: one of the configuration's, or (a file with no
/// topics, `hourglass serve` for producers) any valid name.
fn topic_named(serving: &Serving, name: &str) -> Result<Option<TopicConfig>, ApiError> {
    if serving.config.topics.is_empty() {
        crate::config::check_topic_name(name)
            .map_err(|why| ApiError::field(StatusCode::BAD_REQUEST, "topic", why))?;
        return Ok(None);
    }
    match serving.config.topic(name) {
        Some(t) => Ok(Some(t.clone())),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no topic {name:?} in queues.toml"),
        )),
    }
}
