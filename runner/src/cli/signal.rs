//! `hourglass signal TOPIC ID NAME [PAYLOAD]` and `hourglass wake TOPIC ID`:
//! a durable handler's job told something, or woken early.

use std::path::Path;

use anyhow::anyhow;

use super::wait::UNKNOWN;
use super::{Exit, load_producer_config, topic_of};
use crate::clock::now_ms;
use crate::redis::journal::MAX_SIGNAL;
use crate::redis::{Signalled, Woken, check_id, connect};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "A job that waits for the signal (`wait_for_signal` in its handler) \
    runs at once; one that does not wait yet gets it when it does. The first signal of a \
    name stands: sending it again changes nothing.\n\
    Exit status: 0 sent, 1 the job is dead-lettered, 2 bad input, 3 no such job (never \
    enqueued, done or cancelled).\n\n\
    Example: hourglass signal checkout order-1042 approved '{\"by\":\"ana\"}'"
)]
pub(super) struct SignalArgs {
    /// The topic, as named in queues.toml.
    topic: String,
    /// The job's id.
    id: String,
    /// The signal's name, as the handler waits for it.
    name: String,
    /// The payload the handler receives: literal text, @FILE to read a
    /// file, or - to read standard input (none if not given; at most 64 KiB).
    payload: Option<String>,
    /// Print the API's answer as JSON: `{"id", "signal", "delivered"}`,
    /// delivered being `woken`, `kept` or `duplicate`.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Its sleep ends now (a wait for a signal times out now), and it \
    runs at once, replaying the steps it recorded.\n\
    Exit status: 0 woken, 1 the job is not suspended, 2 bad input, 3 no such job.\n\n\
    Example: hourglass wake checkout order-1042"
)]
pub(super) struct WakeArgs {
    /// The topic, as named in queues.toml.
    topic: String,
    /// The job's id.
    id: String,
    /// Print the API's answer as JSON: `{"id", "woken": true}`.
    #[arg(long)]
    json: bool,
}

pub(super) async fn signal(config: &Path, args: SignalArgs) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    topic_of(&config, &args.topic)?;
    check_id(&args.id).map_err(|e| Exit::input(anyhow!(e)))?;
    crate::redis::journal::check_name("signal", &args.name).map_err(|e| Exit::input(anyhow!(e)))?;
    let payload = match &args.payload {
        Some(arg) => super::enqueue::read_payload(arg, MAX_SIGNAL as u64, "the signal limit")?,
        None => Vec::new(),
    };
    let (queue, _embedded) = connect(&config).await?;
    let keys = queue.keys(&args.topic);
    let (topic, id, name) = (&args.topic, &args.id, &args.name);
    let answer = queue
        .signal(&keys, id, name, &payload, now_ms())
        .await
        .map_err(|e| match e {
            crate::redis::QueueError::Invalid(why) => Exit::input(anyhow!(why)),
            e => e.into(),
        })?;
    let delivered = match answer {
        Signalled::Woken => Some("woken"),
        Signalled::Kept => Some("kept"),
        Signalled::Duplicate => Some("duplicate"),
        Signalled::Dead | Signalled::NoSuchJob => None,
    };
    if let (true, Some(delivered)) = (args.json, delivered) {
        let answer = serde_json::json!({ "id": id, "signal": name, "delivered": delivered });
        println!("{answer}");
        return Ok(());
    }
    match answer {
        Signalled::Woken => {
            println!("signalled {topic}/{id} {name:?}: it waited for it and runs now")
        }
        Signalled::Kept => println!("signalled {topic}/{id} {name:?}: kept until it waits for it"),
        Signalled::Duplicate => {
            println!("{topic}/{id} had signal {name:?} already: the first one stands")
        }
        Signalled::Dead => {
            return Err(anyhow!(
                "{topic}/{id} is dead-lettered: `hourglass dead retry {topic} {id}` first"
            )
            .into());
        }
        Signalled::NoSuchJob => return Err(no_such_job(topic, id)),
    }
    Ok(())
}

pub(super) async fn wake(config: &Path, args: WakeArgs) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    topic_of(&config, &args.topic)?;
    check_id(&args.id).map_err(|e| Exit::input(anyhow!(e)))?;
    let (queue, _embedded) = connect(&config).await?;
    let (topic, id) = (&args.topic, &args.id);
    match queue.wake(&queue.keys(topic), id, now_ms()).await? {
        Woken::Woken if args.json => println!("{}", serde_json::json!({ "id": id, "woken": true })),
        Woken::Woken => println!("woke {topic}/{id}: it runs now"),
        Woken::NotSuspended => {
            return Err(anyhow!(
                "{topic}/{id} is not suspended (it waits for its due time, runs or is dead)"
            )
            .into());
        }
        Woken::NoSuchJob => return Err(no_such_job(topic, id)),
    }
    Ok(())
}

/// No live job `id` in `topic`: exit status 3, as `wait` and `inspect` use.
fn no_such_job(topic: &str, id: &str) -> Exit {
    Exit {
        code: UNKNOWN,
        error: anyhow!("no job {topic}/{id} (never enqueued, done or cancelled)"),
    }
}
