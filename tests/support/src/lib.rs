//! Support for the integration tests and the benchmark harness: the handler
//! components built from `handlers/`, throwaway redis-servers (plain,
//! persistent, TLS) and a three-master Redis Cluster, test certificates, and a
//! scripted HTTP server for the outbound-HTTP tests and the demo.

pub mod browser;
pub mod cluster;
pub mod http_client;
pub mod http_server;
pub mod redis_server;
pub mod sentinel;
pub mod tls;

/// Paths of the handler components, built by this crate's build script: the
/// Rust crates of `handlers/` for wasm32-wasip2, and the Python and
/// JavaScript projects (probes and examples) as `hourglass build` does.
pub mod components {
    include!(concat!(env!("OUT_DIR"), "/components.rs"));

    /// Every handler component as (name, path).
    pub const ALL: [(&str, &str); 11] = [
        ("echo", ECHO),
        ("noop", NOOP),
        ("batcher", BATCHER),
        ("checkout", CHECKOUT),
        ("flaky", FLAKY),
        ("order_cancel", ORDER_CANCEL),
        ("slow", SLOW),
        ("panic", PANIC),
        ("membomb", MEMBOMB),
        ("probe", PROBE),
        ("webhook", WEBHOOK),
    ];
}

pub use cluster::RedisCluster;
/// The WebDriver client the dashboard test drives chromium with.
pub use fantoccini;
pub use http_server::{HttpServer, Received, Reply};
/// The Prometheus text parser the metrics tests read `/metrics` with.
pub use prometheus_parse;
pub use redis_server::{RedisServer, free_port};
