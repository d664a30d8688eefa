//! `hourglass enqueue`: add one job to a topic.

use std::io::Read;
use std::path::Path;

use anyhow::anyhow;

use super::{Failure, load_producer_config, topic_of};
use crate::clock::{millis, now_ms};
use crate::config::parse_duration;
use crate::redis::connect;
use crate::redis::{Enqueued, NewJob, Queue, QueueError, check_id, check_version};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    hourglass enqueue order_cancel '{\"order_id\":42}' --delay 30m\n  \
    hourglass enqueue notify @message.json --at 2026-12-01T09:00:00+01:00 --id user-7-day-23\n  \
    echo -n hello | hourglass enqueue echo -\n  \
    hourglass enqueue report '{\"user\":7}' --id daily-7 --unique-for 24h\n  \
    hourglass enqueue summary '{\"doc\":9}' --id doc-9 --delay 10m --replace\n  \
    hourglass enqueue refund @refund.json --version 3fa1c2d4e5b60718",
    // --version names a handler version here, not hourglass's
    disable_version_flag = true)]
pub(super) struct Args {
    /// The topic, as named in queues.toml.
    topic: String,
    /// The payload: literal text, @FILE to read a file, or - to read standard input.
    payload: String,
    /// Run after this long, e.g. 250ms, 30s, 30m, 2h, 7d.
    #[arg(long, conflicts_with = "at")]
    delay: Option<String>,
    /// Run at this time (RFC 3339, e.g. 2026-12-01T09:00:00Z or with an offset).
    #[arg(long)]
    at: Option<String>,
    /// Your id for the job; enqueueing an id that is still live does nothing (and says so).
    #[arg(long)]
    id: Option<String>,
    /// Attempts before the job is dead-lettered (default: the topic's max_attempts).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_attempts: Option<u32>,
    /// Keep --id taken this long (e.g. 1h) even after the job is done: a
    /// repeat within the window is a duplicate.
    #[arg(long, requires = "id")]
    unique_for: Option<String>,
    /// If the job --id is waiting (scheduled or ready), replace its payload
    /// and due time (debounce); a running one is left alone (exit status 1).
    #[arg(long, requires = "id")]
    replace: bool,
    /// Run every attempt on this handler version (as `hourglass versions
    /// TOPIC` lists them), whatever the topic serves.
    #[arg(long)]
    version: Option<String>,
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Failure> {
    let config = load_producer_config(config)?;
    topic_of(&config, &args.topic)?;
    if let Some(id) = &args.id {
        check_id(id).map_err(|e| Failure::input(anyhow!("--id: {e}")))?;
    }
    let payload = read_payload(&args.payload, config.runner.max_payload)?;
    let now = now_ms();
    let due_at_ms = match (&args.delay, &args.at) {
        (Some(d), _) => {
            now + millis(parse_duration(d).map_err(|e| Failure::input(anyhow!("--delay: {e}")))?)
        }
        (None, Some(at)) => {
            let at: jiff::Timestamp = at.parse().map_err(|e| {
                Failure::input(anyhow!(
                    "--at {at:?} is not an RFC 3339 time like 2026-12-01T09:00:00Z: {e}"
                ))
            })?;
            u64::try_from(at.as_millisecond())
                .map_err(|_| Failure::input(anyhow!("--at is before 1970")))?
        }
        (None, None) => now,
    };
    let unique_for_ms = match &args.unique_for {
        Some(d) => {
            millis(parse_duration(d).map_err(|e| Failure::input(anyhow!("--unique-for: {e}")))?)
        }
        None => 0,
    };
    if let Some(v) = &args.version {
        check_version(v).map_err(|e| Failure::input(anyhow!("--version: {e}")))?;
    }
    let (queue, _embedded) = connect(&config).await?;
    if let Some(v) = &args.version {
        kept(&queue, &args.topic, v).await?;
    }
    let job = NewJob {
        id: args.id,
        payload,
        due_at_ms,
        max_attempts: args.max_attempts.unwrap_or(0),
        unique_for_ms,
        replace: args.replace,
        version: args.version,
    };
    let answer = queue
        .enqueue(&queue.keys(&args.topic), &[job], now)
        .await
        .map_err(|e| match e {
            QueueError::Invalid(_) => Failure::input(e),
            e => e.into(),
        })?;
    let due = jiff::Timestamp::from_millisecond(due_at_ms as i64)
        .map(|t| t.to_string())
        .unwrap_or_default();
    match answer.first() {
        Some(Enqueued::New(id)) => println!("enqueued {}/{id}, due {due}", args.topic),
        Some(Enqueued::Duplicate(id)) => println!(
            "duplicate: {}/{id} is already live (or reserved by --unique-for); not enqueued again",
            args.topic
        ),
        Some(Enqueued::Replaced(id)) => println!(
            "replaced: {}/{id} was waiting; it now has this payload, due {due}",
            args.topic
        ),
        Some(Enqueued::Running(id)) => {
            return Err(anyhow!(
                "not replaced: {}/{id} is running now; enqueue again once it is done",
                args.topic
            )
            .into());
        }
        None => return Err(anyhow!("redis did not answer the enqueue").into()),
    }
    Ok(())
}

fn read_payload(arg: &str, max: u64) -> Result<Vec<u8>, Failure> {
    let bytes = if arg == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .take(max + 1)
            .read_to_end(&mut buf)
            .map_err(|e| Failure::input(anyhow!("reading the payload from standard input: {e}")))?;
        buf
    } else if let Some(file) = arg.strip_prefix('@') {
        let mut buf = Vec::new();
        std::fs::File::open(file)
            .and_then(|f| f.take(max + 1).read_to_end(&mut buf))
            .map_err(|e| Failure::input(anyhow!("reading the payload file {file:?}: {e}")))?;
        buf
    } else {
        arg.as_bytes().to_vec()
    };
    if bytes.len() as u64 > max {
        return Err(Failure::input(anyhow!(
            "the payload is larger than the limit of {max} bytes ([runner] max_payload in queues.toml)"
        )));
    }
    Ok(bytes)
}

/// Refuse `version` unless `topic` keeps it (a job pinned to a version no
/// runner has would only fail).
pub(super) async fn kept(queue: &Queue, topic: &str, version: &str) -> Result<(), Failure> {
    let (_, versions) = queue.versions(&queue.keys(topic)).await?;
    if versions.iter().any(|v| v.version == version) {
        return Ok(());
    }
    let known: Vec<&str> = versions.iter().map(|v| v.version.as_str()).collect();
    Err(Failure::input(anyhow!(
        "--version: topic {topic:?} keeps no version {version} (kept: {})",
        if known.is_empty() {
            "none yet".to_owned()
        } else {
            known.join(", ")
        }
    )))
}
