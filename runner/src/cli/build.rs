//! `hourglass build`: compile handler crates for wasm32-wasip2 and place each
//! component in handlers_dir, written to a temporary name and renamed so a
//! running runner never sees a half-written file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, anyhow};

use super::Failure;

#[derive(Debug, clap::Args)]
#[command(after_help = "Example: hourglass build handlers/order_cancel\n\
    Needs the wasm32-wasip2 target: rustup target add wasm32-wasip2")]
pub(super) struct Args {
    /// Crate or workspace folders (with a Cargo.toml) to build.
    #[arg(default_value = "handlers")]
    crates: Vec<PathBuf>,
    /// Where to put the .wasm files (default: handlers_dir from queues.toml, else ./handlers).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub(super) async fn run(config: &Path, args: Args) -> Result<(), Failure> {
    let out = match args.out {
        Some(out) => out,
        None => match crate::Config::load_for(config, crate::config::Check::Producer) {
            Ok(c) => c.runner.handlers_dir,
            Err(_) => PathBuf::from("handlers"),
        },
    };
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    for krate in &args.crates {
        let manifest = krate.join("Cargo.toml");
        if !manifest.is_file() {
            return Err(Failure::input(anyhow!(
                "{} has no Cargo.toml",
                krate.display()
            )));
        }
        for wasm in build(&manifest)? {
            let name = wasm.file_name().expect("artifact has a name");
            let target = out.join(name);
            let tmp = out.join(format!(".{}.tmp", name.to_string_lossy()));
            std::fs::copy(&wasm, &tmp).with_context(|| format!("copying {}", wasm.display()))?;
            std::fs::rename(&tmp, &target)
                .with_context(|| format!("placing {}", target.display()))?;
            println!("built {}", target.display());
        }
    }
    Ok(())
}

/// `cargo build --release --target wasm32-wasip2` on `manifest`; the .wasm artifacts.
fn build(manifest: &Path) -> Result<Vec<PathBuf>, Failure> {
    let output = Command::new("cargo")
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
        ])
        .arg("--manifest-path")
        .arg(manifest)
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo (is the Rust toolchain installed?)")?;
    if !output.status.success() {
        return Err(anyhow!("cargo build failed for {}", manifest.display()).into());
    }
    let mut wasm = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] == "compiler-artifact" {
            for file in msg["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str())
            {
                if file.ends_with(".wasm") {
                    wasm.push(PathBuf::from(file));
                }
            }
        }
    }
    if wasm.is_empty() {
        return Err(Failure::input(anyhow!(
            "{} built no component; a handler crate needs crate-type = [\"cdylib\"]",
            manifest.display()
        )));
    }
    Ok(wasm)
}
