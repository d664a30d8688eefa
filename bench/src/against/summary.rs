//! The cost guard's tables: each round's ratios, the medians, and the
//! machine they were measured on.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::Round;
use crate::j;

/// A round's ratios: each build to BullMQ (jobs/s), this build to REV's.
pub(super) fn ratios(round: &Round) -> serde_json::Map<String, Value> {
    let get = |who: usize, key: &str| round.results[who].as_ref().and_then(|v| j(v, key));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    };
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: Option<f64>| {
        if let Some(v) = v {
            m.insert(k.to_owned(), v.into());
        }
    };
    let tput = "processed_per_sec";
    put("this_to_bullmq", ratio(get(0, tput), get(2, tput)));
    put("against_to_bullmq", ratio(get(1, tput), get(2, tput)));
    for key in [
        tput,
        "runner_cpu_us_per_job",
        "redis_cpu_us_per_job",
        "redis_drain_cpu_us_per_job",
    ] {
        put(
            &format!("this_to_against_{key}"),
            ratio(get(0, key), get(1, key)),
        );
    }
    m
}

/// The median: the middle value, or the mean of the two middle ones (six
/// rounds by default; `report::median` takes the upper one).
pub(super) fn median(v: &[f64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(s[n / 2]),
        _ => Some((s[n / 2 - 1] + s[n / 2]) / 2.0),
    }
}

pub(super) fn medians(rounds: &[Round], who: usize, key: &str) -> Option<f64> {
    let v: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r.results[who].as_ref().and_then(|v| j(v, key)))
        .collect();
    median(&v)
}

/// The table's rows: each contender's jobs/s, its ratio to BullMQ's, the
/// runner's and Redis's CPU per job.
pub(super) fn print_rows(labels: &[String; 3], get: impl Fn(usize, &str) -> Option<f64>) {
    let width = labels.iter().map(String::len).max().unwrap_or(0);
    println!(
        "  {:<width$} {:>10} {:>9} {:>15} {:>14}",
        "", "jobs/s", "×BullMQ", "runner µs/job", "Redis µs/job"
    );
    let bull = get(2, "processed_per_sec");
    for (who, label) in labels.iter().enumerate() {
        let tput = get(who, "processed_per_sec");
        if tput.is_none() {
            continue;
        }
        let to_bull = match (who, tput, bull) {
            (0 | 1, Some(t), Some(b)) if b != 0.0 => format!("{:.2}", t / b),
            _ => "-".to_owned(),
        };
        let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        println!(
            "  {label:<width$} {:>10} {to_bull:>9} {:>15} {:>14}",
            tput.map_or("-".to_owned(), thousands),
            show(get(who, "runner_cpu_us_per_job")),
            show(get(who, "redis_cpu_us_per_job")),
        );
    }
}

pub(super) fn times(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.3}×"))
}

/// 12345.6 as "12,346".
pub(super) fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

/// `lscpu`'s fields (`lscpu -J`, nested fields flattened), keys without
/// the colon; the CPU model from /proc/cpuinfo when lscpu is missing.
pub fn lscpu() -> Value {
    fn flatten(items: &[Value], out: &mut serde_json::Map<String, Value>) {
        for item in items {
            if let (Some(field), Some(data)) = (
                item.get("field").and_then(Value::as_str),
                item.get("data").and_then(Value::as_str),
            ) {
                out.entry(field.trim_end_matches(':').to_owned())
                    .or_insert_with(|| data.into());
            }
            if let Some(children) = item.get("children").and_then(Value::as_array) {
                flatten(children, out);
            }
        }
    }
    let parsed = std::process::Command::new("lscpu")
        .arg("-J")
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok());
    let mut out = serde_json::Map::new();
    match parsed
        .as_ref()
        .and_then(|v| v.get("lscpu"))
        .and_then(Value::as_array)
    {
        Some(items) => flatten(items, &mut out),
        None => {
            out.insert("Model name".into(), crate::machine().into());
        }
    }
    Value::Object(out)
}

/// Where the results go by default: `bench/results/against-<short>-<date>.json`,
/// with -2, -3... when a run of the same day is there.
pub fn default_json(sha: &str, date: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let short = sha.get(..7).unwrap_or(sha);
    let day = date.get(..10).unwrap_or(date);
    let mut path = dir.join(format!("against-{short}-{day}.json"));
    let mut k = 2;
    while path.exists() {
        path = dir.join(format!("against-{short}-{day}-{k}.json"));
        k += 1;
    }
    path
}
