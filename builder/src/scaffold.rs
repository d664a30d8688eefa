//! `hourglass new`: a handler project in any of the languages, anywhere on
//! disk, with a starter handler and a `queues.toml` that serves it, ready
//! for `hourglass build .` and `hourglass check`.

use std::path::PathBuf;

use crate::{BuildError, Lang, component_name, contract};

/// Where a Rust project's `hourglass-sdk` dependency comes from.
#[derive(Debug, Clone)]
pub enum SdkSource {
    /// A path dependency on this folder (the SDK crate).
    Path(PathBuf),
    /// A git dependency on this repository URL.
    Git(String),
}

/// What to create.
#[derive(Debug, Clone)]
pub struct NewProject {
    /// The handler's name: the project's, its component's (NAME.wasm, '-' as
    /// '_') and its topic's.
    pub name: String,
    /// Its language.
    pub lang: Lang,
    /// The folder to create the project folder in.
    pub parent: PathBuf,
    /// For Rust: the SDK dependency.
    pub rust_sdk: SdkSource,
}

/// Create the project; its folder.
pub fn scaffold(new: &NewProject) -> Result<PathBuf, BuildError> {
    if new.name.contains(['/', '\\']) {
        return Err(BuildError::Project(format!(
            "the handler's name {:?} is a path: give a name, and the folder to make it in with --dir",
            new.name
        )));
    }
    let component = component_name(&new.name, "the handler's name")?;
    let root = new.parent.join(&new.name);
    if root.exists() {
        return Err(BuildError::Project(format!(
            "{} already exists; choose another name or folder",
            root.display()
        )));
    }
    let queues = QUEUES_TOML.replace("NAME", &component);
    let files: Vec<(&str, String)> = match new.lang {
        Lang::Rust => vec![
            ("Cargo.toml", cargo_toml(&new.name, &new.rust_sdk)?),
            ("src/lib.rs", RUST_LIB.replace("NAME", &component)),
            ("queues.toml", queues),
            (".gitignore", GITIGNORE.to_owned() + "/target\n"),
        ],
        Lang::Python => vec![
            ("pyproject.toml", PYPROJECT.replace("NAME", &new.name)),
            ("app.py", PYTHON_APP.replace("NAME", &component)),
            ("queues.toml", queues),
            (".gitignore", GITIGNORE.to_owned() + "__pycache__/\n"),
        ],
        Lang::JavaScript => {
            let mut files = vec![
                ("package.json", PACKAGE_JSON.replace("NAME", &new.name)),
                ("app.js", JS_APP.replace("NAME", &component)),
                ("queues.toml", queues),
                (".gitignore", GITIGNORE.to_owned()),
            ];
            files.extend(contract::JS_SDK.map(|(file, text)| (file, text.to_owned())));
            files
        }
    };
    for (file, text) in &files {
        crate::write_if_changed(&root.join(file), text)?;
    }
    Ok(root)
}

fn cargo_toml(name: &str, sdk: &SdkSource) -> Result<String, BuildError> {
    let dependency = match sdk {
        SdkSource::Git(url) => format!("{{ git = {url:?} }}"),
        SdkSource::Path(path) => {
            let path = path.canonicalize().map_err(|_| {
                BuildError::Project(format!(
                    "no hourglass-sdk at {}: pass --sdk with the sdk/ folder of an hourglass checkout, or a \
                     git URL of the hourglass repository",
                    path.display()
                ))
            })?;
            if !path.join("Cargo.toml").is_file() {
                return Err(BuildError::Project(format!(
                    "{} is not the hourglass-sdk crate (no Cargo.toml)",
                    path.display()
                )));
            }
            format!("{{ path = {:?} }}", path.display().to_string())
        }
    };
    Ok(format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
# a component for wasm32-wasip2: `hourglass build .`
crate-type = ["cdylib"]

[dependencies]
hourglass-sdk = {dependency}
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
    ))
}

/// Every project ignores the build's working folder and its placed components.
const GITIGNORE: &str = "/.hourglass\n/handlers/*.wasm\n";

const RUST_LIB: &str = r#"//! The NAME handler: one job in, ack / retry / fail out.

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

const PYPROJECT: &str = r#"# A Python handler for hourglass: `hourglass build .` makes a component of
# the module below with componentize-py (installed into .hourglass/ on the
# first build); the SDK (`import hourglass`) comes with the build.
[project]
name = "NAME"
version = "0.1.0"

[tool.hourglass]
module = "app"
"#;

const PYTHON_APP: &str = r#""""The NAME handler: one job in, ack / retry / fail out."""

import hourglass


@hourglass.handler
def handle(job):
    task = job.json()  # a payload that is not JSON fails the job for good
    user = task.get("user")
    if not user:
        return hourglass.fail("the payload names no user")
    hourglass.info(f"NAME: job {job.id} for {user} (attempt {job.attempt})")
    # returning None acks; an exception retries with the topic's backoff
"#;

const PACKAGE_JSON: &str = r#"{
  "name": "NAME",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "main": "app.js",
  "description": "A JavaScript handler for hourglass: `hourglass build .` makes a component of app.js with componentize-js (installed into .hourglass/ on the first build)"
}
"#;

const JS_APP: &str = r#"// The NAME handler: one job in, ack / retry / fail out.
// hourglass.js (and hourglass/) is the SDK: `hourglass build` keeps it at the version of the hourglass that builds.
import { handler, fail, log } from './hourglass.js';

export const handle = handler((job) => {
  const task = job.json(); // a payload that is not JSON fails the job for good
  if (!task.user) {
    return fail('the payload names no user');
  }
  log.info(`NAME: job ${job.id} for ${task.user} (attempt ${job.attempt})`);
  // returning nothing acks; an exception retries with the topic's backoff
});
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

/// The projects `scaffold` makes are checked by building them (the runner's
/// integration tests); here only what needs no toolchain.
#[cfg(test)]
mod tests {
    use super::*;

    fn temp() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "hg-scaffold-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_name_that_is_a_path_is_refused() {
        for name in ["../evil", "a/b", "a\\b"] {
            let e = scaffold(&NewProject {
                name: name.into(),
                lang: Lang::Python,
                parent: temp(),
                rust_sdk: SdkSource::Git("https://example.org/x".into()),
            })
            .unwrap_err();
            assert!(e.is_input(), "{name}: {e}");
            assert!(e.to_string().contains("--dir"), "{e}");
        }
    }

    #[test]
    fn each_language_makes_a_project_its_builder_recognises() {
        let parent = temp();
        for (lang, name) in [(Lang::Python, "py-mail"), (Lang::JavaScript, "js-mail")] {
            let root = scaffold(&NewProject {
                name: name.into(),
                lang,
                parent: parent.clone(),
                rust_sdk: SdkSource::Git("https://example.com/hourglass".into()),
            })
            .unwrap();
            let project = crate::Project::open(&root).unwrap();
            assert_eq!(project.lang(), lang);
            assert_eq!(project.name, name.replace('-', "_"));
            let queues = std::fs::read_to_string(root.join("queues.toml")).unwrap();
            assert!(queues.contains(&format!("handler = \"{}.wasm\"", project.name)));
        }
        let again = scaffold(&NewProject {
            name: "py-mail".into(),
            lang: Lang::Python,
            parent: parent.clone(),
            rust_sdk: SdkSource::Git(String::new()),
        });
        assert!(again.unwrap_err().to_string().contains("already exists"));
        std::fs::remove_dir_all(parent).unwrap();
    }
}
