//! `hourglass check`: validate queues.toml and compile every handler against
//! the contract, without connecting to Redis or running anything.

use std::path::Path;

use anyhow::Context;

use super::{Failure, load_config};
use crate::wasm::Runtime;

pub(super) async fn run(path: &Path) -> Result<(), Failure> {
    let config = load_config(path)?;
    let report = tokio::task::spawn_blocking(move || {
        let runtime =
            Runtime::new(1, config.max_memory()).context("creating the WebAssembly engine")?;
        let mut lines = Vec::new();
        for topic in &config.topics {
            runtime.load(&topic.handler).map_err(Failure::input)?;
            lines.push(format!(
                "  {:<24} {} (priority {}, concurrency {}, timeout {}, {} attempts)",
                topic.name,
                topic.handler.display(),
                topic.priority,
                topic.concurrency,
                humantime::format_duration(topic.timeout),
                topic.max_attempts
            ));
        }
        Ok::<_, Failure>((config.path.display().to_string(), lines))
    })
    .await
    .context("checking handlers")??;
    println!("{}: ok, {} topics", report.0, report.1.len());
    for line in report.1 {
        println!("{line}");
    }
    Ok(())
}
