//! Outbound HTTP for guests (`wasi:http/outgoing-handler`), behind the
//! topic's grants.
//!
//! Every request a guest sends comes through [`Outbound::send_request`]:
//! - a target no grant opens is refused before anything leaves the process
//!   (the guest gets `HTTP-request-denied`, the log says so once per
//!   authority and attempt);
//! - the SSRF rule: a name is resolved here and the connection goes to the
//!   address that was checked; a name opened only by a wildcard grant may
//!   not resolve to a loopback, private, link-local or otherwise non-public
//!   address unless that address is granted itself; an exact grant (name or
//!   IP literal) opens whatever it resolves to;
//! - limits: connect and first-byte timeouts, both cut to the attempt's
//!   remaining time; a cap on the response body; a cap on requests open at
//!   once per attempt. Redirects are never followed (the guest sees the 3xx);
//! - TLS with the system's trust roots plus the topic's `http.tls_ca`.
//!
//! Each request's method, authority, status and time are logged at debug
//! level and counted per topic and status in [`OutboundCounts`]. When spans
//! are exported, each request that leaves is a client span under the
//! attempt's, and carries its `traceparent` and the received `tracestate`
//! unless the guest set a `traceparent` (with export off, the producer's
//! context passes through unchanged).
//!
//! In a replay check (`check.rs`) nothing is sent: a request the effects
//! journal does not answer ends the check where it would have left.

mod dial;
mod journaled;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::future::Either;
use http_body_util::BodyExt;
use tokio::sync::Semaphore;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::context::JobContext;
use super::journal::Effects;
use super::ledger::{Arrival, End};
use super::usage::Traffic;
use crate::config::{Access, Grants, HttpLimits, RemoteHost, Target};
use crate::telemetry::{Ended, spans};
pub use dial::is_public;
use dial::{client_config, send};

/// How far past the attempt's deadline a request's own timeouts may reach.
const DEADLINE_MARGIN: Duration = Duration::from_millis(250);

/// What a topic's attempts may reach over HTTP and how: built once per
/// topic version, shared by its attempts.
pub struct HttpPolicy {
    grants: Arc<Grants>,
    limits: HttpLimits,
    /// Built on the first HTTPS request: system roots plus `tls_ca`.
    tls: OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
}

impl HttpPolicy {
    /// The policy of a topic with these grants and limits.
    pub fn new(grants: Arc<Grants>, limits: HttpLimits) -> HttpPolicy {
        HttpPolicy {
            grants,
            limits,
            tls: OnceLock::new(),
        }
    }

    fn tls(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        self.tls
            .get_or_init(|| client_config(self.limits.tls_ca.as_deref()))
            .clone()
    }
}

impl Default for HttpPolicy {
    /// Nothing granted, the default limits.
    fn default() -> Self {
        HttpPolicy::new(Arc::default(), HttpLimits::default())
    }
}

impl std::fmt::Debug for HttpPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpPolicy")
            .field("grants", &self.grants.http)
            .field("limits", &self.limits)
            .finish()
    }
}

/// Outbound requests so far, per (topic, status): the HTTP status code, or
/// `denied` (refused by the grants) or `error` (no response: connection,
/// TLS, timeout, limit).
#[derive(Debug, Default)]
pub struct OutboundCounts(Mutex<BTreeMap<(String, String), u64>>);

impl OutboundCounts {
    /// A copy of the counters.
    pub fn snapshot(&self) -> BTreeMap<(String, String), u64> {
        self.0.lock().expect("outbound counts lock").clone()
    }

    fn add(&self, topic: &str, status: &str) {
        let mut counts = self.0.lock().expect("outbound counts lock");
        *counts
            .entry((topic.to_owned(), status.to_owned()))
            .or_default() += 1;
    }
}

/// One attempt's outbound HTTP: the `wasi:http` hooks of its store. Costs
/// a few pointer copies per attempt; what requests need is made at the first.
pub struct Outbound {
    policy: Arc<HttpPolicy>,
    ctx: Arc<JobContext>,
    deadline: Instant,
    counts: Arc<OutboundCounts>,
    /// What the attempt's requests sent and received.
    traffic: Arc<Traffic>,
    /// Made at the attempt's first request.
    requests: Option<Requests>,
    /// The attempt's effects journal (`journal = "effects"`).
    effects: Option<Arc<Effects>>,
}

/// An attempt's requests: the slots for open ones, and the authorities
/// already reported as denied.
struct Requests {
    open: Arc<Semaphore>,
    denied: Arc<Mutex<HashSet<String>>>,
}

impl Outbound {
    /// The hooks for the attempt `ctx`, which must end by `deadline`.
    pub fn new(
        policy: Arc<HttpPolicy>,
        ctx: Arc<JobContext>,
        deadline: Instant,
        counts: Arc<OutboundCounts>,
        effects: Option<Arc<Effects>>,
    ) -> Outbound {
        Outbound {
            policy,
            ctx,
            deadline,
            counts,
            traffic: Arc::default(),
            requests: None,
            effects,
        }
    }

    /// The hooks for the next attempt `ctx` of a reused instance: its
    /// traffic, open requests and denials start again.
    pub(in crate::wasm) fn rearm(
        &mut self,
        policy: Arc<HttpPolicy>,
        ctx: Arc<JobContext>,
        deadline: Instant,
    ) {
        self.policy = policy;
        self.ctx = ctx;
        self.deadline = deadline;
        self.traffic = Arc::default();
        self.requests = None;
    }

    /// What the attempt's requests sent and received so far.
    pub(in crate::wasm) fn traffic(&self) -> &Traffic {
        &self.traffic
    }
}

type Sent = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), Error>> + Send>,
    ),
    Error,
>;

impl WasiHttpHooks for Outbound {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = Sent> + Send> {
        let max_concurrent = self.policy.limits.max_concurrent as usize;
        let requests = self.requests.get_or_insert_with(|| Requests {
            open: Arc::new(Semaphore::new(max_concurrent)),
            denied: Arc::default(),
        });
        let call = Call {
            policy: self.policy.clone(),
            ctx: self.ctx.clone(),
            denied: requests.denied.clone(),
            counts: self.counts.clone(),
            traffic: self.traffic.clone(),
            method: request.method().clone(),
            authority: request
                .uri()
                .authority()
                .map_or_else(String::new, |a| a.to_string()),
        };
        let target = request
            .uri()
            .scheme_str()
            .ok_or_else(|| "no scheme".to_owned())
            .and_then(|scheme| Target::parse(scheme, &call.authority));
        let target = match target {
            Ok(target) => target,
            Err(why) => {
                call.refuse(&why);
                return Box::new(refuse(request, Error::HttpRequestUriInvalid));
            }
        };
        let access = self.policy.grants.http_access(&target);
        if access == Access::Denied {
            call.refuse("no grant of the topic opens it (grants.http in queues.toml)");
            return Box::new(refuse(request, Error::HttpRequestDenied));
        }
        let mut request = request;
        let span = self.ctx.trace.as_ref().and_then(|t| {
            let child = t.telemetry.child(&t.span)?;
            let to = spans::Destination {
                host: match &target.host {
                    RemoteHost::Ip(ip) => ip.to_string(),
                    name => name.to_string(),
                },
                port: target.port,
                url: spans::url_full(
                    request.uri().scheme_str().unwrap_or("http"),
                    &call.authority,
                    request.uri().path_and_query().map_or("/", |p| p.as_str()),
                ),
            };
            Some((t.clone(), child, to))
        });
        // W3C Trace Context: the request's client span as the parent (without
        // spans, the producer's context as received, as a proxy passes it on)
        // and the tracestate received, unless the guest set a traceparent
        let carried = match &span {
            Some((_, child, _)) => Some(child.trace_context()),
            None => self.ctx.pass_through.clone(),
        };
        if let Some(carried) = carried
            && !request.headers().contains_key("traceparent")
            && let Ok(parent) = http::HeaderValue::from_str(&carried.traceparent)
        {
            let headers = request.headers_mut();
            headers.insert("traceparent", parent);
            if !carried.tracestate.is_empty()
                && let Ok(state) = http::HeaderValue::from_str(&carried.tracestate)
            {
                headers.insert("tracestate", state);
            }
        }
        let Ok(permit) = requests.open.clone().try_acquire_owned() else {
            call.finish(Err(&format!(
                "more than {} requests open at once (http.max_concurrent)",
                self.policy.limits.max_concurrent
            )));
            return Box::new(refuse(request, Error::ConnectionLimitReached));
        };
        // past the attempt's deadline the attempt itself is stopped (and the
        // request with it): the margin lets that happen first, so the reason
        // recorded is the time limit, not a request timeout
        let remaining = self.deadline.saturating_duration_since(Instant::now()) + DEADLINE_MARGIN;
        let limits = &self.policy.limits;
        let guest = options.unwrap_or_default();
        let connect = shortest(limits.connect_timeout, guest.connect_timeout, remaining);
        let first_byte = shortest(
            limits.first_byte_timeout,
            guest.first_byte_timeout,
            remaining,
        );
        // a journaled attempt takes the request's place in its journal now,
        // in the order the guest sends them
        let journal = self.effects.as_ref().map(|e| (e.clone(), e.ticket()));
        let check = self.ctx.check.clone();
        Box::new(async move {
            let started = Instant::now();
            let live = |request: http::Request<WasiBody>| match &check {
                // a replay check sends nothing: it ends where a request would leave
                Some(ledger) => {
                    let what = format!("{} {}", request.method(), request.uri());
                    ledger.end(End::Arrives(Arrival::Request(what)));
                    Either::Left(std::future::pending())
                }
                None => Either::Right(send(
                    &call, request, target, access, connect, first_byte, permit,
                )),
            };
            let (sent, replayed) = match journal {
                None => (live(request).await, false),
                Some((effects, ticket)) => {
                    journaled::exchange(&effects, ticket, request, live).await
                }
            };
            match &sent {
                _ if replayed => call.replayed(&sent),
                Ok((response, _)) => call.finish(Ok((response.status().as_u16(), started))),
                Err(Error::HttpRequestDenied) => {}
                Err(e) => call.finish(Err(&e.to_string())),
            }
            if let Some((trace, span, to)) = span {
                trace.telemetry.end(&span, call.ended(&sent, &to, replayed));
            }
            sent
        })
    }
}

/// Answer `error` once the guest has finished writing the request body (into
/// nothing): a guest that writes its body while it waits for the answer then
/// sees `error`, not a closed body stream that hides why.
async fn refuse(request: http::Request<WasiBody>, error: Error) -> Sent {
    let mut body = request.into_body();
    while let Some(Ok(_)) = body.frame().await {}
    Err(error)
}

/// The smallest of the topic's limit, the guest's own and what the attempt has left.
fn shortest(limit: Duration, guest: Option<Duration>, remaining: Duration) -> Duration {
    guest.map_or(limit, |g| g.min(limit)).min(remaining)
}

/// What is known of one request, for its log line and counter.
struct Call {
    policy: Arc<HttpPolicy>,
    ctx: Arc<JobContext>,
    denied: Arc<Mutex<HashSet<String>>>,
    counts: Arc<OutboundCounts>,
    traffic: Arc<Traffic>,
    method: http::Method,
    authority: String,
}

impl Call {
    /// The client span of this request, as it ended.
    fn ended(&self, sent: &Sent, to: &spans::Destination, replayed: bool) -> Ended {
        let answer = match sent {
            Ok((response, _)) => Ok(response.status().as_u16()),
            Err(e) => Err(e.to_string()),
        };
        let ended = spans::request(self.method.as_str(), to, answer);
        if replayed { ended.replayed() } else { ended }
    }

    /// A request answered from the journal: logged, not counted as sent.
    fn replayed(&self, sent: &Sent) {
        let c = &*self.ctx;
        let answer = match sent {
            Ok((response, _)) => response.status().as_u16().to_string(),
            Err(e) => e.to_string(),
        };
        tracing::debug!(topic = %c.topic, job_id = %c.id, attempt = c.attempt, handler = &*c.handler, method = %self.method, authority = %self.authority, answer, "outbound request replayed from the journal (not sent)");
    }

    /// A request the grants refuse: warn once per authority and attempt.
    fn refuse(&self, why: &str) {
        let c = &*self.ctx;
        self.counts.add(&c.topic, "denied");
        if self
            .denied
            .lock()
            .expect("denied lock")
            .insert(self.authority.clone())
        {
            tracing::warn!(topic = %c.topic, job_id = %c.id, attempt = c.attempt, handler = &*c.handler, method = %self.method, authority = %self.authority, "outbound request denied: {why}");
        }
    }

    fn finish(&self, result: Result<(u16, Instant), &str>) {
        let c = &*self.ctx;
        match result {
            Ok((status, started)) => {
                self.counts.add(&c.topic, &status.to_string());
                tracing::debug!(topic = %c.topic, job_id = %c.id, attempt = c.attempt, handler = &*c.handler, method = %self.method, authority = %self.authority, status, ms = started.elapsed().as_millis() as u64, "outbound request");
            }
            Err(why) => {
                self.counts.add(&c.topic, "error");
                tracing::debug!(topic = %c.topic, job_id = %c.id, attempt = c.attempt, handler = &*c.handler, method = %self.method, authority = %self.authority, "outbound request failed: {why}");
            }
        }
    }
}
