//! `hourglass journal TOPIC ID [--json]`: what a job's journal holds (its
//! durable steps, signals and, on a topic with `journal = "effects"`, the
//! effects its attempts recorded); and the effects part of `inspect`.

use std::path::Path;

use anyhow::anyhow;

use super::when::when;
use super::{Exit, load_producer_config, topic_of};
use crate::clock::now_ms;
use crate::redis::effects::{Answer, Entry, Replay};
use crate::redis::{Journal, check_id, connect};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Lists the steps a durable handler recorded and, on a topic with \
    `journal = \"effects\"`, each outbound request its attempts made (method, URL, status \
    or error, size, attempt), the follow-ups they queued, how many clock reads and random \
    bytes were recorded, and where the journal stopped if it did. A request marked \
    `made again` is the last one and failed: the next attempt sends it live.\n\
    Exit status: 0 shown, 1 the job has no journal, 2 bad input.\n\n\
    Example: hourglass journal payments order-1042 --json"
)]
pub(super) struct Args {
    /// The topic, as named in queues.toml.
    topic: String,
    /// The job's id.
    id: String,
    /// Print JSON (the same object `inspect --json` holds under `journal`).
    #[arg(long)]
    json: bool,
}

pub(super) async fn journal(config: &Path, args: Args) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    topic_of(&config, &args.topic)?;
    check_id(&args.id).map_err(|e| Exit::input(anyhow!(e)))?;
    let (queue, _embedded) = connect(&config).await?;
    let keys = queue.keys(&args.topic);
    let (journal, waits) = queue.journal(&keys, &args.id).await?;
    let Some(journal) = journal else {
        return Err(anyhow!(
            "{}/{} has no journal (its topic journals nothing, it has not run yet, or it is done)",
            args.topic,
            args.id
        )
        .into());
    };
    if args.json {
        // exactly inspect --json's `journal`; what a suspended job waits
        // for is its `suspended`, beside it there
        let json = journal.to_json();
        println!("{}", serde_json::to_string_pretty(&json).expect("JSON"));
        return Ok(());
    }
    let now = now_ms();
    print!("{}", journal_text(&journal, now));
    if let Some(w) = waits {
        println!(
            "  {:<10} {} until {}",
            "waits",
            w.signal
                .map_or_else(|| "sleeps".to_owned(), |s| format!("for signal {s:?}")),
            when(w.until_ms, now)
        );
    }
    Ok(())
}

/// A durable handler's journal: its version, each step (name, size, which
/// attempt recorded it, when) in the order they completed, the signals.
pub(super) fn journal_text(j: &Journal, now: u64) -> String {
    let mut out = format!(
        "  {:<10} {} step{}, on handler version {}\n",
        "journal",
        j.steps.len(),
        if j.steps.len() == 1 { "" } else { "s" },
        j.version.as_deref().unwrap_or("-")
    );
    let mut steps: Vec<_> = j.steps.iter().collect();
    steps.sort_by_key(|(name, s)| (s.at_ms, s.attempt, *name));
    for (name, s) in steps {
        out.push_str(&format!(
            "  {:<10} {name:<20} {:>9}  attempt {:<3} {}\n",
            "",
            bytesize::ByteSize(s.value.len() as u64)
                .display()
                .iec()
                .to_string(),
            s.attempt,
            when(s.at_ms, now)
        ));
    }
    for (name, payload) in &j.signals {
        out.push_str(&format!(
            "  {:<10} signal {name:?} received ({} bytes)\n",
            "",
            payload.len()
        ));
    }
    out.push_str(&effects_text(j, now));
    out
}

/// The effects part of a journal, one line per request and follow-up.
fn effects_text(j: &Journal, now: u64) -> String {
    if j.effects.is_empty() {
        return String::new();
    }
    let replay = Replay::load(&j.effects);
    let entries: Vec<&Entry> = j.effects.values().flatten().collect();
    let mut calls: Vec<&Entry> = entries
        .iter()
        .copied()
        .filter(|e| matches!(e, Entry::Http { .. }))
        .collect();
    calls.sort_by_key(|e| match e {
        Entry::Http { seq, .. } => *seq,
        _ => 0,
    });
    let (mut reads, mut random) = (0usize, 0usize);
    for e in &entries {
        match e {
            Entry::Clock { values, .. } => reads += values.len(),
            Entry::Random { bytes, .. } => random += bytes.len(),
            _ => {}
        }
    }
    let size = |b: usize| bytesize::ByteSize(b as u64).display().iec().to_string();
    let mut out = format!(
        "  {:<10} {} request{}, {reads} clock reads, {random} random bytes ({})\n",
        "effects",
        calls.len(),
        if calls.len() == 1 { "" } else { "s" },
        size(replay.bytes)
    );
    for e in calls {
        let Entry::Http {
            scope,
            pos,
            attempt,
            at_ms,
            request,
            answer,
            ..
        } = e
        else {
            continue;
        };
        let (status, bytes) = match answer {
            Answer::Response { status, body, .. } => (status.to_string(), size(body.len())),
            Answer::Failed { code, .. } => (code.clone(), "-".into()),
        };
        let step = if scope.is_empty() {
            String::new()
        } else {
            format!(" (step {scope:?})")
        };
        let again = if replay.http.contains_key(&(scope.clone(), *pos)) {
            ""
        } else {
            "  made again"
        };
        out.push_str(&format!(
            "  {:<10} {} {}{step}  {status}  {bytes}  attempt {attempt}  {}{again}\n",
            "",
            request.method,
            request.url,
            when(*at_ms, now)
        ));
    }
    for e in &entries {
        match e {
            Entry::FollowUp {
                topic, id, attempt, ..
            } => out.push_str(&format!(
                "  {:<10} follow-up {topic}/{id}  attempt {attempt}\n",
                ""
            )),
            Entry::Stop {
                reason, attempt, ..
            } => out.push_str(&format!(
                "  {:<10} stopped in attempt {attempt}: {reason}; the job runs live from there\n",
                ""
            )),
            _ => {}
        }
    }
    out
}
