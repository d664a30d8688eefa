//! `hourglass runners`: the runners alive now (those whose last heartbeat is
//! younger than its time to live), with what they serve and run.

use std::path::Path;

use super::when::when;
use super::{Exit, load_producer_config};
use crate::clock::now_ms;
use crate::redis::connect;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "A runner says it is alive every 2 s and counts as alive for 6 s: \
    one killed with SIGKILL drops out of the list within 6 s; one stopped gracefully at once."
)]
pub(super) struct Args {
    /// Print one JSON object per runner instead of a table.
    #[arg(long)]
    json: bool,
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    let (queue, _embedded) = connect(&config).await?;
    let now = now_ms();
    let runners = queue.runners().list(now).await?;
    if args.json {
        for r in &runners {
            println!(
                "{}",
                serde_json::to_string(r).expect("runner info serializes")
            );
        }
        return Ok(());
    }
    match runners.len() {
        0 => println!("no runner alive"),
        1 => println!("1 runner alive"),
        n => println!("{n} runners alive"),
    }
    for r in &runners {
        println!("{}", r.id);
        println!("  host {}, pid {}, hourglass {}", r.host, r.pid, r.version);
        println!("  started {}", when(r.started_at_ms, now));
        println!("  last seen {}", when(r.seen_at_ms, now));
        println!("  running {} attempts", r.in_flight);
        for topic in &r.topics {
            let version = r.handlers.get(topic).map_or("(no handler)", String::as_str);
            println!("  topic {topic}: handler {version}");
        }
        for m in &r.missing {
            let effect = if m.role == "canary" {
                "serves the stable version only"
            } else {
                "claims nothing of the topic"
            };
            println!(
                "  topic {}: lacks its {} version {} ({effect})",
                m.topic, m.role, m.version
            );
        }
    }
    Ok(())
}
