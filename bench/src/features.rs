//! What a feature costs when on against off: tracing (`telemetry`), the CPU
//! limit, a job's kept logs and story (`logs`), outbound HTTP (`http`).

use crate::*;

impl crate::Bench {
    /// hourglass alone, in process mode: the no-op workload with spans
    /// exported (every job carrying a producer's `traceparent`, an OTLP
    /// receiver in this process) and without, alternating.
    pub(crate) async fn telemetry(&mut self, repeat: usize) -> anyhow::Result<()> {
        let n = self.sizes.throughput;
        let receiver = test_support::http_server::HttpServer::start(vec![
            test_support::http_server::Reply::status(200, "")
                .with_header("content-type", "application/x-protobuf"),
        ]);
        let on = process::Setup {
            toml: format!("[telemetry]\nendpoint = \"{}\"\n", receiver.url()),
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            ..Default::default()
        };
        let runs = self
            .on_and_off("telemetry", repeat, &process::Setup::default(), &on)
            .await?;
        let get = |label: &str, key: &str| {
            runs.iter()
                .find(|r| r.0 == label)
                .and_then(|r| j(&r.1, key))
        };
        let spans = spans_received(&receiver);
        let r = &mut self.report;
        r.record(
            "telemetry spans_received_per_job",
            "spans",
            Some(spans as f64 / n as f64),
            None,
        );
        r.record(
            "telemetry spans_dropped_per_job",
            "spans",
            get("on", "spans_dropped").map(|d| d / n as f64),
            None,
        );
        Ok(())
    }

    /// hourglass alone, in process mode: the no-op workload on a topic with
    /// a `cpu` limit (checked at every epoch tick) and without, alternating.
    pub(crate) async fn cpu_limit(&mut self, repeat: usize) -> anyhow::Result<()> {
        let on = process::Setup {
            toml: "[defaults]\ncpu = \"500ms\"\n".into(),
            ..Default::default()
        };
        self.on_and_off("cpu limit", repeat, &process::Setup::default(), &on)
            .await?;
        Ok(())
    }

    /// What a job's kept story and logs cost, in process mode, alternating:
    /// the no-op with `logs = false` in `[defaults]` against the default
    /// (logs kept; the no-op logs nothing, so this is what a topic that
    /// keeps none pays); then the probe handler keeping its end (`results`)
    /// with its one-attempt story, logging nothing against logging one
    /// 80-byte line a job: runner and Redis CPU per job and the bytes Redis
    /// holds per kept job.
    pub(crate) async fn logs(&mut self, repeat: usize) -> anyhow::Result<()> {
        let off = process::Setup {
            toml: "[defaults]\nlogs = false\n".into(),
            ..Default::default()
        };
        self.on_and_off("logs no-op", repeat, &off, &process::Setup::default())
            .await?;
        let kept = |payload: &[u8]| process::Setup {
            toml: "[defaults]\nresults = { keep = \"1h\" }\n".into(),
            handler: Some(test_support::components::PROBE),
            payload: Some(payload.to_vec()),
            redis_pid: self.redis.pid(),
            ..Default::default()
        };
        let (quiet, logged) = (kept(b"{}"), kept(br#"{"log":{"lines":1,"bytes":80}}"#));
        let runs = self
            .on_and_off("logs kept", repeat, &quiet, &logged)
            .await?;
        for (label, run) in &runs {
            for (key, unit) in [("redis_cpu_us_per_job", "µs"), ("redis_bytes_per_job", "B")] {
                self.report
                    .record(&format!("logs kept {label} {key}"), unit, j(run, key), None);
            }
        }
        Ok(())
    }

    /// The process-mode no-op workload with `off` and with `on`, in an order
    /// that alternates by repeat; records each one's jobs/s and runner CPU
    /// per job and their ratio as `{name} ...`, and returns both results.
    pub(crate) async fn on_and_off(
        &mut self,
        name: &str,
        repeat: usize,
        off: &process::Setup,
        on: &process::Setup,
    ) -> anyhow::Result<Vec<(&'static str, Value)>> {
        let n = self.sizes.throughput;
        let mut order = [("off", off), ("on", on)];
        if repeat % 2 == 1 {
            order.reverse();
        }
        let mut runs = Vec::new();
        for (label, setup) in order {
            server::flush(&self.url).await?;
            eprintln!("   {name} {label}");
            runs.push((label, process::throughput(&self.url, n, setup).await?));
        }
        let get = |label: &str, key: &str| {
            runs.iter()
                .find(|r| r.0 == label)
                .and_then(|r| j(&r.1, key))
        };
        let r = &mut self.report;
        for label in ["off", "on"] {
            r.record(
                &format!("{name} {label}_per_sec"),
                "jobs/s",
                get(label, "processed_per_sec"),
                None,
            );
            r.record(
                &format!("{name} {label} runner_cpu_us_per_job"),
                "µs",
                get(label, "runner_cpu_us_per_job"),
                None,
            );
        }
        if let (Some(on), Some(off)) = (
            get("on", "processed_per_sec"),
            get("off", "processed_per_sec"),
        ) {
            r.record(
                &format!("{name} ratio_on_to_off"),
                "×",
                Some(on / off),
                None,
            );
        }
        Ok(runs)
    }

    /// hourglass alone: no-op jobs whose handler makes one loopback HTTP call.
    pub(crate) async fn http_call(&mut self) -> anyhow::Result<()> {
        server::flush(&self.url).await?;
        let hg = hourglass::http_call(&self.url, self.sizes.http).await?;
        self.report.record(
            "http processed_per_sec (one loopback GET per job)",
            "jobs/s",
            j(&hg, "processed_per_sec"),
            None,
        );
        self.report.record(
            "http runner_cpu_us_per_job",
            "µs",
            j(&hg, "runner_cpu_us_per_job"),
            None,
        );
        Ok(())
    }
}
