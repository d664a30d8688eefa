//! Spans of jobs, exported with OpenTelemetry (OTLP over HTTP/protobuf).
//!
//! Off unless `[telemetry]` or the standard `OTEL_EXPORTER_OTLP_*`
//! variables say where to send spans ([`TelemetryConfig`]); off, every call
//! here is a branch on `None` and nothing is allocated.
//!
//! The runner knows each span's start and end when it ends (an attempt, an
//! outbound request, a follow-up's delivery, an API enqueue), so spans are
//! built whole as the SDK's [`SpanData`] and handed to a bounded queue; one
//! task exports what is queued in batches with the SDK's OTLP exporter. A
//! full queue (a slow or absent collector) drops the span and counts it
//! (`hourglass_telemetry_spans_dropped_total`): the job path never waits on
//! the exporter.
//!
//! This folder is the only code that names OpenTelemetry's crates
//! (`scripts/check-boundaries`): the rest of the runner describes a span's
//! end with the plain facts [`spans`] turns into attributes.

mod export;
pub mod spans;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::{Link, SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use crate::config::{SpanParent, TelemetryConfig};
use crate::redis::TraceContext;
pub use spans::Ended;

/// Most spans sent in one export.
const BATCH: usize = 512;
/// How long spans gather before an export that is not full.
const LINGER: Duration = Duration::from_millis(200);
/// How long one export may take before its spans count as dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// This process's span export, or none.
pub struct Telemetry {
    on: Option<On>,
}

struct On {
    queue: mpsc::Sender<SpanData>,
    /// Spans queued, and spans the export task finished with (sent or
    /// dropped): a graceful stop waits for the second to catch up.
    progress: Arc<Exported>,
    dropped: Counter,
    scope: InstrumentationScope,
    parent: SpanParent,
}

/// How far the export task has got.
#[derive(Default)]
struct Exported {
    queued: AtomicU64,
    finished: AtomicU64,
}

/// How long a graceful stop waits for the spans still queued.
pub const FLUSH_WITHIN: Duration = Duration::from_secs(5);

/// A span begun: its ids, its parent (or link), known when it starts; the
/// rest is given when it ends ([`Telemetry::end`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Begun {
    /// Its own context (this span's id, the trace it is in).
    pub context: SpanContext,
    /// The span it is a child of, if any.
    pub parent: Option<SpanContext>,
    /// The span it is linked to instead, if any (`parent = "link"`).
    pub link: Option<SpanContext>,
    /// When it started.
    pub start: SystemTime,
}

impl Begun {
    /// The W3C `traceparent` naming this span as the parent: what its
    /// children (an outbound request, a follow-up) carry.
    pub fn traceparent(&self) -> String {
        let c = &self.context;
        format!(
            "00-{}-{}-{:02x}",
            c.trace_id(),
            c.span_id(),
            c.trace_flags().to_u8()
        )
    }

    /// This span as a stored trace context (for follow-ups and jobs).
    pub fn trace_context(&self) -> TraceContext {
        TraceContext {
            traceparent: self.traceparent(),
            tracestate: self.context.trace_state().header(),
        }
    }

    /// The trace id, 32 hex digits (log lines carry it).
    pub fn trace_id(&self) -> String {
        self.context.trace_id().to_string()
    }

    /// The span id, 16 hex digits.
    pub fn span_id(&self) -> String {
        self.context.span_id().to_string()
    }
}

/// An attempt's span, for what happens under it in the sandbox: outbound
/// requests (child spans, a `traceparent` header) and log lines (its ids).
pub struct AttemptTrace {
    /// The attempt's span.
    pub span: Begun,
    /// Where spans go.
    pub telemetry: Arc<Telemetry>,
    /// Its trace id, 32 hex digits.
    pub trace_id: String,
    /// Its span id, 16 hex digits.
    pub span_id: String,
}

impl AttemptTrace {
    /// The attempt span `span`.
    pub fn new(span: Begun, telemetry: Arc<Telemetry>) -> AttemptTrace {
        AttemptTrace {
            trace_id: span.trace_id(),
            span_id: span.span_id(),
            span,
            telemetry,
        }
    }
}

impl std::fmt::Debug for AttemptTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AttemptTrace({}/{})", self.trace_id, self.span_id)
    }
}

/// The remote span a stored trace context names.
pub fn remote(trace: &TraceContext) -> Option<SpanContext> {
    let trace_id = TraceId::from_hex(trace.trace_id()).ok()?;
    let span_id = SpanId::from_hex(trace.span_id()).ok()?;
    // every bit the producer set (Level 2's random-trace-id bit too)
    let flags = TraceFlags::new(trace.flags());
    let state = trace.tracestate.parse::<TraceState>().unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

impl Telemetry {
    /// No export: every span is skipped.
    pub fn off() -> Arc<Telemetry> {
        Arc::new(Telemetry { on: None })
    }

    /// Export as `cfg` says, counting drops in `dropped`; must run inside
    /// the tokio runtime (the export task starts here).
    pub fn start(cfg: &TelemetryConfig, dropped: Counter) -> anyhow::Result<Arc<Telemetry>> {
        Telemetry::start_on(cfg, dropped, &tokio::runtime::Handle::current())
    }

    /// [`Telemetry::start`] with the export task (encoding and sending
    /// batches) on `runtime`: a runner's pool, away from its own thread.
    pub fn start_on(
        cfg: &TelemetryConfig,
        dropped: Counter,
        runtime: &tokio::runtime::Handle,
    ) -> anyhow::Result<Arc<Telemetry>> {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(cfg.traces_url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build()
            .map_err(|e| anyhow::anyhow!("[telemetry] cannot export to {}: {e}", cfg.traces_url))?;
        exporter.set_resource(
            &Resource::builder()
                .with_service_name(cfg.service_name.clone())
                .build(),
        );
        let (queue, rx) = mpsc::channel(cfg.queue as usize);
        let progress = Arc::new(Exported::default());
        runtime.spawn(export::export(
            exporter,
            rx,
            dropped.clone(),
            cfg.traces_url.clone(),
            progress.clone(),
        ));
        tracing::info!(
            url = %cfg.traces_url,
            service = %cfg.service_name,
            "exporting spans (OTLP over HTTP)"
        );
        Ok(Arc::new(Telemetry {
            on: Some(On {
                queue,
                progress,
                dropped,
                scope: InstrumentationScope::builder("hourglass")
                    .with_version(env!("CARGO_PKG_VERSION"))
                    .with_schema_url(format!(
                        "https://opentelemetry.io/schemas/{}",
                        spans::SEMCONV
                    ))
                    .build(),
                parent: cfg.parent,
            }),
        }))
    }

    /// Whether spans are exported.
    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// Begin a span continuing `from` (the caller's context; `None` starts
    /// a trace): always its child, whatever `parent` says, so that a
    /// producer's spans (an enqueue by the API or the CLI, a follow-up's
    /// delivery) stay in their caller's trace, as the messaging conventions
    /// keep them. `None` when export is off.
    pub fn begin(&self, from: Option<&TraceContext>) -> Option<Begun> {
        self.begin_as(from, SpanParent::Child)
    }

    /// Begin a span continuing `from` as `parent` says: its child, or the
    /// first span of a trace of its own linked to it (`parent = "link"`).
    fn begin_as(&self, from: Option<&TraceContext>, parent: SpanParent) -> Option<Begun> {
        self.on.as_ref()?;
        let from = from.and_then(remote);
        Some(match (from, parent) {
            (Some(parent), SpanParent::Child) => Begun {
                context: SpanContext::new(
                    parent.trace_id(),
                    new_span_id(),
                    parent.trace_flags(),
                    false,
                    parent.trace_state().clone(),
                ),
                parent: Some(parent),
                link: None,
                start: SystemTime::now(),
            },
            (link, _) => Begun {
                context: SpanContext::new(
                    TraceId::from(rand::random::<u128>().max(1)),
                    new_span_id(),
                    TraceFlags::SAMPLED,
                    false,
                    TraceState::default(),
                ),
                parent: None,
                link,
                start: SystemTime::now(),
            },
        })
    }

    /// Begin an attempt's span continuing `from` (the job's stored
    /// context), for what runs under it; `None` when export is off.
    /// Only an attempt starts a trace of its own under `parent = "link"`.
    pub fn attempt(self: &Arc<Self>, from: Option<&TraceContext>) -> Option<Arc<AttemptTrace>> {
        let span = self.begin_as(from, self.on.as_ref()?.parent)?;
        Some(Arc::new(AttemptTrace::new(span, self.clone())))
    }

    /// Begin a child of `parent` (a span of this process), starting now.
    pub fn child(&self, parent: &Begun) -> Option<Begun> {
        self.on.as_ref()?;
        Some(Begun {
            context: SpanContext::new(
                parent.context.trace_id(),
                new_span_id(),
                parent.context.trace_flags(),
                false,
                parent.context.trace_state().clone(),
            ),
            parent: Some(parent.context.clone()),
            link: None,
            start: SystemTime::now(),
        })
    }

    /// End `span` now and queue it for export (dropped and counted if the
    /// queue is full).
    pub fn end(&self, span: &Begun, ended: Ended) {
        let Some(on) = &self.on else { return };
        let mut events = SpanEvents::default();
        events.events = ended.events;
        let mut links = SpanLinks::default();
        links.links = span
            .link
            .iter()
            .map(|c| Link::with_context(c.clone()))
            .collect();
        let data = SpanData {
            span_context: span.context.clone(),
            parent_span_id: span
                .parent
                .as_ref()
                .map_or(SpanId::INVALID, SpanContext::span_id),
            parent_span_is_remote: span.parent.as_ref().is_some_and(SpanContext::is_remote),
            span_kind: ended.kind,
            name: ended.name,
            start_time: span.start,
            end_time: SystemTime::now(),
            attributes: ended.attributes,
            dropped_attributes_count: 0,
            events,
            links,
            status: ended.status,
            instrumentation_scope: on.scope.clone(),
        };
        match on.queue.try_send(data) {
            Ok(()) => {
                on.progress.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                on.dropped.inc();
            }
        }
    }

    /// Wait, at most `within`, until the spans queued so far are exported
    /// (or dropped and counted): a graceful stop, so that the last spans of
    /// a process are not lost with it. Whether they all went.
    pub async fn flush(&self, within: Duration) -> bool {
        let Some(on) = &self.on else { return true };
        let target = on.progress.queued.load(Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + within;
        while on.progress.finished.load(Ordering::Relaxed) < target {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    "stopping with {} spans not exported",
                    target.saturating_sub(on.progress.finished.load(Ordering::Relaxed))
                );
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

fn new_span_id() -> SpanId {
    SpanId::from(rand::random::<u64>().max(1))
}
