//! `hourglass logs TOPIC ID [--follow]`: what a job's handler logged in
//! each attempt (its log functions, stdout and stderr), as the job keeps it.

use std::path::Path;
use std::time::Duration;

use anyhow::anyhow;

use super::{Exit, load_producer_config, topic_of};
use crate::clock::now_ms;
use crate::redis::logs::LogLine;
use crate::redis::{JobState, Queue, TopicKeys, check_id, connect};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Each line: when, which attempt, the level (or stdout/stderr), the \
    text. A job keeps its topic's `logs.keep` (64 KiB unless set), the oldest lines dropped \
    first; an acked job's logs go with its kept end (a topic with `results`), else with it.\n\n\
    Examples:\n  hourglass logs order_cancel order-1042\n  \
    hourglass logs order_cancel order-1042 --follow   # until the job ends"
)]
pub(super) struct Args {
    /// The topic, as named in queues.toml.
    topic: String,
    /// The job's id.
    id: String,
    /// Keep printing each attempt's lines as it ends, until the job has
    /// ended (acked, dead or gone).
    #[arg(long, short)]
    follow: bool,
    /// Print JSON (the API's `/logs` answer) instead of text.
    #[arg(long, conflicts_with = "follow")]
    json: bool,
}

/// How often `--follow` looks again: an attempt's lines arrive when it ends.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    let keeps = topic_of(&config, &args.topic)?.map(|t| t.logs);
    check_id(&args.id).map_err(|e| Exit::input(anyhow!(e)))?;
    let (queue, _embedded) = connect(&config).await?;
    let keys = queue.keys(&args.topic);
    let logs = queue.logs(&keys, &args.id).await?;
    if args.json {
        let logs = logs.ok_or_else(|| none(&args, keeps))?;
        println!("{}", serde_json::to_string(&logs).expect("logs serialize"));
        return Ok(());
    }
    let mut last: Option<LogLine> = None;
    match &logs {
        Some(logs) => last = print_after(&logs.lines, None),
        None if !args.follow => return Err(none(&args, keeps)),
        None => {}
    }
    if !args.follow {
        return Ok(());
    }
    while goes_on(&queue, &keys, &args.id).await? {
        tokio::time::sleep(FOLLOW_EVERY).await;
        if let Some(logs) = queue.logs(&keys, &args.id).await? {
            last = print_after(&logs.lines, last.as_ref()).or(last);
        }
    }
    // what its last attempt logged, written as it ended
    if let Some(logs) = queue.logs(&keys, &args.id).await? {
        print_after(&logs.lines, last.as_ref());
    }
    Ok(())
}

/// The answer when a job has no logs.
fn none(args: &Args, keeps: Option<u64>) -> Exit {
    let why = match keeps {
        Some(0) => "its topic keeps none (`logs = false`)",
        _ => "it logged nothing yet, it acked on a topic without `results`, or it is gone",
    };
    Exit {
        code: super::wait::UNKNOWN,
        error: anyhow!("no logs of job {:?} in {}: {why}", args.id, args.topic),
    }
}

/// Whether the job may still log: waiting or running (not dead, not gone).
async fn goes_on(queue: &Queue, keys: &TopicKeys, id: &str) -> Result<bool, Exit> {
    Ok(matches!(
        queue.inspect(keys, id, now_ms()).await?.map(|v| v.state),
        Some(JobState::Scheduled(_) | JobState::Ready(_) | JobState::Running(_))
    ))
}

/// Print the lines after `seen` (all when it is `None`; when it is no
/// longer there, dropped to keep the bound, those logged after it); the last
/// one printed.
fn print_after(lines: &[LogLine], seen: Option<&LogLine>) -> Option<LogLine> {
    let from = match seen {
        None => 0,
        Some(seen) => match lines.iter().rposition(|l| l == seen) {
            Some(i) => i + 1,
            None => lines
                .iter()
                .position(|l| (l.at_ms, l.attempt) > (seen.at_ms, seen.attempt))
                .unwrap_or(lines.len()),
        },
    };
    for line in &lines[from..] {
        println!("{}", shown(line));
    }
    lines[from..].last().cloned()
}

/// One line as printed.
fn shown(line: &LogLine) -> String {
    if line.stream == crate::redis::logs::DROPPED {
        return format!("[{} bytes of older lines dropped]", line.text);
    }
    let at = jiff::Timestamp::from_millisecond(line.at_ms as i64)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| line.at_ms.to_string());
    format!(
        "{at}  #{:<3} {:<6} {}",
        line.attempt, line.stream, line.text
    )
}
