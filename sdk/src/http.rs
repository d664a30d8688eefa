//! Outbound HTTP from a handler, to the hosts its topic is granted
//! (`grants = { http = [...] }` in `queues.toml`).
//!
//! ```no_run
//! use hourglass_sdk::{Job, http};
//!
//! fn notify(job: Job) -> hourglass_sdk::Result {
//!     let resp = http::post_json("https://api.example.com/events", &job.json::<serde_json::Value>()?)?;
//!     if !resp.is_success() { return Err(hourglass_sdk::Error::retry(format!("status {}", resp.status()))) }
//!     hourglass_sdk::info!("delivered: {}", resp.text());
//!     Ok(())
//! }
//! # hourglass_sdk::handler!(notify);
//! ```
//!
//! Calls block until the whole response is read (the runner caps its size
//! with the topic's `http.max_response`). A request the topic is not granted,
//! or one that gets no response (refused, timed out, TLS), is an [`HttpError`];
//! with `?` it retries the job with the error as the recorded reason.
//! Redirects are not followed: a 3xx comes back as it is.
//!
//! Built on `wasi:http` directly (the [`wasip2`] bindings): the body is
//! finished before the request goes when there is none, and a server that
//! answers before it has read an upload still has its answer read.

use alloc::borrow::Cow;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme, http_error_code,
};
use wasip2::io::streams::StreamError;

/// GET `url`.
pub fn get(url: &str) -> Result<Response, HttpError> {
    Request::get(url).send()
}

/// POST `value` as JSON to `url`.
pub fn post_json<T: serde::Serialize + ?Sized>(
    url: &str,
    value: &T,
) -> Result<Response, HttpError> {
    Request::post(url).json(value).send()
}

/// An outgoing request, built up and then [`Request::send`]-ed.
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// A problem found while building (a body that did not serialize).
    invalid: Option<String>,
}

impl Request {
    /// A request with any method (`"PATCH"`, `"HEAD"`, ...).
    pub fn new(method: &str, url: &str) -> Request {
        Request {
            method: method.to_string(),
            url: url.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
            invalid: None,
        }
    }

    /// A GET request.
    pub fn get(url: &str) -> Request {
        Request::new("GET", url)
    }

    /// A POST request.
    pub fn post(url: &str) -> Request {
        Request::new("POST", url)
    }

    /// A PUT request.
    pub fn put(url: &str) -> Request {
        Request::new("PUT", url)
    }

    /// A DELETE request.
    pub fn delete(url: &str) -> Request {
        Request::new("DELETE", url)
    }

    /// Add a header.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Send these bytes as the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// Send `value` as a JSON body (and say so in `content-type`).
    pub fn json<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Request {
        match serde_json::to_vec(value) {
            Ok(body) => self.body = body,
            Err(e) => self.invalid = Some(alloc::format!("the JSON body: {e}")),
        }
        self.header("content-type", "application/json")
    }

    /// Send it and read the whole response.
    pub fn send(self) -> Result<Response, HttpError> {
        let fail = |kind, what: String| HttpError {
            kind,
            message: alloc::format!("{} {}: {what}", self.method, self.url),
        };
        let invalid = |what: &str| fail(HttpErrorKind::Invalid, what.to_string());
        let code = |code: ErrorCode| HttpError::from_code(&self.method, &self.url, &code);
        if let Some(why) = &self.invalid {
            return Err(invalid(why));
        }
        let (scheme, rest) = match self.url.split_once("://") {
            Some((s, rest)) if s.eq_ignore_ascii_case("http") => (Scheme::Http, rest),
            Some((s, rest)) if s.eq_ignore_ascii_case("https") => (Scheme::Https, rest),
            _ => return Err(invalid("not an http:// or https:// URL")),
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], alloc::format!("/{}", &rest[i..])),
            None => (rest, String::from("/")),
        };
        let mut fields: Vec<(String, Vec<u8>)> = self
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), value.as_bytes().to_vec()))
            .collect();
        // A body's length goes with it, as curl and browsers send it: without
        // one the upload is chunked, which some servers refuse (411, S3's
        // presigned PUT). The host checks the body against it.
        let sized =
            !self.body.is_empty() || matches!(self.method.as_str(), "POST" | "PUT" | "PATCH");
        if sized
            && !self
                .headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        {
            let length = alloc::format!("{}", self.body.len());
            fields.push((String::from("content-length"), length.into_bytes()));
        }
        let fields = Fields::from_list(&fields)
            .map_err(|e| invalid(&alloc::format!("a header is not allowed: {e:?}")))?;
        let request = OutgoingRequest::new(fields);
        // methods are case-sensitive: "patch" is not PATCH
        let method = match self.method.as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "CONNECT" => Method::Connect,
            "OPTIONS" => Method::Options,
            "TRACE" => Method::Trace,
            "PATCH" => Method::Patch,
            other => Method::Other(other.to_owned()),
        };
        request
            .set_method(&method)
            .map_err(|()| invalid("invalid method"))?;
        request
            .set_scheme(Some(&scheme))
            .map_err(|()| invalid("invalid URL"))?;
        if authority.is_empty() || request.set_authority(Some(authority)).is_err() {
            return Err(invalid("invalid URL (host)"));
        }
        request
            .set_path_with_query(Some(&path))
            .map_err(|()| invalid("invalid URL (path)"))?;
        let body = request.body().expect("a new request's body is there");

        let future = if self.body.is_empty() {
            // Finished before the request goes: a fast server's answer cannot
            // race an upload that has nothing in it (writing even no bytes to
            // a body the host has already dropped fails).
            OutgoingBody::finish(body, None).map_err(code)?;
            outgoing_handler::handle(request, None).map_err(code)?
        } else {
            let future = outgoing_handler::handle(request, None).map_err(code)?;
            let stream = body.write().expect("a new body's stream is there");
            // A server may answer before it has read the whole upload (a 413,
            // a 401) and close: the response says what happened, not the
            // broken upload (nor finish's complaint that it fell short).
            let sent = self
                .body
                .chunks(4096)
                .all(|chunk| stream.blocking_write_and_flush(chunk).is_ok());
            drop(stream);
            let finished = OutgoingBody::finish(body, None);
            if sent {
                finished.map_err(code)?;
            }
            future
        };
        let response = loop {
            match future.get() {
                Some(Ok(Ok(response))) => break response,
                Some(Ok(Err(e))) => return Err(code(e)),
                Some(Err(())) => unreachable!("a response is taken once"),
                None => future.subscribe().block(),
            }
        };
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
            .collect();
        let incoming = response.consume().expect("a response's body is taken once");
        let stream = incoming.stream().expect("a body's stream is taken once");
        let mut body = Vec::new();
        loop {
            match stream.blocking_read(64 << 10) {
                Ok(bytes) => body.extend_from_slice(&bytes),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(match http_error_code(&e) {
                        Some(e) => code(e),
                        None => fail(
                            HttpErrorKind::Transport,
                            alloc::format!("the response body broke off: {}", e.to_debug_string()),
                        ),
                    });
                }
            }
        }
        drop(stream);
        drop(IncomingBody::finish(incoming));
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

/// A response, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body's bytes.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    /// The body parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, crate::Error> {
        serde_json::from_slice(&self.body).map_err(|e| {
            crate::Error::retry(alloc::format!("the response is not the JSON expected: {e}"))
        })
    }

    /// `Retry-After` in seconds (the HTTP-date form is not read), for
    /// [`crate::Outcome::retry_in`].
    pub fn retry_after(&self) -> Option<Duration> {
        self.header("retry-after")?
            .trim()
            .parse::<u64>()
            .ok()
            .map(Duration::from_secs)
    }
}

/// What kind of failure an [`HttpError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpErrorKind {
    /// The topic is not granted this host (or the name resolves to a private
    /// address a wildcard grant does not open): nothing was sent.
    Denied,
    /// No response: connection refused, DNS, TLS, a timeout, a limit.
    Transport,
    /// The request itself is malformed (a bad URL or header).
    Invalid,
}

/// A request that got no response. Converts into a retryable [`crate::Error`]
/// with `?`, its message recorded as the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    kind: HttpErrorKind,
    message: String,
}

impl HttpError {
    /// What kind of failure it is.
    pub fn kind(&self) -> HttpErrorKind {
        self.kind
    }

    fn from_code(method: &str, url: &str, code: &ErrorCode) -> HttpError {
        let (kind, what) = match code {
            ErrorCode::HttpRequestDenied => (
                HttpErrorKind::Denied,
                String::from(
                    "denied: the topic is not granted this host (grants.http in queues.toml), or it resolves to a private address",
                ),
            ),
            ErrorCode::HttpResponseBodySize(size) => (
                HttpErrorKind::Transport,
                alloc::format!(
                    "the response body{} is over the topic's limit (http.max_response)",
                    size.map(|n| alloc::format!(" ({n} bytes)"))
                        .unwrap_or_default()
                ),
            ),
            ErrorCode::HttpRequestUriInvalid => {
                (HttpErrorKind::Invalid, String::from("invalid URL"))
            }
            code => (HttpErrorKind::Transport, describe(code)),
        };
        HttpError {
            kind,
            message: alloc::format!("{method} {url}: {what}"),
        }
    }
}

fn describe(code: &ErrorCode) -> String {
    match code {
        ErrorCode::ConnectionRefused => "connection refused".into(),
        ErrorCode::ConnectionTimeout => "connection timed out (http.connect_timeout)".into(),
        ErrorCode::ConnectionReadTimeout => "no response in time (http.first_byte_timeout)".into(),
        ErrorCode::ConnectionLimitReached => {
            "too many requests open at once (http.max_concurrent)".into()
        }
        ErrorCode::DnsError(payload) => alloc::format!(
            "name lookup failed{}",
            payload
                .rcode
                .as_deref()
                .map(|r| alloc::format!(": {r}"))
                .unwrap_or_default()
        ),
        ErrorCode::TlsCertificateError => "TLS certificate not trusted".into(),
        other => alloc::format!("{other:?}"),
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl core::error::Error for HttpError {}
