//! Redis's side: a Cluster, replica-confirmed writes (`durability`), and
//! how claims scale with the jobs waiting (`scaling`).

use crate::*;

impl crate::Bench {
    /// Hourglass alone: one server vs a 3-master cluster, 8 topics.
    pub(crate) async fn cluster(&mut self) -> anyhow::Result<()> {
        let cluster = test_support::RedisCluster::start();
        let topics = 8;
        let single = Endpoint::url(&self.url);
        let multi = Endpoint::cluster(cluster.urls());
        for r in 0..self.args.repeats {
            eprintln!("== cluster {}/{}", r + 1, self.args.repeats);
            server::flush(&self.url).await?;
            let one = hourglass::spread(&single, topics, self.sizes.throughput, "").await?;
            let three = hourglass::spread(&multi, topics, self.sizes.throughput, "").await?;
            let r = &mut self.report;
            r.record("cluster one_node_per_sec", "jobs/s", Some(one), None);
            r.record("cluster three_masters_per_sec", "jobs/s", Some(three), None);
            r.record("cluster ratio_three_to_one", "×", Some(three / one), None);
        }
        Ok(())
    }

    /// Hourglass alone, on a primary with one replica: the no-op workload
    /// with `[redis] durability = { replicas = 1 }` and without, alternating.
    pub(crate) async fn durability(&mut self) -> anyhow::Result<()> {
        let primary = test_support::RedisServer::start();
        let port = primary.port.to_string();
        let _replica = test_support::RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let url = primary.url();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while server::info(&url, "replication", "connected_slaves").await? < 1.0 {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the replica did not connect"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let endpoint = Endpoint::url(&url);
        let durable = "durability = { replicas = 1, timeout = \"1s\" }";
        for r in 0..self.args.repeats {
            eprintln!("== durability {}/{}", r + 1, self.args.repeats);
            server::flush(&url).await?;
            let off = hourglass::spread(&endpoint, 1, self.sizes.throughput, "").await?;
            server::flush(&url).await?;
            let on = hourglass::spread(&endpoint, 1, self.sizes.throughput, durable).await?;
            let r = &mut self.report;
            r.record("durability off_per_sec", "jobs/s", Some(off), None);
            r.record("durability on_per_sec", "jobs/s", Some(on), None);
            r.record("durability ratio_on_to_off", "×", Some(on / off), None);
        }
        Ok(())
    }

    /// Enqueue, claim and ack on a topic holding `size` scheduled jobs,
    /// round after round, each beside the same steps on a topic holding
    /// 10,000 in the same Redis (in alternating order): this host's speed
    /// drifts by a third between minutes, so the growth is read as the
    /// ratio of the two within each round; BullMQ once per size.
    pub(crate) async fn scaling(&mut self, size: usize) -> anyhow::Result<()> {
        eprintln!("== scaling with {size} scheduled");
        let n = self.sizes.scale;
        let bull = if self.args.skip_bullmq || size > self.args.bullmq_max_size {
            None
        } else {
            server::flush(&self.url).await?;
            Some(bullmq::run(
                "enqueue",
                self.redis.port,
                serde_json::json!({ "n": n, "prefill": size }),
            )?)
        };
        server::flush(&self.url).await?;
        hourglass::prefill(&self.project, SCALING_BESIDE, SCALING_BASE).await?;
        hourglass::prefill(&self.project, hourglass::TOPIC, size).await?;
        let keys = [
            ("enqueue_us_per_job", "µs"),
            ("claim_us_per_job", "µs"),
            ("ack_us_per_job", "µs"),
        ];
        for round in 0..self.args.repeats {
            let mut order = [hourglass::TOPIC, SCALING_BESIDE];
            if round % 2 == 1 {
                order.reverse();
            }
            let mut measured = Vec::new();
            for topic in order {
                measured.push((
                    topic,
                    hourglass::scaling_round(&self.project, topic, n).await?,
                ));
            }
            let of = |topic: &str, key: &str| {
                measured
                    .iter()
                    .find(|m| m.0 == topic)
                    .and_then(|m| j(&m.1, key))
            };
            for (key, unit) in keys {
                let big = of(hourglass::TOPIC, key);
                self.report.record(
                    &format!("scaling {key} @{size}"),
                    unit,
                    big,
                    bull.as_ref().filter(|_| round == 0).and_then(|b| j(b, key)),
                );
                let ratio = big.zip(of(SCALING_BESIDE, key)).map(|(b, s)| b / s);
                self.report.record(
                    &format!("scaling {key} @{size} to 10k beside it"),
                    "×",
                    ratio,
                    None,
                );
            }
        }
        Ok(())
    }
}
