//! `hourglass migrate`: bring a namespace's Redis layout up to this build's,
//! online (runners of the old layout keep serving), in bounded steps (1,000
//! waiting jobs per command, each topic stamped when done, the namespace
//! last), safe to interrupt and rerun.

use std::collections::BTreeSet;
use std::path::Path;

use super::{Exit, load_producer_config};
use crate::clock::now_ms;
use crate::redis::connect_any_layout;
use crate::redis::layout::{LAYOUT, Layout};

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// Say what would be done, change nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    let namespace = &config.redis.namespace;
    let (queue, _embedded) = connect_any_layout(&config).await?;
    // every topic anyone may have written: queues.toml's, the live runners', Redis' own
    let mut topics: BTreeSet<String> = config.topics.iter().map(|t| t.name.clone()).collect();
    for runner in queue.runners().list(now_ms()).await? {
        topics.extend(runner.topics);
    }
    topics.extend(queue.layout().topics().await?);
    let topics: Vec<String> = topics.into_iter().collect();
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let found = queue.layout().read(&names).await?;
    if args.dry_run {
        match found {
            Layout::Version(v) if v == LAYOUT => {
                println!("namespace {namespace:?} is at layout {v}: nothing to do")
            }
            Layout::Version(v) if v > LAYOUT => {
                return Err(Exit::from(anyhow::anyhow!(
                    crate::redis::layout::newer_message(namespace, v)
                )));
            }
            Layout::New => {
                println!("namespace {namespace:?} is new: it would be stamped with layout {LAYOUT}")
            }
            found => println!(
                "namespace {namespace:?} is at layout {}: the waiting jobs of {} topics ({}) would move onto the time index of layout {LAYOUT}, 1,000 per step, each topic then stamped, the namespace last",
                found.number(),
                topics.len(),
                topics.join(", ")
            ),
        }
        return Ok(());
    }
    let done = queue.layout().migrate(&topics).await?;
    if done.from == done.to && done.topics.is_empty() {
        println!(
            "namespace {namespace:?} is at layout {}: nothing to do",
            done.to
        );
    } else {
        println!(
            "namespace {namespace:?}: layout {} -> {}; {} topics stamped{}{}; their waiting jobs are on the time index",
            done.from,
            done.to,
            done.topics.len(),
            if done.topics.is_empty() { "" } else { ": " },
            done.topics.join(", ")
        );
        println!(
            "runners of layout {LAYOUT} waiting for it start now; runners of layout {} keep working (what they put back is moved onto the index by the next claim), but stop them once the new ones run: a job whose lease expires under them can reach them in layout {LAYOUT}'s form, which they dead-letter as unreadable (`hourglass dead retry` runs it again)",
            done.from
        );
        if done.from == 1 {
            println!(
                "do not pin jobs to a version (`hourglass pin`, `--version`) while runners of layout 1 run: they dead-letter pinned jobs as unreadable"
            );
        }
    }
    Ok(())
}
