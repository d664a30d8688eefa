//! The BullMQ contender: `bench/bullmq/bench.mjs` under Node, its packages
//! installed from the committed lockfile by [`install`].

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bullmq")
}

/// Install the locked packages (npm install honours package-lock.json).
pub fn install() -> anyhow::Result<()> {
    if dir().join("node_modules/bullmq").is_dir() {
        return Ok(());
    }
    eprintln!("installing BullMQ (npm install in {})", dir().display());
    let status = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund"])
        .current_dir(dir())
        .stdout(Stdio::null())
        .status()
        .context("running npm (is Node.js installed? apt-get install nodejs npm)")?;
    if !status.success() {
        bail!("npm install failed in {}", dir().display());
    }
    Ok(())
}

/// Run one workload; its JSON result.
pub fn run(
    workload: &str,
    port: u16,
    args: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let out = Command::new("node")
        .arg(dir().join("bench.mjs"))
        .arg(workload)
        .arg(port.to_string())
        .arg(args.to_string())
        .stderr(Stdio::inherit())
        .output()
        .context("running node")?;
    if !out.status.success() {
        bail!("bullmq {workload} failed: {}", out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).with_context(|| format!("bullmq {workload} printed {stdout:?}"))
}
