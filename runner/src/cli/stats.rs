//! `hourglass stats`: per-topic counts, once or refreshed every second.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use super::{Failure, load_producer_config};
use crate::clock::now_ms;
use crate::redis::connect;

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// Refresh every second until interrupted.
    #[arg(long)]
    watch: bool,
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "watch")]
    json: bool,
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Failure> {
    let config = load_producer_config(config)?;
    let (queue, _embedded) = connect(&config).await?;
    loop {
        let now = now_ms();
        let mut rows = Vec::new();
        for topic in &config.topics {
            rows.push((
                topic.name.clone(),
                queue.stats(&queue.keys(&topic.name), now).await?,
            ));
        }
        if args.json {
            let map: serde_json::Map<String, serde_json::Value> = rows
                .into_iter()
                .map(|(n, s)| (n, serde_json::to_value(s).expect("stats serialize")))
                .collect();
            println!("{}", serde_json::Value::Object(map));
            return Ok(());
        }
        let mut out = String::new();
        if args.watch {
            out.push_str("\x1b[2J\x1b[H");
        }
        out.push_str(&format!(
            "{:<24} {:>10} {:>10} {:>10} {:>10}\n",
            "TOPIC", "SCHEDULED", "READY", "RUNNING", "DEAD"
        ));
        for (name, s) in rows {
            let paused = if s.paused { "  (paused)" } else { "" };
            out.push_str(&format!(
                "{name:<24} {:>10} {:>10} {:>10} {:>10}{paused}\n",
                s.scheduled, s.ready, s.running, s.dead
            ));
        }
        print!("{out}");
        let _ = std::io::stdout().flush();
        if !args.watch {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
