//! `hourglass wait TOPIC ID`: wait until a job ends and print its result,
//! or why it did not succeed; `enqueue --wait` ends the same way.
//!
//! Exit status: 0 acked, 1 dead or cancelled, 2 bad input, 3 no such job
//! (never enqueued, or its end no longer kept), 124 the time ran out (the
//! job is still live; its id is printed).

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::anyhow;

use super::{Exit, load_producer_config, topic_of};
use crate::config::{TopicConfig, parse_duration};
use crate::redis::{EndState, Queue, Waited, check_id, connect};

/// The exit status of a wait that ran out of time (as `timeout(1)`'s).
pub(super) const TIMED_OUT: u8 = 124;
/// The exit status of a wait for a job the topic does not know (never
/// enqueued, or its end no longer kept): a script tells it from a failure.
pub(super) const UNKNOWN: u8 = 3;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 acked (the result, if any, on stdout), 1 dead or cancelled \
    (the reason on stderr), 2 bad input, 3 no such job (never enqueued, or its end no \
    longer kept), 124 still running when the time ran out (the id on stdout).\n\nThe topic must keep results: `results = { keep = \"24h\" }` in its \
    [[topic]].\n\nExamples:\n  \
    hourglass wait report daily-7\n  \
    hourglass wait report daily-7 --timeout 5m --json"
)]
pub(super) struct Args {
    /// The topic, as named in queues.toml.
    topic: String,
    /// The job's id.
    id: String,
    /// Give up after this long (e.g. 30s, 5m).
    #[arg(long, default_value = "30s")]
    timeout: String,
    /// Print the end as JSON (state, result, reason, version, attempts).
    #[arg(long)]
    json: bool,
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    keeps_results(topic_of(&config, &args.topic)?, &args.topic)?;
    check_id(&args.id).map_err(|e| Exit::input(anyhow!(e)))?;
    let timeout = wait_time("--timeout", &args.timeout)?;
    let (queue, _embedded) = connect(&config).await?;
    wait(&queue, &args.topic, &args.id, timeout, args.json).await
}

/// `--timeout` / `--wait` as a duration.
pub(super) fn wait_time(flag: &str, text: &str) -> Result<Duration, Exit> {
    parse_duration(text).map_err(|e| Exit::input(anyhow!("{flag}: {e}")))
}

/// Refuse to wait on a topic that keeps no results (its jobs' ends are not
/// kept, so a wait could never learn how one ended).
pub(super) fn keeps_results(topic: Option<&TopicConfig>, name: &str) -> Result<(), Exit> {
    match topic {
        Some(t) if t.results.is_none() => Err(Exit::input(anyhow!(
            "topic {name:?} keeps no results, so its jobs' ends cannot be waited for: add \
             `results = {{ keep = \"24h\" }}` to its [[topic]] in queues.toml"
        ))),
        _ => Ok(()),
    }
}

/// Wait for job `id` and report its end: the result on stdout and exit 0,
/// or why not on stderr and a non-zero exit.
pub(super) async fn wait(
    queue: &Queue,
    topic: &str,
    id: &str,
    timeout: Duration,
    json: bool,
) -> Result<(), Exit> {
    let waited = queue.wait_for(&queue.keys(topic), id, timeout).await?;
    let end = match waited {
        Waited::Ended(end) => end,
        Waited::TimedOut => {
            println!("{id}");
            return Err(Exit {
                code: TIMED_OUT,
                error: anyhow!(
                    "{topic}/{id} has not ended within {}; it is still live (wait again with `hourglass wait {topic} {id}`)",
                    humantime::format_duration(timeout)
                ),
            });
        }
        Waited::Unknown => {
            return Err(Exit {
                code: UNKNOWN,
                error: anyhow!(
                    "no job {id:?} in topic {topic:?}: never enqueued, or its end is no longer kept (results.keep)"
                ),
            });
        }
    };
    if json {
        println!("{}", end.to_json(id));
    } else if let Some(result) = &end.result {
        let mut out = std::io::stdout().lock();
        out.write_all(result)?;
        if !result.ends_with(b"\n") && std::str::from_utf8(result).is_ok() {
            out.write_all(b"\n")?;
        }
        out.flush()?;
    }
    match end.state {
        EndState::Acked => {
            if !json && end.result.is_none() {
                eprintln!("{topic}/{id} acked (no result)");
            }
            Ok(())
        }
        EndState::Dead => Err(anyhow!(
            "{topic}/{id} is dead after {} attempt(s): {}",
            end.attempts,
            end.reason.as_deref().unwrap_or("no reason recorded")
        )
        .into()),
        EndState::Cancelled => Err(anyhow!("{topic}/{id} was cancelled").into()),
        EndState::Expired => Err(anyhow!(
            "{topic}/{id} expired and was dropped: {}",
            end.reason.as_deref().unwrap_or("no reason recorded")
        )
        .into()),
    }
}
