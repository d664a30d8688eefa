//! A local Redis Cluster of three masters (with or without one replica
//! each) on free loopback ports, created with `redis-cli --cluster create`,
//! killed on drop.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::redis_server::{RedisServer, free_port};

/// Three cluster nodes owned by this guard.
pub struct RedisCluster {
    /// The nodes; their state lives in `_dir`.
    pub nodes: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Start three masters and join them into one cluster.
    pub fn start() -> RedisCluster {
        RedisCluster::with_replicas(0)
    }

    /// Three masters with `replicas` replicas each.
    pub fn with_replicas(replicas: usize) -> RedisCluster {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| {
                let port = free_port();
                let conf = dir.path().join(format!("nodes-{port}.conf"));
                RedisServer::on_port(
                    port,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        conf.to_str().unwrap(),
                        "--cluster-node-timeout",
                        "2000",
                        "--dir",
                        dir.path().to_str().unwrap(),
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        // a replica that never synced may not take over
                        "--repl-diskless-sync-delay",
                        "0",
                    ],
                )
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run redis-cli ({e}); install it: apt-get install redis-tools")
            });
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes, _dir: dir };
        cluster.wait_until_ok();
        cluster
    }

    fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        // every replica in sync with its master (one that never synced cannot take over)
        for node in &self.nodes {
            loop {
                let info = self.cli(node.port, &["INFO", "replication"]);
                if info.contains("role:master") || info.contains("master_link_status:up") {
                    break;
                }
                assert!(Instant::now() < deadline, "a replica did not sync:\n{info}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        for node in self.nodes.iter().filter(|n| n.pid().is_some()) {
            loop {
                let out = Command::new("redis-cli")
                    .args(["-p", &node.port.to_string(), "cluster", "info"])
                    .output()
                    .unwrap();
                if String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok") {
                    break;
                }
                assert!(Instant::now() < deadline, "the cluster did not become ok");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The index in `nodes` of the master serving `key`'s slot now.
    pub fn master_of(&self, key: &str) -> usize {
        self.serving(key)
            .unwrap_or_else(|| panic!("no live master serves the slot of {key:?}"))
    }

    fn serving(&self, key: &str) -> Option<usize> {
        let live = self
            .nodes
            .iter()
            .find(|n| n.pid().is_some())
            .expect("a live node");
        let slot = self.cli(live.port, &["CLUSTER", "KEYSLOT", key]);
        let slot: u16 = slot.trim().parse().expect("a slot number");
        let shards = self.cli(live.port, &["CLUSTER", "NODES"]);
        for line in shards.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // id addr flags master ping pong epoch state slots...
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| match range.split_once('-') {
                Some((a, b)) => {
                    (a.parse().unwrap_or(u16::MAX)..=b.parse().unwrap_or(0)).contains(&slot)
                }
                None => range.parse() == Ok(slot),
            });
            if serves {
                let port: u16 = fields[1]
                    .split(['@', ':'])
                    .nth(1)
                    .and_then(|p| p.parse().ok())
                    .expect("host:port@bus");
                return self.nodes.iter().position(|n| n.port == port);
            }
        }
        None
    }

    /// Wait until a master other than `dead` serves `key` and the cluster is ok.
    pub fn until_failed_over(&self, key: &str, dead: usize, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let live = self
                .nodes
                .iter()
                .find(|n| n.pid().is_some())
                .expect("a live node");
            let ok = self
                .cli(live.port, &["CLUSTER", "INFO"])
                .contains("cluster_state:ok");
            if ok
                && let Some(now) = self.serving(key)
                && now != dead
            {
                return now;
            }
            assert!(Instant::now() < deadline, "no failover within {within:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `redis://127.0.0.1:PORT/` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect()
    }
}
