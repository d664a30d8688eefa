//! `hourglass pause TOPIC` and `hourglass resume TOPIC`: a paused topic
//! accepts jobs and claims none, on every runner; resume picks up at once.

use std::path::Path;

use super::{Exit, load_producer_config, topic_of};
use crate::redis::connect;

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The topic, as named in queues.toml.
    topic: String,
}

pub(super) async fn run(config: &Path, args: Args, pause: bool) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    topic_of(&config, &args.topic)?;
    let (queue, _embedded) = connect(&config).await?;
    let changed = queue
        .admin()
        .set_paused(&queue.keys(&args.topic), pause)
        .await?;
    let topic = &args.topic;
    match (pause, changed) {
        (true, true) => println!(
            "paused {topic}: it accepts jobs and runs none until resumed (running jobs finish)"
        ),
        (true, false) => println!("{topic} was already paused"),
        (false, true) => println!("resumed {topic}"),
        (false, false) => println!("{topic} was not paused"),
    }
    Ok(())
}
