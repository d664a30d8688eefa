//! `hourglass new NAME`: a handler project anywhere on disk, ready for
//! `hourglass build` and `hourglass check`: a Rust crate depending on
//! `hourglass-sdk` (by path or git), a starter handler, and a queues.toml
//! that serves it.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};

use super::Failure;

/// The SDK of the source tree this binary was built from, if it is still there.
const BUILT_FROM_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk");

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Lang {
    /// A Rust crate built for wasm32-wasip2.
    Rust,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  \
    hourglass new resize-image --dir ~/work\n  \
    cd ~/work/resize-image && hourglass build . && hourglass check\n\
    The project's hourglass-sdk dependency points at --sdk: a folder (path dependency) or a \
    git URL (git dependency); by default the SDK of the source tree this hourglass was built from.")]
pub(super) struct Args {
    /// The handler's name: its crate, its component (NAME.wasm, '-' as '_') and its topic.
    name: String,
    /// The handler's language.
    #[arg(long, value_enum, default_value = "rust")]
    lang: Lang,
    /// Where to create the project folder NAME.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// hourglass-sdk as a folder or a git URL (https://..., ssh://..., git@...).
    #[arg(long)]
    sdk: Option<String>,
}

/// The `hourglass-sdk = ...` dependency line.
fn sdk_dependency(sdk: Option<&str>) -> Result<String, Failure> {
    let is_git = |s: &str| {
        s.starts_with("https://")
            || s.starts_with("http://")
            || s.starts_with("ssh://")
            || s.starts_with("git@")
    };
    let path = match sdk {
        Some(url) if is_git(url) => return Ok(format!("{{ git = {url:?} }}")),
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(BUILT_FROM_SDK),
    };
    let path = path.canonicalize().map_err(|_| {
        Failure::input(anyhow!(
            "no hourglass-sdk at {}: pass --sdk with the sdk/ folder of an hourglass checkout, \
             or a git URL of the hourglass repository",
            path.display()
        ))
    })?;
    if !path.join("Cargo.toml").is_file() {
        return Err(Failure::input(anyhow!(
            "{} is not the hourglass-sdk crate (no Cargo.toml)",
            path.display()
        )));
    }
    Ok(format!("{{ path = {:?} }}", path.display().to_string()))
}

fn check_name(name: &str) -> Result<(), Failure> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Failure::input(anyhow!(
            "{name:?}: a handler name is 1 to 64 lowercase letters, digits, '-' and '_', starting with a letter"
        )))
    }
}

pub(super) async fn run(args: Args) -> Result<(), Failure> {
    check_name(&args.name)?;
    let Lang::Rust = args.lang;
    let sdk = sdk_dependency(args.sdk.as_deref())?;
    let root = args.dir.join(&args.name);
    if root.exists() {
        return Err(Failure::input(anyhow!(
            "{} already exists; choose another name or --dir",
            root.display()
        )));
    }
    let component = args.name.replace('-', "_");
    let files = [
        ("Cargo.toml", cargo_toml(&args.name, &sdk)),
        ("src/lib.rs", LIB_RS.replace("NAME", &component)),
        ("queues.toml", QUEUES_TOML.replace("NAME", &component)),
        (
            ".gitignore",
            "/target\n/handlers/*.wasm\n/.hourglass\n".to_owned(),
        ),
    ];
    for (file, text) in &files {
        write(&root.join(file), text)?;
    }
    println!("created {} (Rust, hourglass-sdk = {sdk})", root.display());
    println!(
        "next:\n  cd {}\n  hourglass build .\n  hourglass check",
        root.display()
    );
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn cargo_toml(name: &str, sdk: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
# a component for wasm32-wasip2: `hourglass build .`
crate-type = ["cdylib"]

[dependencies]
hourglass-sdk = {sdk}
serde = {{ version = "1", features = ["derive"] }}
serde_json = "1"

[profile.release]
opt-level = "s"
lto = true
strip = true
codegen-units = 1
panic = "abort"

# its own workspace, even inside another one
[workspace]
"#
    )
}

const LIB_RS: &str = r#"//! The NAME handler: one job in, ack / retry / fail out.

use hourglass_sdk::{Error, Job, Outcome, info};

#[derive(serde::Deserialize)]
struct Task {
    /// Who asked.
    user: String,
}

fn handle(job: Job) -> hourglass_sdk::Result<Outcome> {
    // a payload that is not a Task fails the job for good (dead letter)
    let task: Task = job.json().map_err(|e| Error::fail(format!("bad payload: {e}")))?;
    info!("NAME: job {} for {} (attempt {})", job.id(), task.user, job.attempt());
    Ok(Outcome::Ack)
}

hourglass_sdk::handler!(handle);
"#;

const QUEUES_TOML: &str = r#"# Serves the NAME handler: `hourglass build .`, then `hourglass check`,
# `hourglass run`, and `hourglass enqueue NAME '{"user":"ada"}'`.

[redis]
url = "embedded"            # a local redis-server the runner starts (data in .hourglass/redis)

[runner]
handlers_dir = "handlers"

[[topic]]
name = "NAME"
handler = "NAME.wasm"
"#;
