//! `hourglass dead list|retry|purge TOPIC [ID...]`: the dead-letter set.

use std::path::Path;

use anyhow::anyhow;

use super::when::when;
use super::{Exit, load_producer_config, topic_of};
use crate::clock::now_ms;
use crate::redis::connect;
use crate::redis::{DEAD_BATCH, Queue, QueueError, TopicKeys, check_id, check_version};

#[derive(Debug, clap::Subcommand)]
pub(super) enum Command {
    /// List dead letters, newest first: id, when, attempts, handler version, reason.
    List {
        /// The topic, as named in queues.toml.
        topic: String,
        /// How many to show.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Skip this many of the newest first.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Print JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run dead letters again: due now, with their attempts reset (on a
    /// chosen handler version with --version).
    #[command(
        override_usage = "hourglass dead retry [OPTIONS] <TOPIC> <IDS>...\n       hourglass dead retry [OPTIONS] <TOPIC> --all",
        after_help = "Examples:\n  \
        hourglass dead retry webhook --all\n  \
        hourglass dead retry refund --all --version 3fa1c2d4e5b60718   (replay on that version)",
        disable_version_flag = true
    )]
    Retry {
        #[command(flatten)]
        which: Selection,
        /// Run them on this handler version (as `hourglass versions TOPIC`
        /// lists them), whatever the topic serves: each job is pinned to it.
        #[arg(long)]
        version: Option<String>,
        /// Drop each job's journal (durable steps, recorded effects): it
        /// starts afresh, every step and call made again. Needed with
        /// --version for a job with a journal (its steps were recorded by
        /// another version); alone, it restarts a job that diverged from its
        /// effects journal.
        #[arg(long)]
        reset_journal: bool,
    },
    /// Delete dead letters and their payloads for good.
    #[command(
        override_usage = "hourglass dead purge <TOPIC> <IDS>...\n       hourglass dead purge <TOPIC> --all"
    )]
    Purge(Selection),
}

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["ids", "all"]))]
pub(super) struct Selection {
    /// The topic, as named in queues.toml.
    topic: String,
    /// The dead letters' ids.
    ids: Vec<String>,
    /// Every dead letter of the topic.
    #[arg(long)]
    all: bool,
}

pub(super) async fn run(config: &Path, command: Command) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    let topic = match &command {
        Command::List { topic, .. } => topic,
        Command::Retry { which: s, .. } | Command::Purge(s) => {
            for id in &s.ids {
                check_id(id).map_err(|e| Exit::input(anyhow!(e)))?;
            }
            &s.topic
        }
    };
    topic_of(&config, topic)?;
    let (queue, _embedded) = connect(&config).await?;
    let keys = queue.keys(topic);
    match command {
        Command::List {
            limit,
            offset,
            json,
            ..
        } => list(&queue, &keys, offset, limit, json).await,
        Command::Retry {
            which: s,
            version,
            reset_journal,
        } => {
            if let Some(v) = &version {
                check_version(v).map_err(|e| Exit::input(anyhow!("--version: {e}")))?;
                super::enqueue::kept(&queue, &s.topic, v).await?;
            }
            let done = apply(
                &queue,
                &keys,
                &s,
                Verb::Requeue(version.as_deref(), reset_journal),
            )
            .await?;
            match version {
                Some(v) => println!(
                    "requeued {} of {} on version {v}",
                    count_letters(done as u64),
                    s.topic
                ),
                None => println!("requeued {} of {}", count_letters(done as u64), s.topic),
            }
            Ok(())
        }
        Command::Purge(s) => {
            let done = apply(&queue, &keys, &s, Verb::Purge).await?;
            println!("purged {} of {}", count_letters(done as u64), s.topic);
            Ok(())
        }
    }
}

async fn list(
    queue: &Queue,
    keys: &TopicKeys,
    offset: usize,
    limit: usize,
    json: bool,
) -> Result<(), Exit> {
    let now = now_ms();
    let letters = queue.dead().list(keys, offset, limit).await?;
    if json {
        for (id, info) in &letters {
            let mut v = serde_json::to_value(info).expect("dead info serializes");
            v["id"] = id.clone().into();
            println!("{v}");
        }
        return Ok(());
    }
    let total = queue.stats(keys, now).await?.dead;
    println!("{} in {}", count_letters(total), keys.topic);
    for (id, info) in letters {
        println!(
            "{id}\n  died      {}\n  attempts  {}\n  handler   {}\n  reason    {}",
            when(info.failed_at_ms, now),
            info.attempts,
            info.handler.as_deref().unwrap_or("-"),
            info.reason
        );
    }
    Ok(())
}

/// What to do with dead letters.
#[derive(Clone, Copy)]
enum Verb<'a> {
    /// Run again (on this version, if one is given; then with a durable
    /// job's journal dropped, if asked).
    Requeue(Option<&'a str>, bool),
    Purge,
}

/// Retry or purge the selection; how many dead letters it applied to.
async fn apply(
    queue: &Queue,
    keys: &TopicKeys,
    s: &Selection,
    verb: Verb<'_>,
) -> Result<usize, Exit> {
    let run = |ids: Vec<String>| async move {
        match verb {
            Verb::Requeue(None, false) => queue.dead().retry(keys, &ids, now_ms()).await,
            Verb::Requeue(None, true) => queue.dead().retry_afresh(keys, &ids, now_ms()).await,
            Verb::Requeue(Some(v), reset) => {
                queue.dead().retry_on(keys, &ids, v, reset, now_ms()).await
            }
            Verb::Purge => queue.dead().purge(keys, &ids).await,
        }
    };
    if !s.all {
        let mut done = 0;
        for chunk in s.ids.chunks(DEAD_BATCH) {
            let hit = run(chunk.to_vec()).await.map_err(refused)?;
            for id in chunk.iter().filter(|id| !hit.contains(id)) {
                eprintln!("no dead letter {}/{id}", s.topic);
            }
            done += hit.len();
        }
        return Ok(done);
    }
    let mut done = 0;
    loop {
        let batch = run(Vec::new()).await.map_err(refused)?;
        done += batch.len();
        if batch.len() < DEAD_BATCH {
            return Ok(done);
        }
    }
}

/// "1 dead letter", "2 dead letters".
fn count_letters(n: u64) -> String {
    match n {
        1 => "1 dead letter".into(),
        n => format!("{n} dead letters"),
    }
}

/// A refusal (a journaled job replayed on another version without
/// --reset-journal) is bad input; anything else a failure.
fn refused(e: QueueError) -> Exit {
    match e {
        QueueError::Invalid(why) => Exit::input(anyhow!(why)),
        e => e.into(),
    }
}
