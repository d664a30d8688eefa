//! The `[telemetry]` section: whether and where this process exports its
//! spans (OpenTelemetry, OTLP over HTTP with protobuf). Off unless the
//! section or the standard `OTEL_EXPORTER_OTLP_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` variables say where; the standard
//! `OTEL_SDK_DISABLED=true` turns it off whatever the file says.

use serde::Deserialize;
use toml::Spanned;

use super::place::{Invalid, expand_env};
use super::units::Positive;

/// `[telemetry]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub enabled: Option<bool>,
    pub endpoint: Option<Spanned<String>>,
    pub service_name: Option<String>,
    pub parent: Option<Spanned<String>>,
    pub queue: Option<Positive>,
}

/// How a job's attempt spans relate to the producer's span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanParent {
    /// Children of the producer's span: one trace from the request to the
    /// last attempt (the default).
    Child,
    /// Each attempt a trace of its own, linked to the producer's span (for
    /// producers whose traces should not grow with retries hours later).
    Link,
}

/// Where spans go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP endpoint (spans go to `<endpoint>/v1/traces`).
    pub endpoint: String,
    /// The `service.name` of this process's spans.
    pub service_name: String,
    /// Attempt spans as children of the producer's span, or linked to it.
    pub parent: SpanParent,
    /// Spans buffered for export; past it they are dropped and counted.
    pub queue: u32,
}

/// The default OTLP/HTTP endpoint (a collector on this host).
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

impl RawTelemetry {
    /// Resolve against the environment; `None` when export is off.
    pub fn resolve(
        raw: Option<Spanned<RawTelemetry>>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<TelemetryConfig>, Invalid> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let from_env = || {
            env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .map(|e| e.trim_end_matches("/v1/traces").to_owned())
                .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
                .filter(|e| !e.trim().is_empty())
        };
        let raw = match raw {
            Some(r) => r.into_inner(),
            // the variables alone turn export on, with the defaults
            None if from_env().is_some() => RawTelemetry::default(),
            None => return Ok(None),
        };
        if raw.enabled == Some(false) {
            return Ok(None);
        }
        let endpoint = match &raw.endpoint {
            Some(e) => {
                let span = e.span();
                let value = expand_env(e.get_ref())
                    .map_err(|m| (span.clone(), format!("field `endpoint`: {m}")))?;
                if !(value.starts_with("http://") || value.starts_with("https://")) {
                    return Err((
                        span,
                        format!(
                            "field `endpoint`: {value:?} is not an http:// or https:// URL (the OTLP/HTTP endpoint, e.g. \"http://localhost:4318\")"
                        ),
                    ));
                }
                value
            }
            None => from_env().unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned()),
        };
        let parent = match &raw.parent {
            None => SpanParent::Child,
            Some(p) => match p.get_ref().as_str() {
                "child" => SpanParent::Child,
                "link" => SpanParent::Link,
                other => {
                    return Err((
                        p.span(),
                        format!("field `parent`: {other:?} is not \"child\" or \"link\""),
                    ));
                }
            },
        };
        Ok(Some(TelemetryConfig {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            service_name: raw
                .service_name
                .or_else(|| env("OTEL_SERVICE_NAME"))
                .unwrap_or_else(|| "hourglass".to_owned()),
            parent,
            queue: raw.queue.map_or(4096, |q| q.0),
        }))
    }
}
