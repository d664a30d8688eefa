//! `hourglass build`: build handler projects in any language (the
//! `hourglass-builder` crate), check each component against the contract and
//! compile it into the runner's compile cache (so a running runner swaps it
//! in from the cache instead of compiling it: seconds for a big component),
//! then place it in handlers_dir, written to a temporary name and renamed so
//! a running runner never sees a half-written file.

use std::path::PathBuf;

use anyhow::{Context, anyhow};
use hourglass_builder::{BuildError, Project};

use super::Exit;
use crate::wasm::Runtime;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    hourglass build .                   the project in this folder\n  \
    hourglass build handlers/resize     a Rust crate or workspace (Cargo.toml)\n  \
    hourglass build py-mail js-hooks    a Python (pyproject.toml or app.py) and a JavaScript (package.json) project\n\
    Rust needs the wasm32-wasip2 target (rustup target add wasm32-wasip2). Python and JavaScript \
    need python3 with venv, or Node.js and npm: the first build installs componentize-py (PyPI) \
    or componentize-js (npm) into the project's .hourglass/ folder; set HOURGLASS_TOOLCHAINS to \
    a folder to share one install among projects. Each component is checked against the contract \
    and compiled into the compile cache of queues.toml's runner before it is placed: a runner on \
    this machine then swaps it in from the cache.")]
pub(super) struct Args {
    /// Project folders to build.
    #[arg(default_value = ".")]
    projects: Vec<PathBuf>,
    /// Where to put the .wasm files (default: handlers_dir from queues.toml, else ./handlers).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub(super) async fn run(config: &std::path::Path, args: Args) -> Result<(), Exit> {
    let runner = crate::Config::load_for(config, crate::config::Check::Producer).ok();
    let cache = runner.as_ref().and_then(|c| c.runner.compile_cache.clone());
    let out = match (args.out, runner) {
        (Some(out), _) => out,
        (None, Some(c)) => c.runner.handlers_dir,
        (None, None) => PathBuf::from("handlers"),
    };
    // building runs compilers for seconds to minutes: off the async runtime
    tokio::task::spawn_blocking(move || build_all(&args.projects, &out, cache.as_deref()))
        .await
        .map_err(|e| anyhow!("the build panicked: {e}"))?
}

fn build_all(
    projects: &[PathBuf],
    out: &std::path::Path,
    cache: Option<&std::path::Path>,
) -> Result<(), Exit> {
    let runtime = Runtime::new(1, cache).context("creating the WebAssembly engine")?;
    let failure = |e: BuildError| {
        if e.is_input() {
            Exit::input(e)
        } else {
            Exit::from(e)
        }
    };
    for dir in projects {
        let project = Project::open(dir).map_err(failure)?;
        let started = std::time::Instant::now();
        let built = project
            .build(&mut |note| eprintln!("{note}"))
            .map_err(failure)?;
        for component in built {
            // what cannot serve is never placed where a runner would load it
            let compiled = std::time::Instant::now();
            runtime.load(&component).map_err(Exit::input)?;
            let compiled = compiled.elapsed();
            let placed = hourglass_builder::place(&component, out).map_err(failure)?;
            let size = std::fs::metadata(&placed).map(|m| m.len()).unwrap_or(0);
            println!(
                "built {} ({}, {}, {:.1} s; checked and compiled{} in {:.1} s)",
                placed.display(),
                project.lang(),
                bytesize::ByteSize(size).display().si(),
                (started.elapsed() - compiled).as_secs_f64(),
                if cache.is_some() {
                    " into the runner's cache"
                } else {
                    ""
                },
                compiled.as_secs_f64()
            );
        }
    }
    Ok(())
}
