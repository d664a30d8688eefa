//! `hourglass new NAME`: a handler project anywhere on disk, in Rust, Python
//! or JavaScript, ready for `hourglass build` and `hourglass check`: a
//! starter handler and a queues.toml that serves it (`hourglass-builder`
//! holds the templates).

use std::path::PathBuf;

use hourglass_builder::{Lang as BuilderLang, NewProject, SdkSource};

use super::Exit;

/// The SDK of the source tree this binary was built from, if it is still there.
const BUILT_FROM_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk");

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Lang {
    /// A Rust crate built for wasm32-wasip2.
    Rust,
    /// A Python module built with componentize-py.
    #[value(alias = "py")]
    Python,
    /// A JavaScript module built with componentize-js.
    #[value(alias = "javascript")]
    Js,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    hourglass new resize-image --dir ~/work\n  \
    hourglass new send-mail --lang python\n  \
    hourglass new deliver-hook --lang js\n  \
    cd send-mail && hourglass build . && hourglass check\n\
    A Rust project's hourglass-sdk dependency points at --sdk: a folder (path dependency) or a \
    git URL (git dependency); by default the SDK of the source tree this hourglass was built \
    from. Python and JavaScript projects get their SDK from `hourglass build`.")]
pub(super) struct Args {
    /// The handler's name: its project, its component (NAME.wasm, '-' as '_') and its topic.
    name: String,
    /// The handler's language.
    #[arg(long, value_enum, default_value = "rust")]
    lang: Lang,
    /// Where to create the project folder NAME.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// For Rust: hourglass-sdk as a folder or a git URL (https://..., ssh://..., git@...).
    #[arg(long)]
    sdk: Option<String>,
}

pub(super) async fn run(args: Args) -> Result<(), Exit> {
    let is_git = |s: &str| {
        ["https://", "http://", "ssh://", "git@"]
            .iter()
            .any(|p| s.starts_with(p))
    };
    let rust_sdk = match args.sdk {
        Some(url) if is_git(&url) => SdkSource::Git(url),
        Some(path) => SdkSource::Path(PathBuf::from(path)),
        None => SdkSource::Path(PathBuf::from(BUILT_FROM_SDK)),
    };
    let lang = match args.lang {
        Lang::Rust => BuilderLang::Rust,
        Lang::Python => BuilderLang::Python,
        Lang::Js => BuilderLang::JavaScript,
    };
    let root = hourglass_builder::scaffold(&NewProject {
        name: args.name,
        lang,
        parent: args.dir,
        rust_sdk,
    })
    .map_err(|e| {
        if e.is_input() {
            Exit::input(e)
        } else {
            Exit::from(e)
        }
    })?;
    println!("created {} ({lang})", root.display());
    println!(
        "next:\n  cd {}\n  hourglass build .\n  hourglass check",
        root.display()
    );
    Ok(())
}
