//! Builds the example handler crates in `handlers/` for wasm32-wasip2 (as
//! components), and the JavaScript probe in `js/` with componentize-js, and
//! exports each artifact's path as a constant, so tests never hard-code
//! `target/...` paths.

use std::path::{Path, PathBuf};
use std::process::Command;

const HANDLERS: [&str; 8] = [
    "echo",
    "flaky",
    "order_cancel",
    "slow",
    "panic",
    "membomb",
    "probe",
    "webhook",
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
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let js = build_js(&manifest_dir.join("js"), &root.join("wit"), &out_dir);
    consts.push_str(&format!(
        "/// The JavaScript probe, built by componentize-js with its default features.\npub const JS_PROBE: &str = {:?};\n",
        js.display().to_string()
    ));
    std::fs::write(out_dir.join("components.rs"), consts).unwrap();
}

/// `npm install` (once, the versions in the lockfile, which it leaves as it
/// is) and `componentize-js` on `js/probe.js`. Not `npm ci`: npm 11 finds the
/// lockfile "out of sync" over optional packages for other platforms.
/// `js/package.json` names `@bytecodealliance/preview2-shim` itself because
/// componentize-js 0.23.0 imports it without declaring it: a fresh install
/// from the lockfile alone leaves it out.
fn build_js(js: &Path, wit: &Path, out_dir: &Path) -> PathBuf {
    for watched in ["probe.js", "package.json", "package-lock.json"] {
        println!("cargo:rerun-if-changed={}", js.join(watched).display());
    }
    let npm_missing = "npm is needed to build the JavaScript test handler: run scripts/setup (it installs Debian's nodejs and npm)";
    let componentize = js.join("node_modules/.bin/componentize-js");
    if !componentize.is_file() {
        let status = Command::new("npm")
            .args([
                "install",
                "--no-save",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ])
            .current_dir(js)
            .status()
            .expect(npm_missing);
        assert!(status.success(), "npm install in {} failed", js.display());
    }
    let wasm = out_dir.join("js_probe.wasm");
    let output = Command::new(&componentize)
        .arg("--wit")
        .arg(wit)
        .args(["--world-name", "handler", "-o"])
        .arg(&wasm)
        .arg(js.join("probe.js"))
        .output()
        .expect(npm_missing);
    assert!(
        output.status.success() && wasm.is_file(),
        "componentize-js failed on {}: {}{}",
        js.join("probe.js").display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    wasm
}
