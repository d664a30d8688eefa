//! The results: one row per metric with every repeat's value for both
//! contenders; printed as a table of medians and pairwise ratios, and
//! written as JSON after every section so that nothing measured is lost.

use std::collections::BTreeMap;
use std::path::Path;

/// One metric across repeats.
#[derive(Debug, Default, serde::Serialize)]
pub struct Row {
    pub unit: &'static str,
    pub hourglass: Vec<f64>,
    pub bullmq: Vec<f64>,
}

/// Every metric so far, and what failed.
#[derive(Debug, Default)]
pub struct Report {
    pub rows: BTreeMap<String, Row>,
    pub errors: Vec<String>,
}

impl Report {
    /// Add one repeat's values of `key`.
    pub fn record(&mut self, key: &str, unit: &'static str, hg: Option<f64>, bull: Option<f64>) {
        let row = self.rows.entry(key.to_owned()).or_insert_with(|| Row {
            unit,
            ..Row::default()
        });
        row.hourglass.extend(hg);
        row.bullmq.extend(bull);
    }

    /// The table: each metric's medians and the median of the pairwise ratios.
    pub fn print(&self, repeats: usize) {
        println!(
            "{:<44} {:>12} {:>12} {:>10}   (median of {repeats} repeats; ratio = hourglass / BullMQ, pair by pair)",
            "metric", "hourglass", "BullMQ", "ratio"
        );
        for (key, row) in &self.rows {
            let ratios: Vec<f64> = row
                .hourglass
                .iter()
                .zip(&row.bullmq)
                .filter(|(_, b)| **b != 0.0)
                .map(|(h, b)| h / b)
                .collect();
            let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
            let ratio = median(&ratios).map_or("-".to_owned(), |r| format!("{r:.2}×"));
            println!(
                "{:<44} {:>12} {:>12} {:>10}",
                format!("{key} ({})", row.unit),
                show(median(&row.hourglass)),
                show(median(&row.bullmq)),
                ratio
            );
        }
        for e in &self.errors {
            println!("FAILED: {e}");
        }
    }

    /// Write everything so far to `path` as JSON.
    pub fn save(&self, path: &Path, about: serde_json::Value) -> anyhow::Result<()> {
        let mut out = about;
        out["rows"] = serde_json::to_value(&self.rows)?;
        out["errors"] = serde_json::to_value(&self.errors)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
        Ok(())
    }
}

pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(percentile(&s, 50.0))
}

/// The `p`th percentile of sorted `v` (nearest rank).
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * v.len() as f64).floor() as usize;
    v[i.min(v.len() - 1)]
}
