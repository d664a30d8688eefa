//! A guest's stdout and stderr: forwarded line by line to the runner's log
//! with topic, job id and attempt, never trapping the guest. Past a per-attempt
//! budget further output is dropped (once noted); the last lines of stderr are
//! kept so a trap can say what the guest printed before it died.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::context::JobContext;
use super::logs::LogTap;

/// Output kept per attempt before the rest is dropped.
const BUDGET: usize = 1 << 20;
/// A line longer than this is logged in pieces.
const LINE: usize = 8 * 1024;
/// Lines of stderr kept for a trap's reason.
const TAIL: usize = 32;

/// One of a guest's output streams.
#[derive(Clone)]
pub struct GuestOutput(Arc<Mutex<State>>);

struct State {
    ctx: Arc<JobContext>,
    /// Where the job's kept logs go too.
    tap: LogTap,
    stream: &'static str,
    partial: Vec<u8>,
    written: usize,
    tail: VecDeque<String>,
}

impl GuestOutput {
    /// A stream named `stream` ("stdout" or "stderr") for the attempt `ctx`,
    /// its lines kept by `tap` too.
    pub fn new(ctx: Arc<JobContext>, stream: &'static str, tap: LogTap) -> GuestOutput {
        GuestOutput(Arc::new(Mutex::new(State {
            ctx,
            tap,
            stream,
            partial: Vec::new(),
            written: 0,
            tail: VecDeque::new(),
        })))
    }

    /// The same stream for the next job `ctx` of a reused instance: its
    /// budget and kept tail start again.
    pub fn rearm(&self, ctx: Arc<JobContext>) {
        self.finish();
        let mut s = self.0.lock().expect("output lock");
        s.ctx = ctx;
        s.written = 0;
        s.tail.clear();
    }

    /// Log what is left of an unterminated last line.
    pub fn finish(&self) {
        let mut s = self.0.lock().expect("output lock");
        if !s.partial.is_empty() {
            let line = std::mem::take(&mut s.partial);
            s.emit(&line);
        }
    }

    /// The last lines written, oldest first.
    pub fn tail(&self) -> Vec<String> {
        self.0
            .lock()
            .expect("output lock")
            .tail
            .iter()
            .cloned()
            .collect()
    }

    fn write_bytes(&self, bytes: &[u8]) {
        let mut s = self.0.lock().expect("output lock");
        let room = BUDGET.saturating_sub(s.written);
        if room == 0 {
            return;
        }
        let take = bytes.len().min(room);
        s.written += take;
        for chunk in bytes[..take].split_inclusive(|b| *b == b'\n') {
            s.partial.extend_from_slice(chunk);
            if chunk.ends_with(b"\n") || s.partial.len() >= LINE {
                let line = std::mem::take(&mut s.partial);
                s.emit(&line);
            }
        }
        if s.written >= BUDGET {
            let note = format!(
                "[output past {} KiB dropped for this attempt]",
                BUDGET >> 10
            );
            s.emit(note.as_bytes());
        }
    }
}

impl State {
    fn emit(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end();
        if text.trim().is_empty() {
            return;
        }
        let c = &*self.ctx;
        match &c.check {
            // a replay check keeps what the candidate printed for its report
            Some(ledger) => ledger.line(format!("{}: {text}", self.stream)),
            None => {
                tracing::info!(target: "handler", topic = %c.topic, job_id = %c.id, attempt = c.attempt, handler = &*c.handler, stream = self.stream, "{text}");
                self.tap.push(self.stream, text);
            }
        }
        if self.tail.len() == TAIL {
            self.tail.pop_front();
        }
        self.tail.push_back(text.to_owned());
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out() -> GuestOutput {
        GuestOutput::new(
            JobContext {
                topic: "t".into(),
                id: "1".into(),
                attempt: 1,
                handler: "h".into(),
                trace: None,
                pass_through: None,
                upstream: Default::default(),
                batch: 1,
                check: None,
            }
            .into(),
            "stderr",
            LogTap::default(),
        )
    }

    #[test]
    fn splits_lines_across_writes_and_keeps_the_tail() {
        let o = out();
        o.write_bytes(b"first li");
        o.write_bytes(b"ne\nsecond\nthi");
        assert_eq!(o.tail(), ["first line", "second"]);
        o.finish();
        assert_eq!(o.tail(), ["first line", "second", "thi"]);
    }

    #[test]
    fn a_flood_is_cut_at_the_budget_without_failing() {
        let o = out();
        let line = vec![b'x'; 1000];
        for _ in 0..5000 {
            o.write_bytes(&line);
            o.write_bytes(b"\n");
        }
        assert!(o.0.lock().unwrap().written <= BUDGET);
        assert!(o.tail().last().unwrap().contains("dropped"));
    }
}
