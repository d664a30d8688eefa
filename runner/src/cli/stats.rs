//! `hourglass stats`: per-topic counts from Redis, and what the live runners
//! report (done and failed per second, lateness of recent attempts); once, or
//! refreshed every second with `--watch`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use super::{Exit, load_producer_config};
use crate::clock::now_ms;
use crate::redis::{RunnerInfo, connect};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "DONE/s and FAILED/s come from the runners' heartbeats (every 2 s), so \
    --watch shows them from its second refresh on; LATE is due -> start of each runner's \
    most recent attempts (the worst runner's figure)."
)]
pub(super) struct Args {
    /// Refresh every second until interrupted, with rates.
    #[arg(long)]
    watch: bool,
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "watch")]
    json: bool,
    /// Per tenant key of this topic instead (a topic with `fairness`): jobs
    /// queued, running, CPU of the last minute, paused, weight; the top keys
    /// by CPU and by jobs queued, and the rest as "other".
    #[arg(long, value_name = "TOPIC", conflicts_with = "watch")]
    by_key: Option<String>,
    /// With --by-key: how many keys of each top list.
    #[arg(long, default_value_t = 10, requires = "by_key", value_parser = clap::value_parser!(u16).range(1..=1000))]
    top: u16,
}

/// Topic → (done, failed) so far, as one runner reported them.
type Totals = BTreeMap<String, (u64, u64)>;

/// Per runner: its last heartbeat time, its totals per topic, and the rates
/// last computed from two of its heartbeats.
#[derive(Default)]
struct Rates {
    seen: HashMap<String, (u64, Totals)>,
    rates: HashMap<String, BTreeMap<String, (f64, f64)>>,
}

impl Rates {
    /// Take in the runners' latest heartbeats.
    fn update(&mut self, runners: &[RunnerInfo]) {
        for r in runners {
            let totals: Totals = r
                .meters
                .iter()
                .map(|(t, m)| (t.clone(), (m.done, m.failed)))
                .collect();
            if let Some((at, before)) = self.seen.get(&r.id)
                && r.seen_at_ms > *at
            {
                let secs = (r.seen_at_ms - at) as f64 / 1000.0;
                let rates = totals
                    .iter()
                    .map(|(t, (done, failed))| {
                        let (d0, f0) = before.get(t).copied().unwrap_or_default();
                        let per = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
                        (t.clone(), (per(*done, d0), per(*failed, f0)))
                    })
                    .collect();
                self.rates.insert(r.id.clone(), rates);
            }
            if self
                .seen
                .get(&r.id)
                .is_none_or(|(at, _)| r.seen_at_ms > *at)
            {
                self.seen.insert(r.id.clone(), (r.seen_at_ms, totals));
            }
        }
        let alive: BTreeSet<&String> = runners.iter().map(|r| &r.id).collect();
        self.seen.retain(|id, _| alive.contains(id));
        self.rates.retain(|id, _| alive.contains(id));
    }

    /// Done and failed per second for `topic`, over all live runners; none
    /// until two heartbeats of a runner were seen.
    fn of(&self, topic: &str) -> Option<(f64, f64)> {
        let mut known = false;
        let (mut done, mut failed) = (0.0, 0.0);
        for per_topic in self.rates.values() {
            known = true;
            if let Some((d, f)) = per_topic.get(topic) {
                done += d;
                failed += f;
            }
        }
        known.then_some((done, failed))
    }
}

/// The worst (largest) p50 and p99 lateness the runners report for `topic`.
fn lateness(runners: &[RunnerInfo], topic: &str) -> (Option<u64>, Option<u64>) {
    let meters = runners.iter().filter_map(|r| r.meters.get(topic));
    meters.fold((None, None), |(p50, p99), m| {
        (p50.max(m.late_p50_ms), p99.max(m.late_p99_ms))
    })
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    if let Some(topic) = &args.by_key {
        return super::keys::stats(&config, topic, usize::from(args.top), args.json).await;
    }
    let (queue, _embedded) = connect(&config).await?;
    let mut rates = Rates::default();
    loop {
        let now = now_ms();
        let runners = queue.runners().list(now).await?;
        rates.update(&runners);
        // the configured topics, and any a live runner serves
        let mut topics: Vec<String> = config.topics.iter().map(|t| t.name.clone()).collect();
        for r in &runners {
            for t in &r.topics {
                if !topics.contains(t) {
                    topics.push(t.clone());
                }
            }
        }
        let mut rows = Vec::new();
        for topic in &topics {
            rows.push((topic.clone(), queue.stats(&queue.keys(topic), now).await?));
        }
        if args.json {
            let map: serde_json::Map<String, serde_json::Value> = rows
                .into_iter()
                .map(|(n, s)| {
                    let mut v = serde_json::to_value(s).expect("stats serialize");
                    let (p50, p99) = lateness(&runners, &n);
                    v["late_p50_ms"] = p50.into();
                    v["late_p99_ms"] = p99.into();
                    (n, v)
                })
                .collect();
            println!("{}", serde_json::Value::Object(map));
            return Ok(());
        }
        let mut out = String::new();
        if args.watch {
            out.push_str("\x1b[2J\x1b[H");
        }
        out.push_str(&format!(
            "{:<24} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>9} {:>9} {:>13}\n",
            "TOPIC",
            "SCHEDULED",
            "READY",
            "RUNNING",
            "DEAD",
            "SUSPENDED",
            "EXPIRED",
            "DONE/s",
            "FAILED/s",
            "LATE p50/p99"
        ));
        for (name, s) in rows {
            let paused = if s.paused { "  (paused)" } else { "" };
            let (done, failed) = match rates.of(&name) {
                Some((d, f)) => (format!("{d:.1}"), format!("{f:.1}")),
                None => ("-".into(), "-".into()),
            };
            let late = match lateness(&runners, &name) {
                (Some(p50), Some(p99)) => format!("{p50}/{p99} ms"),
                _ => "-".into(),
            };
            out.push_str(&format!(
                "{name:<24} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {done:>9} {failed:>9} {late:>13}{paused}\n",
                s.scheduled, s.ready, s.running, s.dead, s.suspended, s.expired
            ));
        }
        match runners.len() {
            0 => out.push_str("no runner alive (rates and lateness come from runners)\n"),
            n => out.push_str(&format!(
                "{n} runner(s) alive: hourglass runners lists them\n"
            )),
        }
        print!("{out}");
        let _ = std::io::stdout().flush();
        if !args.watch {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::TopicMeter;

    fn runner(id: &str, seen: u64, done: u64, failed: u64) -> RunnerInfo {
        RunnerInfo {
            id: id.into(),
            host: "h".into(),
            pid: 1,
            version: "0".into(),
            started_at_ms: 0,
            seen_at_ms: seen,
            topics: vec!["t".into()],
            in_flight: 0,
            handlers: BTreeMap::new(),
            meters: [(
                "t".to_owned(),
                TopicMeter {
                    done,
                    failed,
                    late_p50_ms: Some(1),
                    late_p99_ms: Some(seen / 1000),
                    ..TopicMeter::default()
                },
            )]
            .into(),
            missing: Vec::new(),
        }
    }

    #[test]
    fn rates_come_from_two_heartbeats_of_each_runner_and_add_up() {
        let mut r = Rates::default();
        r.update(&[runner("a", 1000, 0, 0), runner("b", 1000, 0, 0)]);
        assert_eq!(r.of("t"), None, "one heartbeat each: no rate yet");
        r.update(&[runner("a", 3000, 200, 20), runner("b", 3000, 100, 0)]);
        assert_eq!(r.of("t"), Some((150.0, 10.0)));
        // the same heartbeat seen again changes nothing
        r.update(&[runner("a", 3000, 200, 20), runner("b", 3000, 100, 0)]);
        assert_eq!(r.of("t"), Some((150.0, 10.0)));
        // a runner gone is no longer counted
        r.update(&[runner("a", 5000, 400, 20)]);
        assert_eq!(r.of("t"), Some((100.0, 0.0)));
        let runners = [runner("a", 5000, 0, 0), runner("b", 9000, 0, 0)];
        assert_eq!(lateness(&runners, "t"), (Some(1), Some(9)));
    }
}
