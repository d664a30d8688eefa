//! The job pipeline in Redis: the [`hourglass_client`] crate (every script
//! and every call), plus what only a runner needs: opening the connection
//! `queues.toml` describes, and the `url = "embedded"` server it may own.
//!
//! Only this module and `hourglass_client` talk to Redis.

pub mod embedded;
mod open;

pub use hourglass_client::*;
pub use open::{LayoutMismatch, check_layout, connect, connect_any_layout, connect_patiently};
