//! A topic's tenant keys: `hourglass key pause|resume|weight` and
//! `hourglass stats --by-key TOPIC`.

use std::path::Path;

use anyhow::anyhow;

use super::{Exit, load_producer_config, topic_of};
use crate::Config;
use crate::clock::now_ms;
use crate::redis::{KeysStats, MAX_WEIGHT, check_key, connect};

#[derive(Debug, clap::Subcommand)]
pub(super) enum Command {
    /// Stop starting one key's jobs (they wait; its other keys go on).
    Pause(KeyArgs),
    /// Start a paused key's jobs again.
    Resume(KeyArgs),
    /// Give a key a larger share: weight 3 gets three starts (or three
    /// times the CPU) for each of a key of weight 1.
    #[command(after_help = "Example:\n  hourglass key weight exports customer-7 3")]
    Weight(WeightArgs),
}

#[derive(Debug, clap::Args)]
pub(super) struct KeyArgs {
    /// The topic, as named in queues.toml (one with `fairness`).
    topic: String,
    /// The tenant key, as jobs carry it (`enqueue --key`).
    key: String,
}

#[derive(Debug, clap::Args)]
pub(super) struct WeightArgs {
    #[command(flatten)]
    of: KeyArgs,
    /// 1 (the default) to 10000.
    #[arg(value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_WEIGHT)))]
    weight: u32,
}

/// Refuse a key that cannot be stored, and a topic that does not claim fairly.
fn checked(config: &Config, args: &KeyArgs) -> Result<(), Exit> {
    check_key(&args.key).map_err(|why| Exit::input(anyhow!("KEY: {why}")))?;
    if let Some(topic) = topic_of(config, &args.topic)?
        && topic.fairness.is_none()
    {
        return Err(Exit::input(anyhow!(
            "topic {:?} has no `fairness` (nor key_concurrency / key_rate) in {}: its keys do not take turns",
            args.topic,
            config.path.display()
        )));
    }
    Ok(())
}

pub(super) async fn run(config: &Path, command: Command) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    let args = match &command {
        Command::Pause(a) | Command::Resume(a) => a,
        Command::Weight(w) => &w.of,
    };
    checked(&config, args)?;
    let (queue, _embedded) = connect(&config).await?;
    let (topic, key) = (&args.topic, &args.key);
    let keys = queue.keys(topic);
    match &command {
        Command::Pause(_) => match queue.tenants().pause(&keys, key, true).await? {
            true => println!("paused key {key} of {topic}: its jobs wait, other keys go on"),
            false => println!("key {key} of {topic} was already paused"),
        },
        Command::Resume(_) => match queue.tenants().pause(&keys, key, false).await? {
            true => println!("resumed key {key} of {topic}"),
            false => println!("key {key} of {topic} was not paused"),
        },
        Command::Weight(w) => {
            queue.tenants().set_weight(&keys, key, w.weight).await?;
            println!("key {key} of {topic} now has weight {}", w.weight);
        }
    }
    Ok(())
}

/// `hourglass stats --by-key TOPIC`.
pub(super) async fn stats(
    config: &Config,
    topic: &str,
    top: usize,
    json: bool,
) -> Result<(), Exit> {
    topic_of(config, topic)?;
    let (queue, _embedded) = connect(config).await?;
    let stats = queue
        .tenants()
        .stats(&queue.keys(topic), now_ms(), top)
        .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        print!("{}", table(&stats));
    }
    Ok(())
}

/// The keys as a table, with what the listed ones leave as "other".
fn table(s: &KeysStats) -> String {
    let mut out = format!(
        "{:<32} {:>9} {:>8} {:>12} {:>7} {:>6}\n",
        "KEY", "QUEUED", "RUNNING", "CPU/1m (ms)", "WEIGHT", "PAUSED"
    );
    let name = |k: &str| {
        if k.is_empty() {
            "(no key)".to_owned()
        } else {
            k.to_owned()
        }
    };
    for k in &s.top {
        out += &format!(
            "{:<32} {:>9} {:>8} {:>12.1} {:>7} {:>6}\n",
            name(&k.key),
            k.queued,
            k.running,
            k.cpu_us as f64 / 1000.0,
            k.weight,
            if k.paused { "yes" } else { "" }
        );
    }
    let (q, r, c) = s.top.iter().fold((0, 0, 0), |(q, r, c), k| {
        (q + k.queued, r + k.running, c + k.cpu_us)
    });
    let others = s
        .keys_with_jobs
        .saturating_sub(s.top.iter().filter(|k| k.queued > 0).count() as u64);
    out += &format!(
        "{:<32} {:>9} {:>8} {:>12.1}\n",
        format!("(other: {others} keys)"),
        s.queued.saturating_sub(q),
        s.running.saturating_sub(r),
        s.cpu_us.saturating_sub(c) as f64 / 1000.0
    );
    out
}
