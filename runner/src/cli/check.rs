//! `hourglass check`: validate queues.toml (including every grant and
//! follow-up target) and compile every handler against the contract, without
//! connecting to Redis or running anything. Compiling fills the compile cache.

use std::path::Path;

use anyhow::Context;

use super::{Exit, load_config};
use crate::wasm::Runtime;

pub(super) async fn run(path: &Path) -> Result<(), Exit> {
    let config = load_config(path)?;
    let report = tokio::task::spawn_blocking(move || {
        let runtime = Runtime::new(1, config.runner.compile_cache.as_deref())
            .context("creating the WebAssembly engine")?;
        let mut lines = Vec::new();
        for topic in &config.topics {
            let unfit = |e: String| Exit::input(anyhow::anyhow!("topic {:?}: {e}", topic.name));
            let handler = runtime
                .load(&topic.handler)
                .map_err(|e| unfit(e.to_string()))?;
            handler.fits_memory(topic.memory).map_err(unfit)?;
            handler
                .fits_batches(topic.batch.is_some())
                .map_err(unfit)?;
            let cpu = topic
                .cpu
                .map(|c| format!(", cpu {}", humantime::format_duration(c)))
                .unwrap_or_default();
            lines.push(format!(
                "  {:<24} {} {} (priority {}, concurrency {}, timeout {}{cpu}, max attempts {})",
                topic.name,
                topic.handler.display(),
                handler.hash(),
                topic.priority,
                topic.concurrency,
                humantime::format_duration(topic.timeout),
                topic.max_attempts
            ));
            if let Some(needs) = handler.needs() {
                lines.push(format!(
                    "  {:<24} each instance: {} of {} memor{} at start, {} table{}",
                    "",
                    bytesize::ByteSize(needs.initial_memory).display().iec(),
                    needs.memories,
                    if needs.memories == 1 { "y" } else { "ies" },
                    needs.tables,
                    if needs.tables == 1 { "" } else { "s" }
                ));
            }
            if let Some(reuse) = topic.reuse {
                lines.push(format!(
                    "  {:<24} reuses instances (up to {} jobs each, idle {}): jobs are NOT isolated from each other; what one leaves in memory the next sees",
                    "",
                    reuse.jobs,
                    humantime::format_duration(reuse.idle)
                ));
            }
            if !topic.may_enqueue.is_empty() {
                lines.push(format!(
                    "  {:<24} may enqueue to {}",
                    "",
                    topic.may_enqueue.join(", ")
                ));
            }
            for (name, _) in &topic.grants.env {
                lines.push(format!("  {:<24} granted ${name}", ""));
            }
            for dir in &topic.grants.dirs {
                let mode = if dir.write { "read-write" } else { "read-only" };
                lines.push(format!(
                    "  {:<24} granted {} as {} ({mode})",
                    "",
                    dir.host.display(),
                    dir.guest
                ));
            }
        }
        Ok::<_, Exit>((
            config.path.display().to_string(),
            config.topics.len(),
            lines,
        ))
    })
    .await
    .context("checking handlers")??;
    let (path, topics, lines) = report;
    let plural = if topics == 1 { "" } else { "s" };
    println!("{path}: ok, {topics} topic{plural}");
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
