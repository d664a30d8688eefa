//! `hourglass upgrade TOPIC --to VERSION [--dry-run] [ID...|--all]`: move
//! in-flight journaled jobs to another handler version, each only if a
//! replay check of its journal on that version passes (docs: "Changing
//! durable code"). The checks run here, on this machine's kept versions
//! (`[runner] versions_dir`) or the topic's handler file; nothing they run
//! reaches the world.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow};

use super::{Exit, load_config, topic_of};
use crate::redis::{check_version, connect};
use crate::reload::Versions;
use crate::upgrade::{Upgrader, Which};
use crate::wasm::{LoadedHandler, Runtime};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    hourglass upgrade checkout --to 3fa1c2d4e5b60718 --all --dry-run   check every journaled job, move none\n  \
    hourglass upgrade checkout --to 3fa1c2d4e5b60718 --all             move each whose check passes\n  \
    hourglass upgrade checkout --to 3fa1c2d4e5b60718 order-1042        one job\n\
    Exit status: 0 the checks ran (the report says what moved and why the rest did not),\n\
    1 Redis or a handler failed, 2 bad input (an unknown topic or version).")]
pub(super) struct Args {
    /// The topic, as named in queues.toml.
    topic: String,
    /// The version to move the jobs to: one `hourglass versions TOPIC` lists.
    #[arg(long, value_name = "VERSION")]
    to: String,
    /// Check only: report which jobs would move, move none.
    #[arg(long)]
    dry_run: bool,
    /// Every job of the topic with a journal.
    #[arg(long, conflicts_with = "ids")]
    all: bool,
    /// The jobs to check and move, by id.
    #[arg(required_unless_present = "all")]
    ids: Vec<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Exit> {
    check_version(&args.to).map_err(|e| Exit::input(anyhow!("--to: {e}")))?;
    let config = load_config(config)?;
    let topic = topic_of(&config, &args.topic)?
        .ok_or_else(|| Exit::input(anyhow!("topic {:?} is not in queues.toml", args.topic)))?
        .clone();
    let runtime = Arc::new(
        Runtime::new(8, config.runner.compile_cache.as_deref())
            .context("creating the WebAssembly engine")?,
    );
    let candidate = candidate(&runtime, &config, &topic, &args.to).await?;
    let (queue, _embedded) = connect(&config).await?;
    let upgrader = Upgrader::new(queue, runtime, config.runner.max_payload);
    let which = if args.all {
        Which::All
    } else {
        Which::Ids(args.ids)
    };
    let report = upgrader
        .run(&topic, &candidate, which, args.dry_run)
        .await
        .map_err(|e| match e.is_input() {
            true => Exit::input(e),
            false => Exit::from(e),
        })?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("a report serializes")
        );
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

/// Version `version` of `topic`'s handler: kept on this machine, or what
/// its handler file holds.
async fn candidate(
    runtime: &Arc<Runtime>,
    config: &crate::Config,
    topic: &crate::config::TopicConfig,
    version: &str,
) -> Result<LoadedHandler, Exit> {
    let versions = Arc::new(Versions::open(
        &config.runner.versions_dir,
        config.runner.keep_versions,
        runtime.clone(),
    ));
    let kept = versions.load(version).await;
    if let Ok(handler) = kept {
        return Ok(handler);
    }
    let (runtime, file) = (runtime.clone(), topic.handler.clone());
    let loaded = tokio::task::spawn_blocking(move || runtime.load(&file))
        .await
        .map_err(|e| anyhow!("compiling panicked: {e}"))?;
    match loaded {
        Ok(handler) if handler.hash() == version => Ok(handler),
        Ok(handler) => Err(Exit::input(anyhow!(
            "version {version} is neither kept in {} nor in the topic's handler file {} (which holds {}): run the upgrade where a runner keeps it, or through a runner's API",
            config.runner.versions_dir.display(),
            topic.handler.display(),
            handler.hash()
        ))),
        Err(e) => Err(Exit::input(anyhow!(
            "version {version} is not kept in {}, and the topic's handler file does not load: {e}",
            config.runner.versions_dir.display()
        ))),
    }
}
