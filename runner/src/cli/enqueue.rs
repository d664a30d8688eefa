//! `hourglass enqueue`: add one job to a topic.

use std::io::Read;
use std::path::Path;

use anyhow::anyhow;

use super::{Exit, load_producer_config, topic_of};
use crate::clock::now_ms;
use crate::job_options::JobOptions;
use crate::redis::connect;
use crate::redis::{Enqueued, Queue, QueueError};
use crate::telemetry::{FLUSH_WITHIN, Telemetry, spans};
use prometheus_client::metrics::counter::Counter;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    hourglass enqueue order_cancel '{\"order_id\":42}' --delay 30m\n  \
    hourglass enqueue notify @message.json --at 2026-12-01T09:00:00+01:00 --id user-7-day-23\n  \
    echo -n hello | hourglass enqueue echo -\n  \
    hourglass enqueue report '{\"user\":7}' --id daily-7 --unique-for 24h\n  \
    hourglass enqueue summary '{\"doc\":9}' --id doc-9 --delay 10m --replace\n  \
    hourglass enqueue refund @refund.json --version 3fa1c2d4e5b60718\n  \
    hourglass enqueue report '{\"user\":7}' --account acme\n  \
    hourglass enqueue export '{\"customer\":7}' --key customer-7\n  \
    hourglass enqueue send_code '{\"user\":7}' --expires-in 5m\n  \
    hourglass enqueue digest '{\"user\":7}' --priority 5\n  \
    hourglass enqueue render '{\"doc\":9}' --wait 1m",
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
    /// Sum this job's usage (CPU, attempts, outbound bytes) under this
    /// account, for `hourglass usage` (1 to 64 letters, digits or _-.:@).
    #[arg(long)]
    account: Option<String>,
    /// The job's tenant key (a customer, a tenant; 1 to 128 letters, digits
    /// or _-.:@/): on a topic with `fairness`, keys take turns and
    /// `key_concurrency` / `key_rate` apply per key (see the docs' Many
    /// tenants page).
    #[arg(long)]
    key: Option<String>,
    /// Wait until the job ends (default up to 30s) and print its result:
    /// exit 0 acked, 1 dead or cancelled, 3 its end no longer kept, 124
    /// still running. The topic must keep results (`results` in queues.toml).
    #[arg(long, value_name = "TIMEOUT", num_args = 0..=1, default_missing_value = "30s")]
    wait: Option<String>,
    /// With --wait: print the end as JSON.
    #[arg(long, requires = "wait")]
    json: bool,
    /// Continue this W3C trace: the job's attempts are spans under it (see
    /// the docs' Tracing page). Also read from $TRACEPARENT.
    #[arg(long, env = "TRACEPARENT")]
    traceparent: Option<String>,
    /// The W3C tracestate to carry with --traceparent. Also $TRACESTATE.
    #[arg(long, env = "TRACESTATE", requires = "traceparent")]
    tracestate: Option<String>,
    /// Not started this long after now (e.g. 30s, 5m), the job expires: it
    /// is not run, and is dead-lettered with reason "expired" (or dropped,
    /// with the topic's on_expire = "drop"). Retries after it do not run either.
    #[arg(long, conflicts_with = "expires_at")]
    expires_in: Option<String>,
    /// Not started by this time (RFC 3339), the job expires (see --expires-in).
    #[arg(long)]
    expires_at: Option<String>,
    /// Among the topic's due jobs, a higher priority starts first: 0 (the
    /// highest, the default) to 9. Never before it is due.
    #[arg(long, allow_negative_numbers = true, value_parser = priority_arg)]
    priority: Option<i64>,
}

/// `--priority` as a number; the range is checked with the job's other
/// options (`JobOptions`), so the CLI and the API say the same.
fn priority_arg(text: &str) -> Result<i64, String> {
    text.parse().map_err(|_| {
        format!(
            "{text:?} is not a priority: a number from 0 (the highest, the default) to {}",
            crate::redis::LOWEST_PRIORITY
        )
    })
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    let topic = topic_of(&config, &args.topic)?;
    let wait = match &args.wait {
        Some(text) => {
            super::wait::keeps_results(topic, &args.topic)?;
            Some(super::wait::wait_time("--wait", text)?)
        }
        None => None,
    };
    let payload = read_payload(
        &args.payload,
        config.runner.max_payload,
        "[runner] max_payload in queues.toml",
    )?;
    let now = now_ms();
    let options = JobOptions {
        id: args.id,
        delay: args.delay,
        at: args.at,
        due_at_ms: None,
        max_attempts: args.max_attempts,
        unique_for: args.unique_for,
        replace: args.replace,
        version: args.version,
        account: args.account,
        key: args.key,
        traceparent: args.traceparent,
        tracestate: args.tracestate,
        expires_in: args.expires_in,
        expires_at: args.expires_at,
        priority: args.priority,
    };
    let mut job = options.into_job(payload, now).map_err(|e| {
        let flag = format!("--{}", e.field.replace('_', "-"));
        Exit::input(anyhow!("{flag}: {}", e.why))
    })?;
    let due_at_ms = job.due_at_ms;
    let (queue, _embedded) = connect(&config).await?;
    if let Some(v) = &job.version {
        kept(&queue, &args.topic, v).await?;
    }
    // with spans exported ([telemetry] or the OTLP variables), the enqueue
    // is a producer span, as the API's is; the job continues from it
    let telemetry = match &config.telemetry {
        Some(cfg) => Telemetry::start(cfg, Counter::default())?,
        None => Telemetry::off(),
    };
    let span = telemetry.begin(job.trace.as_ref());
    if let Some(span) = &span {
        job.trace = Some(span.trace_context());
    }
    let answer = queue
        .enqueue(&queue.keys(&args.topic), std::slice::from_ref(&job), now)
        .await;
    if let Some(span) = &span {
        telemetry.end(span, spans::enqueue(&args.topic, 1, &answer));
        telemetry.flush(FLUSH_WITHIN).await;
    }
    let answer = answer.map_err(|e| match e {
        QueueError::Invalid(_) => Exit::input(e),
        e => e.into(),
    })?;
    let due = jiff::Timestamp::from_millisecond(due_at_ms as i64)
        .map(|t| t.to_string())
        .unwrap_or_default();
    // with --wait, stdout is the result's: what happened goes to stderr
    let say = |line: String| match wait {
        Some(_) => eprintln!("{line}"),
        None => println!("{line}"),
    };
    let id = match answer.first() {
        Some(Enqueued::New(id)) => {
            say(format!("enqueued {}/{id}, due {due}", args.topic));
            id
        }
        Some(Enqueued::Duplicate(id)) => {
            say(format!(
                "duplicate: {}/{id} is already live (or reserved by --unique-for); not enqueued again",
                args.topic
            ));
            id
        }
        Some(Enqueued::Replaced(id)) => {
            say(format!(
                "replaced: {}/{id} was waiting; it now has this payload, due {due}",
                args.topic
            ));
            id
        }
        Some(Enqueued::Running(id)) => {
            return Err(anyhow!(
                "not replaced: {}/{id} is running now; enqueue again once it is done",
                args.topic
            )
            .into());
        }
        Some(Enqueued::Journaled(id)) => {
            return Err(anyhow!(
                "not replaced: {}/{id} has a journal (a durable handler's steps ran on its payload); \
                 cancel it and enqueue afresh",
                args.topic
            )
            .into());
        }
        None => return Err(anyhow!("redis did not answer the enqueue").into()),
    };
    match wait {
        Some(timeout) => super::wait::wait(&queue, &args.topic, id, timeout, args.json).await,
        None => Ok(()),
    }
}

/// The payload `arg` names (text, @FILE or - for stdin), at most `max`
/// bytes (`limit` says which limit that is).
pub(super) fn read_payload(arg: &str, max: u64, limit: &str) -> Result<Vec<u8>, Exit> {
    let bytes = if arg == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .take(max + 1)
            .read_to_end(&mut buf)
            .map_err(|e| Exit::input(anyhow!("reading the payload from standard input: {e}")))?;
        buf
    } else if let Some(file) = arg.strip_prefix('@') {
        let mut buf = Vec::new();
        std::fs::File::open(file)
            .and_then(|f| f.take(max + 1).read_to_end(&mut buf))
            .map_err(|e| Exit::input(anyhow!("reading the payload file {file:?}: {e}")))?;
        buf
    } else {
        arg.as_bytes().to_vec()
    };
    if bytes.len() as u64 > max {
        return Err(Exit::input(anyhow!(
            "the payload is larger than the limit of {max} bytes ({limit})"
        )));
    }
    Ok(bytes)
}

/// Refuse `version` unless `topic` keeps it (a job pinned to a version no
/// runner has would only fail).
pub(super) async fn kept(queue: &Queue, topic: &str, version: &str) -> Result<(), Exit> {
    let (_, versions) = queue.rollouts().versions(&queue.keys(topic)).await?;
    if versions.iter().any(|v| v.version == version) {
        return Ok(());
    }
    let known: Vec<&str> = versions.iter().map(|v| v.version.as_str()).collect();
    Err(Exit::input(anyhow!(
        "--version: topic {topic:?} keeps no version {version} (kept: {})",
        if known.is_empty() {
            "none yet".to_owned()
        } else {
            known.join(", ")
        }
    )))
}
