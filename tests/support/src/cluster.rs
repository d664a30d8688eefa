//! A local Redis Cluster of three masters (no replicas) on free loopback
//! ports, created with `redis-cli --cluster create`, killed on drop.

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
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<RedisServer> = (0..3)
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
            .args(["--cluster-replicas", "0", "--cluster-yes"])
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
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &self.nodes {
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

    /// `redis://127.0.0.1:PORT/` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect()
    }
}
