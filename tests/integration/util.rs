//! Shared test helpers. A missing redis-server is a failure, never a skip.

pub use test_support::RedisServer;

mod probes;
mod process;
mod project;
mod running;

pub use probes::*;
pub use process::*;
pub use project::*;
pub use running::*;
