//! `hourglass cancel TOPIC ID...`: delete jobs wherever they are.

use std::path::Path;

use anyhow::anyhow;

use super::{Exit, load_producer_config, topic_of};
use crate::clock::now_ms;
use crate::redis::connect;
use crate::redis::{Cancelled, check_id};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "A job that is running finishes its attempt, but the outcome is \
    discarded and it does not run again.\n\nExample: hourglass cancel order_cancel order-1042"
)]
pub(super) struct Args {
    /// The topic, as named in queues.toml.
    topic: String,
    /// The ids of the jobs to cancel.
    #[arg(required = true)]
    ids: Vec<String>,
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    let keep = topic_of(&config, &args.topic)?
        .and_then(|t| t.results)
        .map(|r| r.keep);
    for id in &args.ids {
        check_id(id).map_err(|e| Exit::input(anyhow!(e)))?;
    }
    let (queue, _embedded) = connect(&config).await?;
    let answer = queue
        .admin()
        .cancel(&queue.keys(&args.topic), &args.ids, now_ms(), keep)
        .await?;
    let mut missing = 0;
    for (id, was) in args.ids.iter().zip(answer) {
        let topic = &args.topic;
        match was {
            Some(Cancelled::Pending) => println!("cancelled {topic}/{id} (it was waiting)"),
            Some(Cancelled::Running) => println!(
                "cancelled {topic}/{id} (it was running: the attempt finishes, its outcome is discarded)"
            ),
            Some(Cancelled::Dead) => println!("cancelled {topic}/{id} (it was a dead letter)"),
            None => {
                missing += 1;
                eprintln!("no job {topic}/{id} (never enqueued, or already acked)");
            }
        }
    }
    if missing > 0 {
        return Err(anyhow!("{missing} of {} jobs were not found", args.ids.len()).into());
    }
    Ok(())
}
