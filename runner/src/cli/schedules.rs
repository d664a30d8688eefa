//! `hourglass schedules`: each `[[schedule]]` with its next fire times and
//! the last fire time handled (from Redis).

use std::path::Path;

use super::when::when;
use super::{Exit, load_producer_config};
use crate::clock::now_ms;
use crate::config::{ScheduleConfig, When};
use crate::redis::connect;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Runners enqueue each fire time 2 s ahead as the job `NAME@<fire time ms>`, \
    once however many runners run; `missed` says what happens to fire times that passed \
    while no runner ran."
)]
pub(super) struct Args {
    /// How many upcoming fire times to show.
    #[arg(long, default_value_t = 3)]
    next: usize,
    /// Print one JSON object per schedule instead of a table.
    #[arg(long)]
    json: bool,
}

/// A fire time as text, in the schedule's zone for cron schedules.
fn show(schedule: &ScheduleConfig, ms: u64) -> String {
    let Ok(t) = jiff::Timestamp::from_millisecond(ms as i64) else {
        return ms.to_string();
    };
    match &schedule.when {
        When::Cron { timezone, .. } => match jiff::tz::TimeZone::get(timezone) {
            Ok(tz) => t.to_zoned(tz).strftime("%Y-%m-%d %H:%M:%S %Z").to_string(),
            Err(_) => t.to_string(),
        },
        When::Every(_) => t.to_string(),
    }
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    if config.schedules.is_empty() {
        println!("no [[schedule]] in {}", config.path.display());
        return Ok(());
    }
    let (queue, _embedded) = connect(&config).await?;
    let now = now_ms();
    for s in &config.schedules {
        let upcoming = s.ticks(now, u64::MAX / 4, args.next);
        let last = queue
            .runners()
            .schedule_cursor(&queue.keys(&s.topic), &s.name)
            .await?;
        let (kind, spec) = match &s.when {
            When::Cron { expr, timezone } => ("cron", format!("{expr} ({timezone})")),
            When::Every(p) => ("every", humantime::format_duration(*p).to_string()),
        };
        if args.json {
            let v = serde_json::json!({
                "name": s.name,
                "topic": s.topic,
                kind: spec,
                "missed": format!("{:?}", s.missed).to_lowercase(),
                "next_ms": upcoming,
                "handled_until_ms": last,
            });
            println!("{v}");
            continue;
        }
        println!("{} -> topic {}", s.name, s.topic);
        println!("  {kind} {spec}, missed = {:?}", s.missed);
        for t in &upcoming {
            println!("  next  {} ({})", show(s, *t), when(*t, now));
        }
        match last {
            Some(t) => println!("  fire times handled up to {}", when(t, now)),
            None => println!("  no runner has served it yet"),
        }
    }
    Ok(())
}
