//! `hourglass inspect TOPIC ID`: where a job is, its attempts, due time, last
//! error and the handler version that produced it.

use std::path::Path;

use anyhow::anyhow;

use super::when::when;
use super::{Exit, load_producer_config, topic_of};
use crate::clock::now_ms;
use crate::redis::connect;
use crate::redis::{AttemptCost, AttemptOutcome, JobEnd, JobState, JobView, Standing, check_id};

#[derive(Debug, clap::Args)]
#[command(after_help = "Example: hourglass inspect order_cancel order-1042")]
pub(super) struct Args {
    /// The topic, as named in queues.toml.
    topic: String,
    /// The job's id.
    id: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    let topic_max = topic_of(&config, &args.topic)?.map(|t| t.max_attempts);
    check_id(&args.id).map_err(|e| Exit::input(anyhow!(e)))?;
    let (queue, _embedded) = connect(&config).await?;
    let now = now_ms();
    let keys = queue.keys(&args.topic);
    let unknown = || Exit {
        code: super::wait::UNKNOWN,
        error: anyhow!(
            "no job {:?} in topic {:?} (never enqueued, or acked and deleted)",
            args.id,
            args.topic
        ),
    };
    if args.json {
        let view = queue
            .job_json(&keys, &args.topic, &args.id, topic_max, now)
            .await?;
        let view = view.ok_or_else(unknown)?;
        println!(
            "{}",
            serde_json::to_string(&view).expect("a job view serializes")
        );
        return Ok(());
    }
    match queue.inspect(&keys, &args.id, now).await? {
        Some(view) => {
            print!("{}", to_text(&args.topic, &view, topic_max, now));
            if let Some(Ok(crate::redis::Record {
                flow: Some(flow), ..
            })) = &view.record
            {
                println!("  {:<10} {}", "flow", flow_text(&queue, flow).await?);
            }
        }
        // gone from the pipeline: its end may be kept (a topic with `results`)
        None => match queue.standing(&keys, &args.id).await? {
            Standing::Ended(end) => print!("{}", end_text(&args.topic, &args.id, &end, now)),
            // a flow's job its flow has not released yet
            Standing::InFlow {
                flow,
                index,
                released,
                waiting_for,
            } => {
                println!("{}/{}", args.topic, args.id);
                let state = if released {
                    "released by its flow: being enqueued".to_owned()
                } else {
                    format!("waiting in its flow for {}", waiting_for.join(", "))
                };
                println!("  {:<10} {state}", "state");
                let place = crate::redis::FlowRef { flow, index };
                println!("  {:<10} {}", "flow", flow_text(&queue, &place).await?);
            }
            Standing::Live { .. } | Standing::Unknown => return Err(unknown()),
        },
    }
    Ok(())
}

/// A flow job's line: its flow and how each job it waits for stands.
async fn flow_text(
    queue: &crate::redis::Queue,
    flow: &crate::redis::FlowRef,
) -> Result<String, Exit> {
    let upstream = queue.flows().dependencies(flow).await?.unwrap_or_default();
    let deps: Vec<String> = upstream
        .dependencies
        .iter()
        .map(|d| {
            let state = d.end.as_ref().map_or("not ended", |e| e.state.as_str());
            format!("{} {state}", d.name)
        })
        .collect();
    let dependents: Vec<String> = queue
        .flows()
        .dependents(flow)
        .await?
        .into_iter()
        .map(|(name, ended)| format!("{name} {}", ended.as_deref().unwrap_or("not ended")))
        .collect();
    let mut out = flow.flow.clone();
    if !deps.is_empty() {
        out += &format!(", after {}", deps.join(", "));
    }
    if !dependents.is_empty() {
        out += &format!(", before {}", dependents.join(", "));
    }
    Ok(format!("{out} (`hourglass flow show {}`)", flow.flow))
}

fn to_text(topic: &str, v: &JobView, topic_max: Option<u32>, now: u64) -> String {
    let mut out = format!("{topic}/{}\n", v.id);
    let line = |out: &mut String, k: &str, val: String| out.push_str(&format!("  {k:<10} {val}\n"));
    let state = match &v.state {
        JobState::Scheduled(due) => format!("scheduled, due {}", when(*due, now)),
        JobState::Ready(due) => {
            format!("ready (due {}), waiting for a free runner", when(*due, now))
        }
        JobState::Running(until) => format!("running, leased until {}", when(*until, now)),
        JobState::Dead(info) => format!("dead since {}", when(info.failed_at_ms, now)),
    };
    line(&mut out, "state", state);
    if let Some(s) = &v.suspension {
        let what = match &s.signal {
            Some(name) => format!("signal {name:?}, or until {}", when(s.until_ms, now)),
            None => format!("a durable sleep, until {}", when(s.until_ms, now)),
        };
        line(
            &mut out,
            "suspended",
            format!("waits for {what}; since {}", when(s.since_ms, now)),
        );
    }
    let max = match &v.record {
        Some(Ok(r)) if r.max_attempts > 0 => format!(" of {}", r.max_attempts),
        _ => match topic_max {
            Some(max) => format!(" of {max} (the topic's max_attempts)"),
            None => " (the topic's max_attempts: not in this queues.toml)".into(),
        },
    };
    let attempts = if v.suspension.is_some() {
        // its handler ran, but suspending gives the attempt back
        format!(
            "{} used{max} (it ran until it suspended: a durable sleep or wait uses no attempt)",
            v.attempts
        )
    } else {
        format!("{} started{max}", v.attempts)
    };
    line(&mut out, "attempts", attempts);
    if let JobState::Dead(info) = &v.state {
        line(&mut out, "reason", info.reason.clone());
        if let Some(h) = &info.handler {
            line(&mut out, "handler", h.clone());
        }
    }
    if let Some(p) = &v.progress {
        let mut said = Vec::new();
        if let Some(percent) = p.percent {
            said.push(format!("{percent}%"));
        }
        if let Some(detail) = &p.detail {
            said.push(detail.to_string());
        }
        said.push(format!(
            "(attempt {}, reported {})",
            p.attempt,
            when(p.at_ms, now)
        ));
        line(&mut out, "progress", said.join(" "));
    }
    if let Some(f) = &v.last_failure {
        let by = f
            .handler
            .as_deref()
            .map(|h| format!(" [handler {h}]"))
            .unwrap_or_default();
        line(&mut out, "last error", format!("{}{by}", f.error));
    }
    if !v.history.is_empty() {
        out.push_str(&history_table(&v.history, now));
    }
    if v.logs_bytes > 0 {
        line(
            &mut out,
            "logs",
            format!(
                "{} (`hourglass logs {topic} {}`)",
                bytesize::ByteSize(v.logs_bytes).display().iec(),
                v.id
            ),
        );
    }
    if let Some(key) = &v.key {
        line(&mut out, "key", key.clone());
    }
    if let Some(j) = &v.journal {
        out.push_str(&super::journal::journal_text(j, now));
    }
    match &v.record {
        Some(Ok(r)) => {
            line(&mut out, "enqueued", when(r.enqueued_at_ms, now));
            if let Some(version) = &r.version {
                line(&mut out, "pinned to", format!("handler version {version}"));
            }
            if let Some(trace) = &r.trace {
                line(&mut out, "trace", trace.traceparent.clone());
            }
            line(&mut out, "payload", preview(&r.payload));
        }
        Some(Err(e)) => line(&mut out, "payload", format!("unreadable: {e}")),
        None => line(&mut out, "payload", "deleted".into()),
    }
    out
}

/// The job's story: each attempt, how it ended and what it used, one line
/// each, with its error under it.
fn history_table(history: &[AttemptCost], now: u64) -> String {
    let ms = |us: u64| format!("{:.1} ms", us as f64 / 1000.0);
    let size = |b: u64| bytesize::ByteSize(b).display().iec().to_string();
    let mut out = format!(
        "  {:<10} {:<7} {:<13} {:>10} {:>10} {:>10} {:>9}  {:<14} {}\n",
        "history", "attempt", "ended", "cpu", "wall", "memory", "start", "outbound http", "ran"
    );
    for c in history {
        let u = &c.usage;
        let http = if u.requests == 0 {
            "-".to_owned()
        } else {
            format!(
                "{} req, {} out, {} in",
                u.requests,
                size(u.bytes_out),
                size(u.bytes_in)
            )
        };
        let outcome = match (c.outcome, c.waits_until_ms) {
            (Some(AttemptOutcome::Suspend), Some(until)) => match &c.waits_for {
                Some(signal) => format!("waits {signal}"),
                None => format!("sleeps {}s", until.saturating_sub(c.ended_at_ms) / 1000),
            },
            (Some(o), _) => serde_json::to_value(o)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            (None, _) => "-".into(),
        };
        let ran = match c.started_at_ms {
            0 => String::new(),
            at => when(at, now),
        };
        out.push_str(&format!(
            "  {:<10} {:<7} {:<13} {:>10} {:>10} {:>10} {:>9}  {http:<14} {ran}\n",
            "",
            c.attempt,
            outcome,
            ms(u.cpu_us),
            ms(u.wall_us),
            size(u.memory_peak),
            ms(u.start_us),
        ));
        if let Some(error) = &c.error {
            out.push_str(&format!("  {:<10} {:<7} {error}\n", "", ""));
        }
    }
    out
}

/// The payload's size and its first 200 characters, as written (quotes
/// and all); control characters escaped, bytes that are not UTF-8 shown as
/// U+FFFD.
fn preview(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(&payload[..payload.len().min(200)]);
    let shown: String = text
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_debug().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect();
    let more = if payload.len() > 200 { "…" } else { "" };
    format!("{} bytes: {shown}{more}", payload.len())
}

/// A kept end as `inspect` shows it once the job left the pipeline.
fn end_text(topic: &str, id: &str, end: &JobEnd, now: u64) -> String {
    let mut out = format!("{topic}/{id}\n");
    let line = |out: &mut String, k: &str, val: String| out.push_str(&format!("  {k:<10} {val}\n"));
    line(
        &mut out,
        "state",
        format!(
            "{} {} (its end is kept: results.keep)",
            end.state.as_str(),
            when(end.at_ms, now.max(now_ms()))
        ),
    );
    if end.attempts > 0 {
        line(&mut out, "attempts", end.attempts.to_string());
    }
    if let Some(reason) = &end.reason {
        line(&mut out, "reason", reason.clone());
    }
    if let Some(version) = &end.version {
        line(&mut out, "handler", version.clone());
    }
    if let Some(result) = &end.result {
        line(&mut out, "result", preview(result));
    }
    if !end.history.is_empty() {
        out.push_str(&history_table(&end.history, now));
    }
    if let Some(logs) = &end.logs {
        line(
            &mut out,
            "logs",
            format!(
                "{} kept with its end (`hourglass logs {topic} {id}`)",
                bytesize::ByteSize(logs.len() as u64).display().iec()
            ),
        );
    }
    out
}
