//! `hourglass versions TOPIC`, `hourglass rollout TOPIC [status|promote|abort]`,
//! `hourglass pin TOPIC VERSION` and `hourglass unpin TOPIC`: which handler
//! version serves a topic, and changing it by hand. Every runner follows
//! within a second (a topic under a rollout policy within 250 ms).

use std::path::Path;

use anyhow::anyhow;

use super::when::when;
use super::{Exit, load_producer_config, topic_of};
use crate::clock::now_ms;
use crate::config::RolloutPolicy;
use crate::redis::{Change, Queue, QueueError, Rollout, Tally, VersionInfo, connect};

#[derive(Debug, clap::Args)]
#[command(after_help = "Example: hourglass versions refund")]
pub(super) struct VersionsArgs {
    /// The topic, as named in queues.toml.
    topic: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    hourglass rollout refund              the canary, its share, counts and window; the last verdict\n  \
    hourglass rollout refund promote      make the canary the stable version now\n  \
    hourglass rollout refund abort        take the canary out now (retired: not rolled out again)")]
pub(super) struct RolloutArgs {
    /// The topic, as named in queues.toml.
    topic: String,
    /// What to do.
    #[arg(value_enum, default_value_t = Action::Status)]
    action: Action,
    /// Print JSON instead of text (status).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Action {
    /// Show the rollout.
    Status,
    /// Promote the canary now.
    Promote,
    /// Roll the canary back now; it is retired.
    Abort,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example: hourglass pin refund 3fa1c2d4e5b60718   (undo: hourglass unpin refund)",
    disable_version_flag = true
)]
pub(super) struct PinArgs {
    /// The topic, as named in queues.toml.
    topic: String,
    /// The version to serve: one `hourglass versions TOPIC` lists.
    version: String,
}

#[derive(Debug, clap::Args)]
pub(super) struct UnpinArgs {
    /// The topic, as named in queues.toml.
    topic: String,
}

/// Connect for `topic`; the queue and the topic's policy, if the file has one.
async fn open(config: &Path, topic: &str) -> Result<(Queue, Option<RolloutPolicy>), Exit> {
    let config = load_producer_config(config)?;
    let policy = topic_of(&config, topic)?.and_then(|t| t.rollout);
    let (queue, _embedded) = connect(&config).await?;
    Ok((queue, policy))
}

/// A refusal (no canary, unknown version) is bad input; Redis away is not.
fn refused(e: QueueError) -> Exit {
    match e {
        QueueError::Invalid(_) => Exit::input(e),
        e => e.into(),
    }
}

pub(super) async fn versions(config: &Path, args: VersionsArgs) -> Result<(), Exit> {
    let (queue, _) = open(config, &args.topic).await?;
    let keys = queue.keys(&args.topic);
    let (rollout, mut versions) = queue.rollouts().versions(&keys).await?;
    let holdings = queue.upgrades().holdings(&keys).await?;
    holdings.fill(&mut versions);
    let unkept = holdings.unkept(&versions);
    if args.json {
        let v = serde_json::json!({
            "topic": args.topic,
            "versions": versions,
            "rollout": rollout,
            "patches": holdings.patches,
            "unkept": unkept,
        });
        println!("{v}");
        return Ok(());
    }
    if versions.is_empty() {
        println!(
            "{}: no versions yet (a runner records each version it loads)",
            args.topic
        );
        return Ok(());
    }
    print!("{}", table(&args.topic, &versions, now_ms()));
    for u in &unkept {
        println!(
            "not kept: {} holds {} live jobs by their journals ({}): they cannot run on it; move them with `hourglass upgrade {} --to VERSION`",
            u.version,
            u.jobs.live,
            u.jobs.some.join(", "),
            args.topic
        );
    }
    if !holdings.patches.is_empty() {
        println!("patches (live jobs on each path):");
        for p in &holdings.patches {
            let note = if p.old_path == 0 {
                "no live job on the old path: deprecate_patch is safe for jobs on versions that have the patch"
            } else {
                "the old path is still needed"
            };
            println!(
                "  {:<24} {} old, {} new  ({note})",
                p.name, p.old_path, p.new_path
            );
        }
    }
    if let Some(pin) = &rollout.pinned {
        println!(
            "pinned to {} by {} ({})",
            pin.version,
            pin.by,
            when(pin.at_ms, now_ms())
        );
    }
    Ok(())
}

fn table(topic: &str, versions: &[VersionInfo], now: u64) -> String {
    let mut out = format!(
        "versions of {topic}, newest first\n{:<18} {:<8} {:>9} {:>9} {:>8} {:>8}  FIRST SEEN\n",
        "VERSION", "ROLE", "LIVE JOBS", "ATTEMPTS", "FAILED", "CRASHED"
    );
    for v in versions {
        let role = serde_json::to_value(v.role).expect("a role serializes");
        out.push_str(&format!(
            "{:<18} {:<8} {:>9} {:>9} {:>8} {:>8}  {}\n",
            v.version,
            role.as_str().unwrap_or("-"),
            v.live_jobs,
            v.tally.attempts,
            percent(v.tally.failures, v.tally.attempts),
            percent(v.tally.crashes, v.tally.attempts),
            when(v.first_seen_ms, now)
        ));
    }
    out
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

fn counts(t: &Tally) -> String {
    format!(
        "{} attempts, {} failed ({}), {} crashed",
        t.attempts,
        t.failures,
        percent(t.failures, t.attempts),
        t.crashes
    )
}

pub(super) async fn rollout(config: &Path, args: RolloutArgs) -> Result<(), Exit> {
    let (queue, policy) = open(config, &args.topic).await?;
    let keys = queue.keys(&args.topic);
    let change = match args.action {
        Action::Status => {
            let state = queue.rollouts().get(&keys).await?;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "topic": args.topic,
                        "rollout": state,
                        "policy": policy.as_ref().map(RolloutPolicy::to_json),
                    })
                );
            } else {
                print!("{}", status(&args.topic, &state, policy.as_ref(), now_ms()));
            }
            return Ok(());
        }
        Action::Promote => Change::Promote,
        Action::Abort => Change::Abort,
    };
    let reason = match args.action {
        Action::Promote => "promoted by hand",
        _ => "aborted by hand",
    };
    // the canary shown here is the one changed: refused if another started meanwhile
    let before = queue.rollouts().get(&keys).await?;
    let shown = before.canary.as_ref().map(|c| c.version.as_str());
    queue
        .rollouts()
        .change(&keys, &change, "cli", reason, shown, now_ms())
        .await
        .map_err(refused)?;
    let canary = before.canary.map(|c| c.version).unwrap_or_default();
    match change {
        Change::Promote => println!(
            "{}: canary {canary} promoted; it serves every attempt",
            args.topic
        ),
        _ => println!(
            "{}: canary {canary} aborted and retired; the stable version {} serves every attempt",
            args.topic,
            before.stable.as_deref().unwrap_or("-")
        ),
    }
    Ok(())
}

/// `hourglass rollout TOPIC` as text.
fn status(topic: &str, r: &Rollout, policy: Option<&RolloutPolicy>, now: u64) -> String {
    let mut out = format!("{topic}\n");
    out.push_str(&format!(
        "  stable   {}\n",
        r.stable
            .as_deref()
            .unwrap_or("- (no runner has reported yet)")
    ));
    match &r.canary {
        Some(c) => {
            out.push_str(&format!(
                "  canary   {} serving {:.0}% of attempts since {}\n           verdict due at {}\n",
                c.version,
                c.share * 100.0,
                when(c.started_ms, now),
                when(c.ends_ms, now)
            ));
            out.push_str(&format!("  canary   {}\n", counts(&c.tally)));
            out.push_str(&format!("  stable   {}\n", counts(&c.stable_tally)));
        }
        None => out.push_str("  canary   none\n"),
    }
    if let Some(p) = &r.pinned {
        out.push_str(&format!(
            "  pinned   {} by {} ({}): it serves every attempt\n",
            p.version,
            p.by,
            when(p.at_ms, now)
        ));
    }
    if !r.retired.is_empty() {
        out.push_str(&format!("  retired  {}\n", r.retired.join(", ")));
    }
    match policy {
        Some(p) => out.push_str(&format!(
            "  policy   canary {:.0}% for {}, at least {} attempts, failure rate at most {:.0}% and within {:.0} points of stable\n",
            p.canary * 100.0,
            humantime::format_duration(p.window),
            p.min_attempts,
            p.max_failure_rate * 100.0,
            p.margin * 100.0
        )),
        None => out.push_str("  policy   none in this queues.toml: a new version replaces the old at once\n"),
    }
    if let Some(v) = &r.last {
        out.push_str(&format!(
            "  last     {} {} by {} ({}): {}\n",
            v.version,
            v.result.replace('_', " "),
            v.by,
            when(v.at_ms, now),
            v.reason
        ));
    }
    out
}

pub(super) async fn pin(config: &Path, args: PinArgs) -> Result<(), Exit> {
    crate::redis::check_version(&args.version).map_err(|e| Exit::input(anyhow!(e)))?;
    let (queue, _) = open(config, &args.topic).await?;
    let keys = queue.keys(&args.topic);
    queue
        .rollouts()
        .change(
            &keys,
            &Change::Pin(args.version.clone()),
            "cli",
            "pinned by hand",
            None,
            now_ms(),
        )
        .await
        .map_err(refused)?;
    println!(
        "pinned {} to {}: every runner serves it within a second, whatever the handler file says (undo: hourglass unpin {})",
        args.topic, args.version, args.topic
    );
    Ok(())
}

pub(super) async fn unpin(config: &Path, args: UnpinArgs) -> Result<(), Exit> {
    let (queue, _) = open(config, &args.topic).await?;
    let keys = queue.keys(&args.topic);
    queue
        .rollouts()
        .change(
            &keys,
            &Change::Unpin,
            "cli",
            "unpinned by hand",
            None,
            now_ms(),
        )
        .await
        .map_err(refused)?;
    println!(
        "unpinned {}: the handler file (and its rollout policy) decide again",
        args.topic
    );
    Ok(())
}
