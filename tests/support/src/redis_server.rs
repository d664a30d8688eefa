//! A redis-server on a free loopback port, killed on drop. Persistence is off
//! unless asked for; a persistent server can be stopped and started again on
//! the same port with its data. A missing redis-server is a panic that says
//! how to install it.
//!
//! A free port is only free until someone takes it: every server also listens
//! on a unix socket of its own, and is taken to be up when that socket answers
//! (so a server another test started on the same port is never mistaken for
//! it); one that could not bind its port is started again on another.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running (or stopped) redis-server owned by this guard.
pub struct RedisServer {
    child: Option<Child>,
    args: Vec<String>,
    /// Serves TLS only (on `port`).
    tls: bool,
    /// A configuration file to start with (Sentinel needs one it can rewrite).
    conf: Option<std::path::PathBuf>,
    /// Holds this server's unix socket.
    socket_dir: tempfile::TempDir,
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
}

/// A free TCP port on 127.0.0.1 (free when this returns).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl RedisServer {
    /// Start one with the default settings for tests.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Start one with extra `redis-server` arguments (e.g. `["--maxmemory", "4gb"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let mut args = vec!["--save", "", "--appendonly", "no"];
        args.extend_from_slice(extra);
        RedisServer::on_port(free_port(), &args)
    }

    /// Start one that keeps its data in `dir` in an AOF written and fsynced
    /// before each reply (`appendfsync always`), so a killed server loses
    /// nothing it acknowledged. (With `everysec`, Redis postpones writing
    /// the AOF while a slow fsync is still running, up to 2 s, and answers
    /// meanwhile: a kill then loses acknowledged writes. Seen here on a slow
    /// disk: three acknowledged enqueues and two attempt counters.)
    pub fn persistent(dir: &Path) -> RedisServer {
        let dir = dir.to_str().expect("a UTF-8 path");
        RedisServer::on_port(
            free_port(),
            &[
                "--dir",
                dir,
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
        )
    }

    /// Start one on `port` with exactly these arguments (after port and bind).
    pub fn on_port(port: u16, args: &[&str]) -> RedisServer {
        let mut server = RedisServer {
            child: None,
            args: args.iter().map(|a| a.to_string()).collect(),
            tls: false,
            conf: None,
            socket_dir: tempfile::tempdir().expect("a temporary folder"),
            port,
        };
        server.start_somewhere();
        server
    }

    /// Start a Redis Sentinel with this configuration (written to a file it
    /// may rewrite); with `tls` it listens only on its TLS port (`conf`
    /// names the certificates).
    pub fn sentinel(conf: &str, tls: bool) -> RedisServer {
        let socket_dir = tempfile::tempdir().expect("a temporary folder");
        let file = socket_dir.path().join("sentinel.conf");
        std::fs::write(&file, conf).expect("write sentinel.conf");
        let mut server = RedisServer {
            child: None,
            args: vec!["--sentinel".to_owned()],
            tls,
            conf: Some(file),
            socket_dir,
            port: free_port(),
        };
        server.start_somewhere();
        server
    }

    /// Start one that speaks only TLS, with the certificates
    /// [`crate::tls::write_certificates`] wrote to `certs`; with
    /// `client_certs` it also demands a client certificate. `extra` adds
    /// arguments (e.g. `["--requirepass", "pw"]`).
    pub fn tls(certs: &std::path::Path, client_certs: bool, extra: &[&str]) -> RedisServer {
        let file = |name: &str| certs.join(name).to_str().expect("UTF-8 path").to_owned();
        let mut args = vec![
            "--tls-cert-file".to_owned(),
            file("server.crt"),
            "--tls-key-file".to_owned(),
            file("server.key"),
            "--tls-ca-cert-file".to_owned(),
            file("ca.crt"),
            "--tls-auth-clients".to_owned(),
            if client_certs { "yes" } else { "no" }.to_owned(),
            "--save".to_owned(),
            String::new(),
            "--appendonly".to_owned(),
            "no".to_owned(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let mut server = RedisServer {
            child: None,
            args,
            tls: true,
            conf: None,
            socket_dir: tempfile::tempdir().expect("a temporary folder"),
            port: free_port(),
        };
        server.start_somewhere();
        server
    }

    /// Kill it (SIGKILL, as a crash would). Its port stays reserved for [`RedisServer::resume`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start on `self.port`, or, if another process took that port meanwhile,
    /// on another free port (a few times).
    fn start_somewhere(&mut self) {
        for _ in 0..5 {
            if self.try_start() {
                return;
            }
            self.port = free_port();
        }
        panic!("redis-server could not bind a free port five times in a row");
    }

    /// Start it again on the same port with the same arguments, and wait until it answers.
    pub fn resume(&mut self) {
        assert!(
            self.try_start(),
            "redis-server could not bind port {} again: another process took it",
            self.port
        );
    }

    /// Start on `self.port`; false if it exited because the port was taken.
    fn try_start(&mut self) -> bool {
        assert!(self.child.is_none(), "already running");
        let port = self.port.to_string();
        let listen: [&str; 4] = if self.tls {
            ["--port", "0", "--tls-port", &port]
        } else {
            ["--port", &port, "--bind", "127.0.0.1"]
        };
        let child = Command::new("redis-server")
            .args(&self.conf)
            .args(listen)
            .args(
                self.tls
                    .then_some(["--bind", "127.0.0.1"])
                    .into_iter()
                    .flatten(),
            )
            .arg("--unixsocket")
            .arg(self.socket())
            // its files (a replica's copy of the primary's data) in its own
            // folder, not the test's working directory; `args` may say otherwise
            .arg("--dir")
            .arg(self.socket_dir.path())
            .args(&self.args)
            .stdout(std::fs::File::create(self.log()).expect("a log file"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}); install it: apt-get install redis-server")
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // its own socket answers only once it has bound its port too
            if answers(&self.socket()) {
                return true;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                let log = std::fs::read_to_string(self.log()).unwrap_or_default();
                if log.contains("Address already in use") {
                    return false;
                }
                panic!(
                    "redis-server on port {} exited ({status}):\n{log}",
                    self.port
                );
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not come up",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn socket(&self) -> std::path::PathBuf {
        self.socket_dir.path().join("redis.sock")
    }

    fn log(&self) -> std::path::PathBuf {
        self.socket_dir.path().join("redis.log")
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

/// Whether a redis-server answers PING on the unix socket `path`: PONG, or
/// NOAUTH from one that wants a password (a loading server answers LOADING:
/// not yet).
fn answers(path: &Path) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(path) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 16];
    stream.write_all(b"PING\r\n").is_ok()
        && stream
            .read(&mut buf)
            .map(|n| buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH"))
            .unwrap_or(false)
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_taken_meanwhile_is_not_mistaken_for_ours() {
        // another redis-server holds the port this one is told to use
        let squatter = RedisServer::start();
        let ours = RedisServer::on_port(squatter.port, &["--save", "", "--appendonly", "no"]);
        assert_ne!(ours.port, squatter.port, "it moved to another port");
        assert_ne!(ours.pid(), squatter.pid());
    }
}
