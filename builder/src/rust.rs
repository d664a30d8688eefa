//! A Rust handler crate (or a workspace of them): `cargo build --release
//! --target wasm32-wasip2`, every `.wasm` artifact a component.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::tool::Step;
use crate::{BuildError, Lang};

/// Build the crate or workspace in `dir`; its components.
pub(crate) fn build(dir: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let manifest = dir.join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--release",
        "--target",
        "wasm32-wasip2",
        "--message-format=json-render-diagnostics",
    ])
    .arg("--manifest-path")
    .arg(&manifest);
    let shown = dir.display().to_string();
    let output = Step {
        name: "cargo build --target wasm32-wasip2",
        project: &shown,
        lang: Lang::Rust,
        hint: "install Rust with rustup; the target: rustup target add wasm32-wasip2",
        live_stderr: true,
    }
    .run(&mut cmd)?;
    let mut wasm = Vec::new();
    for line in output.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] == "compiler-artifact" {
            let files = msg["filenames"].as_array().into_iter().flatten();
            for file in files.filter_map(|f| f.as_str()) {
                if file.ends_with(".wasm") {
                    wasm.push(PathBuf::from(file));
                }
            }
        }
    }
    if wasm.is_empty() {
        return Err(BuildError::Project(format!(
            "{} built no component; a handler crate needs crate-type = [\"cdylib\"]",
            manifest.display()
        )));
    }
    Ok(wasm)
}
