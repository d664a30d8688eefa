//! The runtime's own costs: swapping a handler's version under load
//! (`swap`), lateness, memory per job, `/metrics`, a fresh instance.

use crate::*;

impl crate::Bench {
    /// Live replacements under load: rename → first attempt on the new version.
    pub(crate) async fn swap(&mut self) -> anyhow::Result<()> {
        let (small, big) = self.sizes.swaps;
        let (echo, python) = (
            test_support::components::ECHO,
            test_support::components::PY_PROBE,
        );
        for (label, component, swaps, precompiled) in [
            ("rust echo (100 KB)", echo, small, false),
            ("python probe (19 MB)", python, big, false),
            (
                "python probe (19 MB), precompiled by hourglass build",
                python,
                big,
                true,
            ),
        ] {
            server::flush(&self.url).await?;
            eprintln!("== swap {label} x{swaps}");
            let took = languages::swap(&self.url, component, swaps, precompiled).await?;
            let worst = took.iter().copied().fold(0.0, f64::max);
            self.report.record(
                &format!("swap {label}: rename to serving, worst of {swaps}"),
                "s",
                Some(worst),
                None,
            );
            for t in took {
                self.report.record(
                    &format!("swap {label}: rename to serving"),
                    "s",
                    Some(t),
                    None,
                );
            }
        }
        Ok(())
    }

    pub(crate) async fn lateness(&mut self, repeat: usize) -> anyhow::Result<()> {
        let (n, spread) = (self.sizes.late, self.sizes.spread);
        let lead = Duration::from_secs(1);
        let args = serde_json::json!({ "n": n, "spread_ms": spread.as_millis() as u64, "lead_ms": lead.as_millis() as u64 });
        let (hg, bull) = self
            .pair(
                "lateness",
                repeat,
                hourglass::lateness(&self.project, n, spread, lead),
                async { bullmq::run("lateness", self.redis.port, args.clone()) },
            )
            .await?;
        self.both(
            "lateness",
            &[
                ("p50_ms", "ms"),
                ("p99_ms", "ms"),
                ("max_ms", "ms"),
                ("early", "jobs"),
            ],
            &hg,
            &bull,
        );
        Ok(())
    }

    pub(crate) async fn memory(&mut self, repeat: usize) -> anyhow::Result<()> {
        let n = self.sizes.memory;
        let (hg, bull) = self
            .pair(
                "memory",
                repeat,
                hourglass::memory(&self.project, n),
                async { bullmq::run("memory", self.redis.port, serde_json::json!({ "n": n })) },
            )
            .await?;
        self.both("memory", &[("bytes_per_job", "bytes")], &hg, &bull);
        Ok(())
    }

    /// The operators' window with 100 topics: a scrape's and the dashboard's latency.
    pub(crate) async fn metrics(&mut self) -> anyhow::Result<()> {
        server::flush(&self.url).await?;
        let samples = if self.args.quick { 3 } else { 10 };
        let hg = hourglass::scrape(&self.url, 100, samples).await?;
        for (key, name) in [
            (
                "scrape_fresh_ms",
                "metrics /metrics scrape reading Redis, 100 topics",
            ),
            (
                "scrape_cached_ms",
                "metrics /metrics scrape from the 1 s cache, 100 topics",
            ),
            ("api_topics_ms", "metrics GET /api/topics, 100 topics"),
        ] {
            self.report.record(name, "ms", j(&hg, key), None);
        }
        Ok(())
    }

    /// Each language's no-op job in a fresh instance after another, then in
    /// one reused instance (`reuse`), no Redis: the host's cost per job.
    pub(crate) async fn instance(&mut self) -> anyhow::Result<()> {
        let cache = self.args.compile_cache.clone();
        for (label, component) in self.no_ops() {
            let n = match label {
                "rust" => self.sizes.instance,
                _ => self.sizes.instance / 20,
            };
            for (reuse, key) in [
                (false, "host fresh_instance_us_per_job"),
                (true, "host reused_instance_us_per_job"),
            ] {
                let key = match (label, reuse) {
                    ("rust", false) => key.to_owned(), // the name of earlier runs
                    _ => format!("{key} {label}"),
                };
                let hg = hourglass::instance(&component, n, reuse, cache.as_deref()).await?;
                self.report.record(&key, "µs", j(&hg, "us_per_job"), None);
            }
        }
        Ok(())
    }

    /// The no-op handler per language (`languages::NO_OPS`), or only the one
    /// --language names (with --component's instead of its own).
    pub(crate) fn no_ops(&self) -> Vec<(&'static str, String)> {
        languages::NO_OPS
            .iter()
            .filter(|(label, _)| self.args.language.as_deref().is_none_or(|l| l == *label))
            .map(|(label, component)| {
                let component = match &self.args.component {
                    Some(path) => path.display().to_string(),
                    None => component.to_string(),
                };
                (*label, component)
            })
            .collect()
    }
}
