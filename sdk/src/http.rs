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
//! Built on [`wstd`], the Bytecode Alliance's async standard library for
//! WASI 0.2, which speaks `wasi:http` for us.

use alloc::borrow::Cow;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use wstd::http::{Body, Client, ErrorCode};

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
        let url = self.url.clone();
        let invalid = |message: String| HttpError {
            kind: HttpErrorKind::Invalid,
            message: alloc::format!("{} {url}: {message}", self.method),
        };
        if let Some(why) = &self.invalid {
            return Err(invalid(why.clone()));
        }
        let mut builder = wstd::http::Request::builder()
            .method(self.method.as_str())
            .uri(self.url.as_str());
        for (name, value) in &self.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let request = builder
            .body(Body::from(self.body))
            .map_err(|e| invalid(e.to_string()))?;
        let failed = |e: wstd::http::Error| HttpError::from_wstd(&self.method, &url, &e);
        wstd::runtime::block_on(async {
            let response = Client::new().send(request).await.map_err(failed)?;
            let (parts, mut body) = response.into_parts();
            let body = body.contents().await.map_err(failed)?.to_vec();
            Ok(Response {
                status: parts.status.as_u16(),
                headers: parts
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.as_str().to_string(),
                            String::from_utf8_lossy(v.as_bytes()).into_owned(),
                        )
                    })
                    .collect(),
                body,
            })
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

    fn from_wstd(method: &str, url: &str, e: &wstd::http::Error) -> HttpError {
        // the code is in the chain itself, or inside an I/O error (a body stream's)
        let code = e.chain().find_map(|c| {
            c.downcast_ref::<ErrorCode>().or_else(|| {
                c.downcast_ref::<std::io::Error>()?
                    .get_ref()?
                    .downcast_ref::<ErrorCode>()
            })
        });
        let (kind, what) = match code {
            Some(ErrorCode::HttpRequestDenied) => (
                HttpErrorKind::Denied,
                String::from(
                    "denied: the topic is not granted this host (grants.http in queues.toml), or it resolves to a private address",
                ),
            ),
            Some(ErrorCode::HttpResponseBodySize(size)) => (
                HttpErrorKind::Transport,
                alloc::format!(
                    "the response body{} is over the topic's limit (http.max_response)",
                    size.map(|n| alloc::format!(" ({n} bytes)"))
                        .unwrap_or_default()
                ),
            ),
            Some(ErrorCode::HttpRequestUriInvalid) => {
                (HttpErrorKind::Invalid, String::from("invalid URL"))
            }
            Some(code) => (HttpErrorKind::Transport, describe(code)),
            None => (HttpErrorKind::Transport, alloc::format!("{e:#}")),
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
