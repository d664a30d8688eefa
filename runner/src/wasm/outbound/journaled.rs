//! Outbound requests of a journaled attempt (`journal = "effects"`).
//!
//! The request body is read whole first (up to [`MAX_BODY`]) so the
//! request can be compared with the journal's. A request the journal holds
//! at its place is answered from it and never sent; one that differs is a
//! divergence ([`Effects::diverged`]); past the journal's end it is sent,
//! its response body read whole while the connection is driven, and the
//! answer recorded in Redis before the guest sees it. A body over the cap
//! stops the journal there: that request and every one after it run live,
//! streamed as before.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use wasmtime_wasi_http::{Error, WasiBody};

use super::Sent;
use crate::redis::effects::{Answer, MAX_BODY, Request};
use crate::wasm::journal::{Effects, Ticket, identify};

type Io = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// Send `request` through the journal: replayed, refused, or sent by
/// `live` and recorded. `true` with a replayed answer.
pub(super) async fn exchange<F, Fut>(
    effects: &Effects,
    mut ticket: Ticket,
    request: http::Request<WasiBody>,
    live: F,
) -> (Sent, bool)
where
    F: FnOnce(http::Request<WasiBody>) -> Fut,
    Fut: Future<Output = Sent>,
{
    if let Some(why) = ticket.refused {
        return (super::refuse(request, internal(why)).await, false);
    }
    if ticket.live_only {
        return (live(request).await, false);
    }
    let (parts, body) = request.into_parts();
    let body = match read(body, None, MAX_BODY).await {
        Ok(Read::Whole(body)) => body,
        Ok(Read::Over(prefix, rest)) => {
            effects.stop(over("request", &ticket)).await;
            let request = http::Request::from_parts(parts, prefixed(prefix, rest));
            return (live(request).await, false);
        }
        Err(e) => return (Err(e), false),
    };
    let asked = identify(parts.method.as_str(), &parts.uri.to_string(), &body);
    if let Some(recorded) = ticket.recorded.take() {
        if recorded.request == asked {
            effects.replayed();
            return (answer(recorded.answer), true);
        }
        let was = &recorded.request;
        let message = if was.method == asked.method && was.url == asked.url {
            format!(
                "journal divergence at {}: recorded {} {} with a body of {} bytes, now the same request with a different body of {} bytes",
                ticket.place(),
                was.method,
                was.url,
                was.body_len,
                asked.body_len
            )
        } else {
            format!(
                "journal divergence at {}: recorded {} {}, now {} {}",
                ticket.place(),
                was.method,
                was.url,
                asked.method,
                asked.url
            )
        };
        if effects.diverged(message.clone()) {
            return (Err(internal(message)), false);
        }
        if let Err(e) = effects.flush().await {
            return (Err(internal(e)), false);
        }
        let request = http::Request::from_parts(parts, full(body));
        return (live(request).await, false);
    }
    let request = http::Request::from_parts(parts, full(body));
    let (response, io) = match live(request).await {
        Ok(sent) => sent,
        Err(e) => return (failed(effects, &ticket, asked, e).await, false),
    };
    let (head, body) = response.into_parts();
    let mut io = Box::into_pin(io);
    let mut io_done = None;
    let body = match read(body, Some((&mut io, &mut io_done)), MAX_BODY).await {
        Ok(Read::Whole(body)) => body,
        Ok(Read::Over(prefix, rest)) => {
            effects.stop(over("response", &ticket)).await;
            let response = http::Response::from_parts(head, prefixed(prefix, rest));
            return (Ok((response, driven(io, io_done))), false);
        }
        Err(e) => return (failed(effects, &ticket, asked, e).await, false),
    };
    let answer = Answer::Response {
        status: head.status.as_u16(),
        headers: head
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect(),
        body: body.to_vec(),
    };
    if let Err(why) = effects.record(&ticket, asked, answer).await {
        return (Err(internal(why)), false);
    }
    let response = http::Response::from_parts(head, full(body));
    (Ok((response, driven(io, io_done))), false)
}

/// Record that the request at `ticket` got no answer (`e`), and hand the
/// guest `e` whether or not that could be written.
async fn failed(effects: &Effects, ticket: &Ticket, asked: Request, e: Error) -> Sent {
    let answer = Answer::Failed {
        code: code(&e),
        detail: e.to_string(),
    };
    let _ = effects.record(ticket, asked, answer).await;
    Err(e)
}

/// Why the journal stops at a body over the cap.
fn over(which: &str, ticket: &Ticket) -> String {
    format!(
        "the {which} body of {} is over {MAX_BODY} bytes",
        ticket.place()
    )
}

/// The answer a recorded request gets again.
fn answer(recorded: Answer) -> Sent {
    match recorded {
        Answer::Response {
            status,
            headers,
            body,
        } => {
            let mut response = http::Response::builder().status(status);
            for (name, value) in headers {
                response = response.header(name, value);
            }
            let response = response
                .body(full(Bytes::from(body)))
                .map_err(|e| internal(format!("a recorded response does not rebuild: {e}")))?;
            let io: Box<dyn Future<Output = Result<(), Error>> + Send> =
                Box::new(std::future::ready(Ok(())));
            Ok((response, io))
        }
        Answer::Failed { code, detail } => Err(error(&code, &detail)),
    }
}

/// The name of an error code, as recorded.
fn code(e: &Error) -> String {
    let debug = format!("{e:?}");
    let end = debug
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(debug.len());
    debug[..end].to_owned()
}

/// The error code a recorded failure names.
fn error(code: &str, detail: &str) -> Error {
    match code {
        "DnsTimeout" => Error::DnsTimeout,
        "DestinationNotFound" => Error::DestinationNotFound,
        "DestinationUnavailable" => Error::DestinationUnavailable,
        "ConnectionRefused" => Error::ConnectionRefused,
        "ConnectionTerminated" => Error::ConnectionTerminated,
        "ConnectionTimeout" => Error::ConnectionTimeout,
        "ConnectionReadTimeout" => Error::ConnectionReadTimeout,
        "ConnectionWriteTimeout" => Error::ConnectionWriteTimeout,
        "HttpResponseTimeout" => Error::HttpResponseTimeout,
        "HttpResponseIncomplete" => Error::HttpResponseIncomplete,
        "HttpProtocolError" => Error::HttpProtocolError,
        "TlsCertificateError" => Error::TlsCertificateError,
        "TlsProtocolError" => Error::TlsProtocolError,
        "Connect" => Error::Connect(std::io::Error::other(detail.to_owned())),
        "Tls" => Error::Tls(std::io::Error::other(detail.to_owned())),
        _ => internal(detail.to_owned()),
    }
}

fn internal(message: String) -> Error {
    Error::InternalError(Some(message))
}

fn full(body: Bytes) -> WasiBody {
    Full::new(body)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// The connection's future: done already, or still to drive.
fn driven(
    io: Io,
    done: Option<Result<(), Error>>,
) -> Box<dyn Future<Output = Result<(), Error>> + Send> {
    match done {
        Some(result) => Box::new(std::future::ready(result)),
        None => Box::new(io),
    }
}

enum Read {
    /// The whole body.
    Whole(Bytes),
    /// What was read before the cap, and the rest of the body.
    Over(VecDeque<Bytes>, WasiBody),
}

/// Read `body` whole, up to `cap` bytes, driving `io` meanwhile if given
/// (a response's body arrives only while its connection is polled).
/// Trailers are dropped.
async fn read(
    mut body: WasiBody,
    mut io: Option<(&mut Io, &mut Option<Result<(), Error>>)>,
    cap: usize,
) -> Result<Read, Error> {
    let mut whole = BytesMut::new();
    loop {
        let frame = match &mut io {
            Some((io, done)) if done.is_none() => {
                tokio::select! {
                    biased;
                    frame = body.frame() => frame,
                    ended = io.as_mut() => {
                        **done = Some(ended);
                        continue;
                    }
                }
            }
            _ => body.frame().await,
        };
        match frame {
            None => return Ok(Read::Whole(whole.freeze())),
            Some(Err(e)) => return Err(e),
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if whole.len() + data.len() > cap {
                    let prefix = VecDeque::from([whole.freeze(), data]);
                    return Ok(Read::Over(prefix, body));
                }
                whole.extend_from_slice(&data);
            }
        }
    }
}

/// A body that yields what was read of it first, then the rest.
fn prefixed(prefix: VecDeque<Bytes>, rest: WasiBody) -> WasiBody {
    Prefixed { prefix, rest }.boxed_unsync()
}

struct Prefixed {
    prefix: VecDeque<Bytes>,
    rest: WasiBody,
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if let Some(data) = self.prefix.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let held: u64 = self.prefix.iter().map(|b| b.len() as u64).sum();
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + held);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}
