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
    /// The full URL spans are POSTed to: `<endpoint>/v1/traces` for
    /// `endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT`, and
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is (the OpenTelemetry
    /// specification's rule for a signal's own endpoint).
    pub traces_url: String,
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
        let traces = |base: &str| format!("{}/v1/traces", base.trim().trim_end_matches('/'));
        let from_env = || {
            let set = |name| env(name).filter(|e| !e.trim().is_empty());
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .map(|e| e.trim().to_owned())
                .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| traces(&e)))
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
                traces(&value)
            }
            None => from_env().unwrap_or_else(|| traces(DEFAULT_ENDPOINT)),
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
            traces_url: endpoint,
            service_name: raw
                .service_name
                .or_else(|| env("OTEL_SERVICE_NAME"))
                .unwrap_or_else(|| "hourglass".to_owned()),
            parent,
            queue: raw.queue.map_or(4096, |q| q.0),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(file: Option<&str>, vars: &[(&str, &str)]) -> Option<String> {
        let raw = file.map(|e| {
            let text = format!("endpoint = {e:?}");
            toml::from_str::<Spanned<RawTelemetry>>(&text).unwrap()
        });
        let env = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        };
        RawTelemetry::resolve(raw, env)
            .unwrap()
            .map(|c| c.traces_url)
    }

    #[test]
    fn a_signals_own_endpoint_is_used_as_it_is_and_a_base_gets_v1_traces() {
        let traces = (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://h:4318/custom/traces",
        );
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318/otlp/");
        assert_eq!(url(None, &[traces]).unwrap(), "http://h:4318/custom/traces");
        assert_eq!(url(None, &[base]).unwrap(), "http://h:4318/otlp/v1/traces");
        // the signal's own wins over the base, as the specification says
        assert_eq!(
            url(None, &[base, traces]).unwrap(),
            "http://h:4318/custom/traces"
        );
        // the file's endpoint is a base, and wins over both variables
        assert_eq!(
            url(Some("http://c:4318"), &[base, traces]).unwrap(),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            url(Some("http://c:4318"), &[("OTEL_SDK_DISABLED", "true")]),
            None
        );
        assert_eq!(url(None, &[]), None);
        assert_eq!(
            url(None, &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", " ")]),
            None,
            "an empty variable is not set"
        );
    }
}
