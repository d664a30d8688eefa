//! The throughput sections: both contenders on a clean server by turns, the
//! runner in-process (`throughput`) and as a process (`process`).

use crate::*;

impl crate::Bench {
    /// Both contenders on a clean server, in an order that alternates by repeat
    /// so that warm-up effects fall on both.
    pub(crate) async fn pair(
        &self,
        label: &str,
        repeat: usize,
        hg: impl Future<Output = anyhow::Result<Value>>,
        bull: impl Future<Output = anyhow::Result<Value>>,
    ) -> anyhow::Result<(Value, Option<Value>)> {
        let hg_first = repeat.is_multiple_of(2);
        let (mut hg, mut bull) = (Some(hg), Some(bull));
        let (mut hg_out, mut bull_out) = (None, None);
        for turn in 0..2 {
            server::flush(&self.url).await?;
            if (turn == 0) == hg_first {
                eprintln!("   {label} / hourglass");
                hg_out = Some(hg.take().expect("runs once").await?);
            } else if !self.args.skip_bullmq {
                eprintln!("   {label} / bullmq");
                bull_out = Some(bull.take().expect("runs once").await?);
            }
        }
        Ok((hg_out.expect("hourglass ran"), bull_out))
    }

    /// Record `keys` of both results.
    pub(crate) fn both(
        &mut self,
        prefix: &str,
        keys: &[(&str, &'static str)],
        hg: &Value,
        bull: &Option<Value>,
    ) {
        for (key, unit) in keys {
            self.report.record(
                &format!("{prefix} {key}"),
                unit,
                j(hg, key),
                bull.as_ref().and_then(|b| j(b, key)),
            );
        }
    }

    /// The throughput workload of both contenders once, the results dropped.
    pub(crate) async fn warm_up(&self) -> anyhow::Result<()> {
        let n = self.sizes.throughput;
        self.pair(
            "warm-up",
            0,
            hourglass::throughput(&self.project, n),
            async { bullmq::run("throughput", self.redis.port, serde_json::json!({ "n": n })) },
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn throughput(&mut self, repeat: usize) -> anyhow::Result<()> {
        let n = self.sizes.throughput;
        let (hg, bull) = self
            .pair(
                "throughput",
                repeat,
                with_commands(
                    &self.url,
                    self.redis.pid(),
                    n,
                    hourglass::throughput(&self.project, n),
                ),
                with_commands(&self.url, self.redis.pid(), n, async {
                    bullmq::run("throughput", self.redis.port, serde_json::json!({ "n": n }))
                }),
            )
            .await?;
        self.both(
            "throughput",
            &[
                ("enqueue_per_sec", "jobs/s"),
                ("processed_per_sec", "jobs/s"),
                ("scripts_per_job", "calls"),
                ("commands_per_job", "commands"),
                ("redis_cpu_us_per_job", "µs"),
            ],
            &hg,
            &bull,
        );
        self.report.record(
            "throughput runner_cpu_us_per_job",
            "µs",
            j(&hg, "runner_cpu_us_per_job"),
            None,
        );
        Ok(())
    }

    /// The throughput workload with `hourglass run` as a child process (the
    /// binary users run, default settings, `[http]` on) against BullMQ.
    pub(crate) async fn process(&mut self, repeat: usize) -> anyhow::Result<()> {
        let n = self.sizes.throughput;
        let (hg, bull) = self
            .pair(
                "process mode",
                repeat,
                process::throughput(&self.url, n, &process::Setup::default()),
                async { bullmq::run("throughput", self.redis.port, serde_json::json!({ "n": n })) },
            )
            .await?;
        self.both(
            "process mode",
            &[("processed_per_sec", "jobs/s")],
            &hg,
            &bull,
        );
        self.report.record(
            "process mode runner_cpu_us_per_job",
            "µs",
            j(&hg, "runner_cpu_us_per_job"),
            None,
        );
        Ok(())
    }
}
