//! A redis-server on a free loopback port, persistence off, killed on drop.
//! A missing redis-server is a panic that says how to install it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running redis-server owned by this guard.
pub struct RedisServer {
    child: Child,
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
}

impl RedisServer {
    /// Start one with the default settings for tests.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Start one with extra `redis-server` arguments (e.g. `["--maxmemory", "4gb"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}); install it: apt-get install redis-server")
            });
        let server = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {port} did not come up"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
