//! `url = "embedded"`: a local redis-server owned by this process.
//!
//! Data (AOF, fsync every second) and a unix socket live in a project-local
//! folder. If a server already answers on that socket (a runner is up),
//! it is shared; otherwise one is started and stopped (SIGTERM, so it
//! flushes its AOF) when the guard drops.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starting the embedded server failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// redis-server is not installed.
    #[error(
        "`url = \"embedded\"` needs redis-server on PATH ({0}); on Debian: apt-get install redis-server"
    )]
    NotInstalled(std::io::Error),
    /// The data folder could not be made.
    #[error("cannot create the embedded redis data folder {path}: {source}")]
    DataDir {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The server started but never answered.
    #[error("embedded redis-server did not come up within 10s; see {log}")]
    NoAnswer {
        /// Its log file.
        log: PathBuf,
    },
}

/// The embedded server, stopped on drop if this process started it.
#[derive(Debug)]
pub struct EmbeddedRedis {
    url: String,
    child: Option<Child>,
}

impl EmbeddedRedis {
    /// Use the server whose data is in `dir`, starting it if none runs.
    pub fn start(dir: &Path) -> Result<EmbeddedRedis, EmbeddedError> {
        std::fs::create_dir_all(dir).map_err(|source| EmbeddedError::DataDir {
            path: dir.to_owned(),
            source,
        })?;
        let dir = dir
            .canonicalize()
            .map_err(|source| EmbeddedError::DataDir {
                path: dir.to_owned(),
                source,
            })?;
        let socket = dir.join("redis.sock");
        let url = format!("unix://{}", socket.display());
        if answers(&socket) {
            return Ok(EmbeddedRedis { url, child: None });
        }
        let _ = std::fs::remove_file(&socket);
        let log = dir.join("redis.log");
        let child = Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args(["--unixsocketperm", "700", "--dir"])
            .arg(&dir)
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--logfile",
            ])
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(EmbeddedError::NotInstalled)?;
        let mut server = EmbeddedRedis {
            url,
            child: Some(child),
        };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if answers(&socket) {
                return Ok(server);
            }
            if let Some(child) = server.child.as_mut()
                && let Ok(Some(_)) = child.try_wait()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(EmbeddedError::NoAnswer { log })
    }

    /// The URL to connect to.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for EmbeddedRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let _ = child.wait();
        }
    }
}

fn answers(socket: &Path) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 16];
    stream.write_all(b"PING\r\n").is_ok()
        && stream
            .read(&mut buf)
            .map(|n| buf[..n].starts_with(b"+PONG"))
            .unwrap_or(false)
}
