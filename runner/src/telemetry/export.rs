//! The export task: spans queued by [`super::Telemetry::end`] go out in
//! batches with the SDK's OTLP exporter; a batch that fails or times out is
//! dropped and counted, never retried (the job path does not wait on it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use super::{BATCH, EXPORT_TIMEOUT, Exported, LINGER};

/// Export queued spans in batches until the queue closes.
pub(super) async fn export(
    exporter: opentelemetry_otlp::SpanExporter,
    mut rx: mpsc::Receiver<SpanData>,
    dropped: Counter,
    endpoint: String,
    progress: Arc<Exported>,
) {
    let failing = AtomicBool::new(false);
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        if rx.recv_many(&mut batch, BATCH).await == 0 {
            return;
        }
        if batch.len() < BATCH {
            tokio::time::sleep(LINGER).await;
            while batch.len() < BATCH
                && let Ok(span) = rx.try_recv()
            {
                batch.push(span);
            }
        }
        let n = batch.len() as u64;
        let sent = std::mem::take(&mut batch);
        let outcome = tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(sent)).await;
        progress.finished.fetch_add(n, Ordering::Relaxed);
        match outcome {
            Ok(Ok(())) => {
                if failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(endpoint, "span export works again");
                }
            }
            outcome => {
                dropped.inc_by(n);
                let why = match outcome {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {EXPORT_TIMEOUT:?}"),
                };
                if !failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        endpoint,
                        "span export failing, spans dropped and counted (hourglass_telemetry_spans_dropped_total) until it works: {why}"
                    );
                }
            }
        }
    }
}
