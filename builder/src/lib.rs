//! Building hourglass handler projects into components, in any of the
//! languages hourglass supports, and scaffolding new ones.
//!
//! # Layout
//! - `lib.rs`: [`Project`] (what kind of project a folder is, and its
//!   component's name), [`BuildError`] and [`place`] (write-then-rename into
//!   the handlers folder, so a running runner never sees half a file).
//! - `rust.rs`: a crate or workspace, built by cargo for `wasm32-wasip2`.
//! - `python.rs`: a Python project, built by componentize-py.
//! - `js.rs`: a JavaScript project, built by componentize-js.
//! - `reuse.rs`: a Python or JavaScript build keyed by its inputs, and the
//!   component built before from the same inputs handed back (the tools do
//!   not build reproducibly; a handler version is its content hash).
//! - `tool.rs`: the pinned toolchains, installed on first use from PyPI and
//!   the npm registry into the project's `.hourglass/` folder, and running them.
//! - `contract.rs`: the handler contract (`wit/`) and the Python and
//!   JavaScript SDKs, embedded so a build needs nothing from this repository.
//! - `scaffold.rs`: `hourglass new` for each language.
//!
//! The runner's `hourglass build` and `hourglass new` use this crate, and so
//! does the test support's build script: the tests build their Python and
//! JavaScript handlers exactly as a user's projects are built.

mod contract;
mod js;
mod python;
mod reuse;
mod rust;
mod scaffold;
mod tool;

use std::path::{Path, PathBuf};

pub use scaffold::{NewProject, SdkSource, scaffold};
pub use tool::TOOLCHAINS_ENV;

/// The languages a handler project can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// A crate (or workspace of crates) with a `Cargo.toml`.
    Rust,
    /// A folder with a `pyproject.toml` (or just an `app.py`).
    Python,
    /// A folder with a `package.json`.
    JavaScript,
}

impl std::fmt::Display for Lang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::JavaScript => "JavaScript",
        })
    }
}

/// Why a project could not be built or created.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The folder is not a project this crate can build, or it is malformed.
    #[error("{0}")]
    Project(String),
    /// A program the build needs is missing.
    #[error("{program} is needed to build {lang} handlers and was not found ({hint})")]
    MissingTool {
        /// The program.
        program: String,
        /// For which language.
        lang: Lang,
        /// How to get it.
        hint: &'static str,
    },
    /// A step of the build failed; `output` is what it printed (its end).
    #[error("{step} failed for {project}:\n{output}")]
    Failed {
        /// What was run.
        step: String,
        /// The project folder.
        project: String,
        /// Its output.
        output: String,
    },
    /// Reading or writing a file failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        source: std::io::Error,
    },
}

impl BuildError {
    /// Whether the fault is in what the user gave (a folder that is no
    /// project, a bad name), as opposed to the build or the machine.
    pub fn is_input(&self) -> bool {
        matches!(self, BuildError::Project(_))
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BuildError {
        let context = context.into();
        move |source| BuildError::Io { context, source }
    }
}

/// A handler project on disk.
#[derive(Debug, Clone)]
pub struct Project {
    dir: PathBuf,
    lang: Lang,
    /// The component's file stem (Python and JavaScript; cargo names Rust's).
    name: String,
    /// The Python module or JavaScript file the handler is in.
    entry: String,
    /// Where toolchains are installed, if not in the project's `.hourglass/`.
    toolchains: Option<PathBuf>,
}

impl Project {
    /// The project in `dir`: a `Cargo.toml` makes it Rust, a `package.json`
    /// JavaScript, a `pyproject.toml` or an `app.py` Python. Its toolchains
    /// go to `$HOURGLASS_TOOLCHAINS` if that is set.
    pub fn open(dir: &Path) -> Result<Project, BuildError> {
        let mut project = Project::detect(dir)?;
        project.toolchains = std::env::var_os(TOOLCHAINS_ENV)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);
        Ok(project)
    }

    /// Install (or find) toolchains under `dir`, shared with other projects,
    /// instead of in this project's `.hourglass/`.
    pub fn share_toolchains(&mut self, dir: &Path) {
        self.toolchains = Some(dir.to_owned());
    }

    fn detect(dir: &Path) -> Result<Project, BuildError> {
        if !dir.is_dir() {
            return Err(BuildError::Project(format!(
                "{} is not a folder",
                dir.display()
            )));
        }
        let dir = dir
            .canonicalize()
            .map_err(BuildError::io(format!("reading {}", dir.display())))?;
        let (lang, (name, entry)) = if dir.join("Cargo.toml").is_file() {
            // cargo names the components
            (Lang::Rust, (String::new(), String::new()))
        } else if dir.join("package.json").is_file() {
            (Lang::JavaScript, js::manifest(&dir)?)
        } else if dir.join("pyproject.toml").is_file() || dir.join("app.py").is_file() {
            (Lang::Python, python::manifest(&dir)?)
        } else {
            return Err(BuildError::Project(format!(
                "{} is not a handler project: no Cargo.toml (Rust), package.json (JavaScript), \
                 pyproject.toml or app.py (Python); `hourglass new NAME --lang rust|python|js` makes one",
                dir.display()
            )));
        };
        Ok(Project {
            dir,
            lang,
            name,
            entry,
            toolchains: None,
        })
    }

    /// The project's folder (absolute).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its language.
    pub fn lang(&self) -> Lang {
        self.lang
    }

    /// Build the project; the components it made (placed nowhere yet: see
    /// [`place`]). `progress` hears about slow steps (installing a toolchain).
    pub fn build(&self, progress: &mut dyn FnMut(&str)) -> Result<Vec<PathBuf>, BuildError> {
        match self.lang {
            Lang::Rust => rust::build(&self.dir),
            Lang::Python => python::build(self, progress).map(|c| vec![c]),
            Lang::JavaScript => js::build(self, progress).map(|c| vec![c]),
        }
    }

    /// The project's own working folder, `.hourglass/` (toolchains, staged
    /// contract and SDK, outputs); `.gitignore`d by projects `new` makes.
    fn work_dir(&self) -> PathBuf {
        self.dir.join(".hourglass")
    }

    /// The folder of toolchain `id` (name and version).
    fn toolchain_dir(&self, id: &str) -> PathBuf {
        match &self.toolchains {
            Some(shared) => shared.join(id),
            None => self.work_dir().join("toolchain").join(id),
        }
    }

    /// Where components are kept by their inputs' key (`reuse.rs`): beside
    /// the toolchains, so projects that share those share these.
    fn store_dir(&self) -> PathBuf {
        match &self.toolchains {
            Some(shared) => shared.join("builds"),
            None => self.work_dir().join("builds"),
        }
    }

    /// The component built before from `inputs`, in `.hourglass/out/`, if
    /// there is one; else `build` makes it, and it is kept for the next time.
    fn build_once(
        &self,
        inputs: reuse::Inputs,
        build: impl FnOnce(&Path) -> Result<(), BuildError>,
    ) -> Result<PathBuf, BuildError> {
        let (store, key, out) = (self.store_dir(), inputs.key(), self.output_file()?);
        if reuse::reuse(&store, &self.name, &key, &out)? {
            return Ok(out);
        }
        build(&out)?;
        reuse::keep(&store, &self.name, &key, &out)?;
        Ok(out)
    }

    fn shown(&self) -> String {
        self.dir.display().to_string()
    }

    /// Where a Python or JavaScript build writes its component:
    /// `.hourglass/out/<name>.wasm` (the folder is made here).
    fn output_file(&self) -> Result<PathBuf, BuildError> {
        let out = self.work_dir().join("out");
        std::fs::create_dir_all(&out)
            .map_err(BuildError::io(format!("creating {}", out.display())))?;
        Ok(out.join(format!("{}.wasm", self.name)))
    }
}

/// A folder's own name, which names a project that does not name itself.
pub(crate) fn folder_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A component's file name from a project name: lowercase letters, digits
/// and '_' (a '-' becomes '_', as cargo does for crates).
pub(crate) fn component_name(name: &str, from: &str) -> Result<String, BuildError> {
    let stem = name.rsplit('/').next().unwrap_or(name).replace('-', "_");
    let ok = !stem.is_empty()
        && stem.len() <= 64
        && stem.starts_with(|c: char| c.is_ascii_lowercase())
        && stem
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(stem)
    } else {
        Err(BuildError::Project(format!(
            "{from}: the project name {name:?} cannot name a component: use 1 to 64 lowercase \
             letters, digits, '-' and '_', starting with a letter"
        )))
    }
}

/// Copy `component` into `out_dir` under its own file name: written to a
/// temporary name first and renamed over the old file, so a runner watching
/// `out_dir` never loads half of it. Returns the placed file.
pub fn place(component: &Path, out_dir: &Path) -> Result<PathBuf, BuildError> {
    std::fs::create_dir_all(out_dir)
        .map_err(BuildError::io(format!("creating {}", out_dir.display())))?;
    let name = component
        .file_name()
        .ok_or_else(|| BuildError::Project(format!("{} has no file name", component.display())))?;
    let target = out_dir.join(name);
    let tmp = out_dir.join(format!(".{}.tmp", name.to_string_lossy()));
    std::fs::copy(component, &tmp).map_err(BuildError::io(format!(
        "copying {} to {}",
        component.display(),
        tmp.display()
    )))?;
    std::fs::rename(&tmp, &target)
        .map_err(BuildError::io(format!("placing {}", target.display())))?;
    Ok(target)
}

/// Write `text` to `path` unless it already holds exactly that (so a build
/// does not touch files, and their times, needlessly).
pub(crate) fn write_if_changed(path: &Path, text: &str) -> Result<(), BuildError> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(BuildError::io(format!("creating {}", dir.display())))?;
    }
    std::fs::write(path, text).map_err(BuildError::io(format!("writing {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_names_follow_cargo() {
        assert_eq!(component_name("send-mail", "x").unwrap(), "send_mail");
        assert_eq!(component_name("@acme/send-mail", "x").unwrap(), "send_mail");
        for bad in ["", "Mail", "1mail", "mail.js", "mail box"] {
            let e = component_name(bad, "package.json").unwrap_err();
            assert!(e.is_input(), "{bad:?}");
            assert!(e.to_string().contains("package.json"), "{e}");
        }
    }

    #[test]
    fn a_folder_without_a_manifest_is_no_project() {
        let dir = std::env::temp_dir().join(format!("hg-builder-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = Project::open(&dir).unwrap_err();
        assert!(e.is_input());
        assert!(e.to_string().contains("hourglass new"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
