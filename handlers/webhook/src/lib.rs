//! Delivers a webhook until it works. The payload names the URL and the body:
//!
//! ```json
//! {"url": "https://hooks.example.com/orders", "body": {"order": 1042}, "headers": {"x-signature": "..."}}
//! ```
//!
//! `body` is sent as JSON (a JSON string is sent as it is, as text); `method`
//! defaults to POST. What the answer means:
//! - 2xx: delivered, ack;
//! - 408, 429 and 5xx: retry, after `Retry-After` seconds when the receiver
//!   says so, else after the topic's backoff;
//! - a connection error (refused, timed out, TLS) or a host the topic is not
//!   granted: retry (the error is the recorded reason);
//! - any other status: fail for good, with the status and the start of the
//!   body as the reason.

use std::collections::BTreeMap;

use hourglass_sdk::{Job, Outcome, http, info};

#[derive(serde::Deserialize)]
struct Webhook {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: serde_json::Value,
}

/// How much of a refusing receiver's body goes into the reason.
const EXCERPT: usize = 200;

fn deliver(job: Job) -> hourglass_sdk::Result<Outcome> {
    let hook: Webhook = job.json()?;
    let mut request = http::Request::new(hook.method.as_deref().unwrap_or("POST"), &hook.url);
    for (name, value) in &hook.headers {
        request = request.header(name, value);
    }
    request = match &hook.body {
        serde_json::Value::Null => request,
        serde_json::Value::String(text) => request.body(text.as_str()),
        json => request.json(json),
    };
    let response = request.send()?;
    let status = response.status();
    Ok(match status {
        200..=299 => {
            info!("delivered to {} on attempt {}: {status}", hook.url, job.attempt());
            Outcome::Ack
        }
        408 | 429 | 500..=599 => {
            let reason = format!("{} answered {status}", hook.url);
            match response.retry_after() {
                Some(wait) => Outcome::retry_in(wait, format!("{reason}, retry after {}s", wait.as_secs())),
                None => Outcome::retry(reason),
            }
        }
        _ => {
            let text = response.text();
            let excerpt: String = text.chars().take(EXCERPT).collect();
            let more = if text.chars().count() > EXCERPT { "…" } else { "" };
            Outcome::fail(format!("{} answered {status}: {excerpt}{more}", hook.url))
        }
    })
}

hourglass_sdk::handler!(deliver);
