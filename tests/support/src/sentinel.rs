//! A replicated Redis watched by Redis Sentinel, on loopback: a primary, two
//! replicas and three sentinels (quorum 2) that promote a replica within
//! seconds of the primary's death (and point the other at it, so a primary
//! with one replica remains); in the clear, or every link over TLS. Every
//! process is killed on drop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::redis_server::RedisServer;

/// The name the sentinels know the primary by.
pub const MASTER: &str = "mymaster";

/// Passwords, when the set-up asks for AUTH.
#[derive(Debug, Clone, Copy)]
pub struct Passwords {
    /// The primary's and the replica's `requirepass` (and `masterauth`).
    pub redis: &'static str,
    /// The sentinels' own `requirepass`.
    pub sentinel: &'static str,
}

/// A primary, its replica and three sentinels.
pub struct Replicated {
    /// The primary at the start (killed by [`Replicated::kill_primary`]).
    pub primary: RedisServer,
    /// Its replicas; one is promoted when the primary dies.
    pub replicas: Vec<RedisServer>,
    /// The sentinels.
    pub sentinels: Vec<RedisServer>,
    passwords: Option<Passwords>,
    /// The certificates' folder, when every link is TLS.
    tls: Option<PathBuf>,
}

impl Replicated {
    /// Start everything and wait until the replica is in sync and every
    /// sentinel knows it.
    pub fn start(passwords: Option<Passwords>) -> Replicated {
        Replicated::launch(passwords, None)
    }

    /// The same, speaking only TLS: clients to servers and sentinels,
    /// replicas to the primary, sentinels to the servers and to each other,
    /// with the certificates [`crate::tls::write_certificates`] wrote to
    /// `certs` (no client certificates asked for).
    pub fn start_tls(certs: &Path) -> Replicated {
        Replicated::launch(None, Some(certs.to_owned()))
    }

    fn launch(passwords: Option<Passwords>, tls: Option<PathBuf>) -> Replicated {
        let auth: Vec<&str> = match passwords {
            Some(p) => vec!["--requirepass", p.redis, "--masterauth", p.redis],
            None => vec![],
        };
        let base = [
            "--save",
            "",
            "--appendonly",
            "no",
            "--repl-diskless-sync-delay",
            "0",
        ];
        let server = |extra: &[&str]| match &tls {
            Some(certs) => RedisServer::tls(
                certs,
                false,
                &[&base[..], &["--tls-replication", "yes"], extra].concat(),
            ),
            None => RedisServer::start_with(&[&base[..], extra].concat()),
        };
        let primary = server(&auth);
        let replica_of = primary.port.to_string();
        let replicas = (0..2)
            .map(|_| server(&[&auth[..], &["--replicaof", "127.0.0.1", &replica_of]].concat()))
            .collect();
        let setup = Replicated {
            primary,
            replicas,
            sentinels: Vec::new(),
            passwords,
            tls,
        };
        setup.until(Duration::from_secs(20), "the replicas to sync", || {
            setup.replicas.iter().all(|r| {
                setup
                    .cli(r.port, false, &["INFO", "replication"])
                    .contains("master_link_status:up")
            })
        });
        let mut conf = format!(
            "sentinel monitor {MASTER} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 5000\n\
             sentinel parallel-syncs {MASTER} 1\n",
            setup.primary.port
        );
        if let Some(p) = passwords {
            conf.push_str(&format!(
                "sentinel auth-pass {MASTER} {}\nrequirepass {}\n",
                p.redis, p.sentinel
            ));
        }
        if let Some(certs) = &setup.tls {
            let file = |name: &str| certs.join(name).display().to_string();
            conf.push_str(&format!(
                "tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
                 tls-auth-clients no\ntls-replication yes\n",
                file("server.crt"),
                file("server.key"),
                file("ca.crt")
            ));
        }
        let sentinels: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::sentinel(&conf, setup.tls.is_some()))
            .collect();
        let setup = Replicated { sentinels, ..setup };
        setup.until(
            Duration::from_secs(30),
            "every sentinel to know the replicas and the others",
            || {
                setup.sentinels.iter().all(|s| {
                    let master = setup.cli(s.port, true, &["SENTINEL", "MASTER", MASTER]);
                    field(&master, "num-slaves") == Some("2")
                        && field(&master, "num-other-sentinels") == Some("2")
                })
            },
        );
        setup
    }

    /// `redis://[:password@]127.0.0.1:PORT` of every sentinel (`rediss://`
    /// over TLS).
    pub fn sentinel_urls(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        let auth = self
            .passwords
            .map(|p| format!(":{}@", p.sentinel))
            .unwrap_or_default();
        self.sentinels
            .iter()
            .map(|s| format!("{scheme}://{auth}127.0.0.1:{}", s.port))
            .collect()
    }

    /// SIGKILL the primary.
    pub fn kill_primary(&mut self) {
        self.primary.stop();
    }

    /// Wait until a sentinel names a replica as the primary; its port.
    pub fn until_promoted(&self, deadline: Duration) -> u16 {
        let mut promoted = 0;
        self.until(deadline, "the sentinels to promote a replica", || {
            self.sentinels.iter().any(|s| {
                let named = self.cli(
                    s.port,
                    true,
                    &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER],
                );
                match self
                    .replicas
                    .iter()
                    .find(|r| named.lines().any(|l| l.trim() == r.port.to_string()))
                {
                    Some(r) => {
                        promoted = r.port;
                        true
                    }
                    None => false,
                }
            })
        });
        promoted
    }

    /// `redis-cli` against `port` (a sentinel's, or a server's), its output.
    pub fn cli(&self, port: u16, sentinel: bool, args: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-p", &port.to_string()]);
        if let Some(certs) = &self.tls {
            cmd.arg("--tls").arg("--cacert").arg(certs.join("ca.crt"));
        }
        if let Some(p) = self.passwords {
            cmd.args([
                "--no-auth-warning",
                "-a",
                if sentinel { p.sentinel } else { p.redis },
            ]);
        }
        let out = cmd.args(args).output().unwrap_or_else(|e| {
            panic!("cannot run redis-cli ({e}); install it: apt-get install redis-tools")
        });
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn until(&self, deadline: Duration, what: &str, mut ok: impl FnMut() -> bool) {
        let end = Instant::now() + deadline;
        while !ok() {
            assert!(Instant::now() < end, "waited {deadline:?} for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The value after `name` in redis-cli's one-item-per-line output of a map.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == name {
            return lines.next().map(str::trim);
        }
    }
    None
}
