//! `hourglass usage`: what the jobs tagged with each account used (attempts,
//! CPU, wall time, outbound bytes), from the hourly sums runners keep in Redis.

use std::path::Path;

use anyhow::anyhow;

use super::{Exit, load_producer_config};
use crate::clock::{millis, now_ms};
use crate::config::parse_duration;
use crate::redis::{AccountUsage, HourlyUsage, USAGE_KEEP, check_account, connect, totals};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    hourglass usage\n  \
    hourglass usage --since 7d\n  \
    hourglass usage --account acme --since 48h\n\n\
    Jobs are tagged with `hourglass enqueue --account NAME` (the API's and the client \
    crate's `account`). Runners add their sums every 2 s; hours are kept 35 days.")]
pub(super) struct Args {
    /// Only this account, hour by hour.
    #[arg(long)]
    account: Option<String>,
    /// How far back, e.g. 6h, 7d (at most 35d).
    #[arg(long, default_value = "24h")]
    since: String,
    /// Print one JSON object per hour and account instead of a table.
    #[arg(long)]
    json: bool,
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Exit> {
    let since = parse_duration(&args.since).map_err(|e| Exit::input(anyhow!("--since: {e}")))?;
    if since > USAGE_KEEP {
        return Err(Exit::input(anyhow!(
            "--since: at most 35d (hours are kept 35 days)"
        )));
    }
    if let Some(account) = &args.account {
        check_account(account).map_err(|e| Exit::input(anyhow!("--account: {e}")))?;
    }
    let config = load_producer_config(config)?;
    let (queue, _embedded) = connect(&config).await?;
    let now = now_ms();
    let usage = queue
        .runners()
        .usage(
            now.saturating_sub(millis(since)),
            now,
            args.account.as_deref(),
        )
        .await?;
    if args.json {
        for ((hour, account), u) in &usage {
            let mut v = serde_json::to_value(u).expect("usage serializes");
            v["account"] = account.as_str().into();
            v["hour"] = hour_text(*hour).into();
            println!("{v}");
        }
        return Ok(());
    }
    print!("{}", table(&usage, args.account.is_some(), &args.since));
    Ok(())
}

fn hour_text(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| ms.to_string())
}

/// Totals per account, or (for one account) one row per hour.
fn table(usage: &HourlyUsage, by_hour: bool, since: &str) -> String {
    if usage.is_empty() {
        return format!("no usage recorded in the last {since}\n");
    }
    let mut rows: Vec<(String, AccountUsage)> = Vec::new();
    if by_hour {
        for ((hour, _), u) in usage {
            rows.push((hour_text(*hour), *u));
        }
    } else {
        rows = totals(usage)
            .into_iter()
            .map(|(a, u)| (a.to_owned(), u))
            .collect();
    }
    let size = |b: u64| bytesize::ByteSize(b).display().iec().to_string();
    let first = if by_hour { "hour" } else { "account" };
    let width = rows
        .iter()
        .map(|r| r.0.len())
        .max()
        .unwrap_or(0)
        .max(first.len());
    let mut out = format!(
        "{first:<width$}  {:>9}  {:>12}  {:>12}  {:>10}  {:>10}\n",
        "attempts", "cpu", "wall", "http out", "http in"
    );
    for (name, u) in rows {
        out.push_str(&format!(
            "{name:<width$}  {:>9}  {:>10.3} s  {:>10.3} s  {:>10}  {:>10}\n",
            u.attempts,
            u.cpu_us as f64 / 1e6,
            u.wall_us as f64 / 1e6,
            size(u.bytes_out),
            size(u.bytes_in)
        ));
    }
    out
}
