//! Builds the example handler crates in `handlers/` for wasm32-wasip2 (as
//! components), and the Python and JavaScript handlers (the probes here, the
//! examples in `handlers/`) with hourglass-builder, as `hourglass build`
//! does, and exports each component's path as a constant, so tests never
//! hard-code `target/...` paths.

use std::path::{Path, PathBuf};
use std::process::Command;

const HANDLERS: [&str; 14] = [
    "echo",
    "batcher",
    "checkout",
    "checkout_v2",
    "checkout_v3",
    "checkout_v4",
    "noop",
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
    let toolchains = shared_toolchains(&out_dir);
    consts.push_str(&format!(
        "/// Where these builds install the Python and JavaScript toolchains \
         (`HOURGLASS_TOOLCHAINS`), for tests that build more projects.\n\
         pub const TOOLCHAINS: &str = {:?};\n",
        toolchains.display().to_string()
    ));
    for (name, dir, files, doc) in OTHER_LANGUAGES {
        let dir = root.join(dir);
        for file in files {
            println!("cargo:rerun-if-changed={}", dir.join(file).display());
        }
        let wasm = build_project(&dir, &toolchains);
        consts.push_str(&format!(
            "/// {doc}\npub const {name}: &str = {:?};\n",
            wasm.display().to_string()
        ));
    }
    consts.push_str(&python_checkout(&root, &out_dir, &toolchains));
    std::fs::write(out_dir.join("components.rs"), consts).unwrap();
}

/// The Python checkout saga (`tests/support/py-checkout/app.py`), built once
/// per version of the tests' upgrade story, each with its `VERSION`: the
/// constants `PY_CHECKOUT_V1` to `_V4`.
fn python_checkout(root: &Path, out_dir: &Path, toolchains: &Path) -> String {
    let source = root.join("tests/support/py-checkout/app.py");
    println!("cargo:rerun-if-changed={}", source.display());
    let app = std::fs::read_to_string(&source).unwrap();
    let mut consts = String::new();
    for version in 1..=4 {
        let dir = out_dir.join(format!("py-checkout-v{version}"));
        std::fs::create_dir_all(&dir).unwrap();
        let pyproject = format!(
            "[project]\nname = \"py_checkout_v{version}\"\nversion = \"0.0.{version}\"\n\n[tool.hourglass]\nmodule = \"app\"\n"
        );
        write_if_changed(&dir.join("pyproject.toml"), &pyproject);
        write_if_changed(&dir.join("app.py"), &format!("VERSION = {version}\n{app}"));
        let wasm = build_project(&dir, toolchains);
        consts.push_str(&format!(
            "/// The Python checkout saga, version {version} (`tests/support/py-checkout`).\npub const PY_CHECKOUT_V{version}: &str = {:?};\n",
            wasm.display().to_string()
        ));
    }
    consts
}

/// Write `text` to `path` unless it holds it already (a rebuild then finds
/// the project unchanged).
fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap();
    }
}

/// Handlers in other languages: (constant, project folder, its sources, what it is).
const OTHER_LANGUAGES: [(&str, &str, [&str; 2], &str); 8] = [
    (
        "PY_BATCH",
        "tests/support/py-batch",
        ["app.py", "pyproject.toml"],
        "The Python batch handler (`hourglass.batch_handler`).",
    ),
    (
        "JS_BATCH",
        "tests/support/js-batch",
        ["app.js", "package.json"],
        "The JavaScript batch handler (`batchHandler`).",
    ),
    (
        "JS_PROBE",
        "tests/support/js",
        ["probe.js", "package.json"],
        "The JavaScript probe without the SDK (componentize-js, default features).",
    ),
    (
        "JS_SDK_PROBE",
        "tests/support/js-sdk",
        ["app.js", "package.json"],
        "The JavaScript probe on the SDK.",
    ),
    (
        "PY_PROBE",
        "tests/support/py",
        ["app.py", "pyproject.toml"],
        "The Python probe on the SDK.",
    ),
    (
        "PY_RAW_PROBE",
        "tests/support/py-raw",
        ["app.py", "pyproject.toml"],
        "The Python probe without the SDK (an uncaught exception traps).",
    ),
    (
        "REFUND",
        "handlers/refund",
        ["app.py", "pyproject.toml"],
        "The refund example handler (Python).",
    ),
    (
        "NOTIFY",
        "handlers/notify",
        ["app.js", "package.json"],
        "The notify example handler (JavaScript).",
    ),
];

/// One install of each toolchain for every build of these projects, kept
/// with the build (`<target>/hourglass-toolchains`), so a rebuild reuses it.
fn shared_toolchains(out_dir: &Path) -> PathBuf {
    // OUT_DIR is <target>/<profile>/build/<package>-<hash>/out
    let build = out_dir
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "build"))
        .expect("OUT_DIR is inside the target folder's build/");
    build
        .parent()
        .and_then(Path::parent)
        .expect("a target folder")
        .join("hourglass-toolchains")
}

/// Build one project exactly as `hourglass build` does (hourglass-builder);
/// its component.
fn build_project(dir: &Path, toolchains: &Path) -> PathBuf {
    let mut project =
        hourglass_builder::Project::open(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    project.share_toolchains(toolchains);
    let built = project
        .build(&mut |note| println!("cargo:warning={note}"))
        .unwrap_or_else(|e| {
            panic!(
                "building {} failed: {e}\n(scripts/setup installs python3-venv, nodejs and npm)",
                dir.display()
            )
        });
    built
        .into_iter()
        .next()
        .expect("a project builds one component")
}
