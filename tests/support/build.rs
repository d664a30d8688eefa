//! Builds the example handler crates in `handlers/` for wasm32-wasip2 (as
//! components) and exports each artifact's path as a constant, so tests never
//! hard-code `target/...` paths.

use std::path::{Path, PathBuf};
use std::process::Command;

const HANDLERS: [&str; 7] = [
    "echo",
    "flaky",
    "order_cancel",
    "slow",
    "panic",
    "membomb",
    "probe",
];

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().parent().unwrap().to_owned();
    let handlers = root.join("handlers");
    for watched in ["wit", "sdk/src", "sdk/Cargo.toml", "handlers/Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    for h in HANDLERS {
        println!("cargo:rerun-if-changed={}", handlers.join(h).display());
    }
    let target_dir = handlers.join("target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&handlers)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(handlers.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target_dir)
        // the outer build's flags are for the host, not for wasm
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_PROFILE_RELEASE_DEBUG")
        // `cargo clippy` on the workspace must not lint (or fail) the nested build
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER")
        .status()
        .expect("running cargo for the handlers");
    assert!(
        status.success(),
        "building handlers/ for wasm32-wasip2 failed (is the target installed? rustup target add wasm32-wasip2)"
    );
    let mut consts = String::new();
    for h in HANDLERS {
        let path = target_dir
            .join("wasm32-wasip2/release")
            .join(format!("{h}.wasm"));
        assert!(path.is_file(), "{} was not built", path.display());
        consts.push_str(&format!(
            "/// The `{h}` handler component.\npub const {}: &str = {:?};\n",
            h.to_uppercase(),
            path.display().to_string()
        ));
    }
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("components.rs");
    std::fs::write(out, consts).unwrap();
}
