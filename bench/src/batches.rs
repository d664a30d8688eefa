//! The `batches` section: what taking jobs in batches saves. The same no-op
//! jobs through one batch handler per language (`handlers/batcher` in Rust,
//! the tests' `py-batch` and `js-batch`, which answer each job of a call) on
//! a topic without `batch` (one job, one fresh instance a call), the same
//! with `reuse` (one instance for many calls), and with `batch = { max = 100
//! }` (a hundred jobs, one fresh instance a call): jobs per second and the
//! runner's CPU per job, each ratio to the topic without `batch` of the same
//! repeat (the "BullMQ" column of those rows holds that figure).

use crate::languages;

/// The cases: a label and the topic's extra lines.
const CASES: [(&str, &str); 3] = [
    ("one job a call", ""),
    ("one job a call, reuse", "reuse = { jobs = 1000 }"),
    ("batch of 100", "batch = { max = 100 }"),
];

impl crate::Bench {
    /// Each case in turn (the order rotating per repeat).
    pub(crate) async fn batches(&mut self, repeat: usize) -> anyhow::Result<()> {
        for (lang, component) in [
            ("rust", test_support::components::BATCHER),
            ("python", test_support::components::PY_BATCH),
            ("javascript", test_support::components::JS_BATCH),
        ] {
            let n = match lang {
                "rust" => self.sizes.throughput / 5,
                _ => self.sizes.languages,
            };
            self.batches_of(lang, component, n, repeat).await?;
        }
        Ok(())
    }

    /// One language's cases.
    async fn batches_of(
        &mut self,
        lang: &str,
        component: &str,
        n: usize,
        repeat: usize,
    ) -> anyhow::Result<()> {
        let mut got = Vec::new();
        for i in 0..CASES.len() {
            let (label, extra) = CASES[(i + repeat) % CASES.len()];
            crate::server::flush(&self.url).await?;
            eprintln!("   batches / {lang} no-op, {label}");
            let p = languages::project_for(&self.url, component, extra)?;
            got.push((label, crate::hourglass::throughput(&p, n).await?));
        }
        let of = |label: &str, key: &str| {
            got.iter()
                .find(|(l, _)| *l == label)
                .and_then(|(_, v)| crate::j(v, key))
        };
        for (label, _) in CASES {
            let against = |key: &str| match label {
                "one job a call" => None,
                _ => of("one job a call", key),
            };
            self.report.record(
                &format!("batches {lang} no-op, {label} processed_per_sec"),
                "jobs/s",
                of(label, "processed_per_sec"),
                against("processed_per_sec"),
            );
            self.report.record(
                &format!("batches {lang} no-op, {label} runner_cpu_us_per_job"),
                "µs",
                of(label, "runner_cpu_us_per_job"),
                against("runner_cpu_us_per_job"),
            );
        }
        Ok(())
    }
}
