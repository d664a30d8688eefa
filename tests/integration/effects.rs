//! Effects journals (`journal = "effects"`): a plain handler (no SDK steps)
//! retried or killed between two calls to a real local HTTP server sends
//! each call once; clock reads and random bytes come back the same on a
//! retry; a divergence fails the job (or, with `on_divergence = "live"`,
//! goes live); a body over the cap stops the journal; `hourglass journal`
//! and `inspect` list the calls; Python and JavaScript handlers; Redis
//! Cluster.

use std::time::Duration;

use hourglass::events::EventKind;
use hourglass::redis::Queue;
use test_support::HttpServer;

use crate::util::{Api, Running, TOKEN, enqueue};

/// `topics` with the API on a free port.
fn with_api(topics: String) -> String {
    format!("{topics}\n[http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n")
}

/// The runner's /metrics.
async fn metrics(running: &Running) -> String {
    let api = Api(running.http.expect("[http]").to_string());
    let answer = api.get("/metrics").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body
}

/// A topic `t` of `handler` journaling effects, granted `server`, results kept.
fn topic(server: &HttpServer, handler: &str, extra: &str) -> String {
    format!(
        "[[topic]]\nname = \"t\"\nhandler = \"{handler}\"\nmax_attempts = 5\ntimeout = \"5s\"\n\
         backoff = {{ base = \"50ms\", max = \"50ms\", jitter = 0.0 }}\n\
         grants = {{ http = [\"{}\"] }}\nresults = {{ keep = \"1h\" }}\n{extra}\n",
        server.url()
    )
}

/// How many requests the server got for each path, in the order named.
fn hits<const N: usize>(server: &HttpServer, paths: [&str; N]) -> [usize; N] {
    let received = server.received();
    paths.map(|p| received.iter().filter(|r| r.path.starts_with(p)).count())
}

fn calls(server: &HttpServer, paths: &[&str]) -> String {
    let list: Vec<String> = paths
        .iter()
        .map(|p| format!(r#"{{"url": "{}{p}", "body": "{p}"}}"#, server.url()))
        .collect();
    list.join(", ")
}

/// Enqueue `payload` to topic `t` and wait for the job to settle.
async fn run(
    queue: &Queue,
    running: &mut Running,
    payload: &str,
) -> (String, Vec<hourglass::events::Event>) {
    let id = enqueue(queue, "t", payload, 0, 0).await;
    let events = running
        .until_settled("t", &id, Duration::from_secs(60))
        .await;
    (id, events)
}

fn acked_on(events: &[hourglass::events::Event], id: &str) -> Option<u32> {
    events
        .iter()
        .find(|e| e.id == id && e.kind == EventKind::Acked)
        .map(|e| e.attempt)
}

mod divergence;
mod replay;
