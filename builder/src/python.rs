//! A Python handler project: `pyproject.toml` (optional: `[project] name`
//! names the component, `[tool.hourglass] module` the handler's module,
//! `app` by default) and the module, built by componentize-py.
//!
//! componentize-py comes from PyPI into a virtual environment in the
//! project's `.hourglass/` folder; the contract (for the world
//! `handler-http`, so the SDK can call out over `wasi:http`) and the SDK
//! are written next to it from this binary. The only packages a build adds
//! to the handler's Python path are those of the virtual environment it
//! runs in (`VIRTUAL_ENV`), if any; a build keyed by its inputs is done
//! once (`reuse.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::reuse::{self, Files};
use crate::tool::{self, Step};
use crate::{BuildError, Lang, Project, component_name, contract, folder_name, write_if_changed};

/// The componentize-py release builds use (PyPI).
pub const COMPONENTIZE_PY: &str = "0.25.1";

const HINT: &str = "Python 3 with venv and pip: on Debian, apt-get install python3 python3-venv \
                    python3-pip (scripts/setup does)";

/// The component name and the handler module of the project in `dir`.
pub(crate) fn manifest(dir: &Path) -> Result<(String, String), BuildError> {
    let path = dir.join("pyproject.toml");
    let (mut name, mut module) = (None, None);
    if path.is_file() {
        let shown = path.display().to_string();
        let text =
            std::fs::read_to_string(&path).map_err(BuildError::io(format!("reading {shown}")))?;
        let doc: toml::Table = text
            .parse()
            .map_err(|e| BuildError::Project(format!("{shown}: {e}")))?;
        let field = |table: &str, key: &str| -> Result<Option<String>, BuildError> {
            let value = table
                .split('.')
                .try_fold(&doc, |t, part| t.get(part).and_then(|v| v.as_table()))
                .and_then(|t| t.get(key));
            match value {
                None => Ok(None),
                Some(toml::Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(BuildError::Project(format!(
                    "{shown}: [{table}] {key} must be a string"
                ))),
            }
        };
        name = field("project", "name")?;
        module = field("tool.hourglass", "module")?;
    }
    let name = match name {
        Some(name) => component_name(&name, "pyproject.toml [project] name")?,
        None => component_name(&folder_name(dir), "the project folder's name")?,
    };
    let module = module.unwrap_or_else(|| "app".into());
    let valid = !module.is_empty()
        && module.split('.').all(|part| {
            part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    if !valid {
        return Err(BuildError::Project(format!(
            "{}: [tool.hourglass] module {module:?} is not a Python module name",
            path.display()
        )));
    }
    let file = module.replace('.', "/");
    if !dir.join(format!("{file}.py")).is_file() && !dir.join(&file).join("__init__.py").is_file() {
        return Err(BuildError::Project(format!(
            "{}: no {file}.py, the handler module (name another one with [tool.hourglass] module)",
            dir.display()
        )));
    }
    Ok((name, module))
}

/// Build `project`; the component, in `.hourglass/out/`.
pub(crate) fn build(
    project: &Project,
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf, BuildError> {
    let work = project.work_dir();
    let shown = project.shown();
    let step = |name| Step {
        name,
        project: &shown,
        lang: Lang::Python,
        hint: HINT,
        live_stderr: false,
    };
    let toolchain = project.toolchain_dir(&format!("componentize-py-{COMPONENTIZE_PY}"));
    tool::ensure(
        &toolchain,
        &format!("componentize-py {COMPONENTIZE_PY} (PyPI)"),
        progress,
        |dir| {
            step("python3 -m venv").run(
                Command::new("python3")
                    .args(["-m", "venv"])
                    .arg(dir.join("venv")),
            )?;
            step("pip install componentize-py").run(
                Command::new(dir.join("venv/bin/pip"))
                    .args([
                        "install",
                        "--quiet",
                        "--disable-pip-version-check",
                        "--no-input",
                    ])
                    .arg(format!("componentize-py=={COMPONENTIZE_PY}")),
            )?;
            Ok(())
        },
    )?;
    let componentize_py = toolchain.join("venv/bin/componentize-py");
    let wit = work.join("wit");
    contract::write_for_python(&wit)?;
    let sdk = work.join("sdk");
    for (file, text) in contract::PYTHON_SDK {
        write_if_changed(&sdk.join(file), text)?;
    }
    // a handler that takes batches exports `handle-batch` too: its world
    let module = project
        .dir
        .join(format!("{}.py", project.entry.replace('.', "/")));
    let world_name = match batches(&module) {
        true => "handler-batch-http",
        false => "handler-http",
    };
    let site = site_packages(&work)?;
    let mut inputs = reuse::Inputs::new(&format!("componentize-py {COMPONENTIZE_PY}"));
    inputs.text("world", world_name);
    inputs.text("module", &project.entry);
    inputs.folder("project", &project.dir, Files::Content)?;
    inputs.folder("contract", &wit, Files::Content)?;
    inputs.folder("sdk", &sdk, Files::Content)?;
    match &site {
        Site::Own(venv) => inputs.folder("venv", venv, Files::Listing)?,
        Site::None(_) => inputs.text("venv", "none"),
    }
    project.build_once(inputs, |out| {
        let bindings = work.join("bindings");
        if bindings.exists() {
            std::fs::remove_dir_all(&bindings)
                .map_err(BuildError::io(format!("removing {}", bindings.display())))?;
        }
        let world = |cmd: &mut Command| {
            cmd.arg("-q").arg("-d").arg(&wit).args(["-w", world_name]);
        };
        let mut cmd = Command::new(&componentize_py);
        world(&mut cmd);
        step("componentize-py bindings").run(cmd.arg("bindings").arg(&bindings))?;
        let mut cmd = Command::new(&componentize_py);
        world(&mut cmd);
        cmd.arg("componentize")
            .arg("-p")
            .arg(&project.dir)
            .arg("-p")
            .arg(&bindings)
            .arg("-p")
            .arg(&sdk)
            .arg(&project.entry)
            .arg("-o")
            .arg(out)
            .env("VIRTUAL_ENV", site.dir())
            .current_dir(&project.dir);
        step("componentize-py componentize").run(&mut cmd)?;
        Ok(())
    })
}

/// The packages a build adds to the handler's Python path.
enum Site {
    /// The virtual environment the build runs in (`$VIRTUAL_ENV`): the
    /// project's dependencies.
    Own(PathBuf),
    /// None: an empty stand-in, so that componentize-py does not fall back
    /// to the `site-packages` of whatever `python3` the machine has (which
    /// made the build depend on the machine, and scanned all of it).
    None(PathBuf),
}

impl Site {
    fn dir(&self) -> &Path {
        match self {
            Site::Own(dir) | Site::None(dir) => dir,
        }
    }
}

fn site_packages(work: &Path) -> Result<Site, BuildError> {
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        return Ok(Site::Own(PathBuf::from(venv)));
    }
    let none = work.join("no-venv");
    let empty = none.join("lib/site-packages");
    std::fs::create_dir_all(&empty)
        .map_err(BuildError::io(format!("creating {}", empty.display())))?;
    Ok(Site::None(none))
}

/// Whether the handler's entry file takes batches: it names the SDK's
/// `batch_handler` / `batchHandler`, or exports `handle_batch` /
/// `handleBatch` itself. Its component then targets the contract's world
/// with `handle-batch` (componentize-py and componentize-js refuse a world
/// export the module lacks, so a handler that does not is built as before).
pub(crate) fn batches(entry: &std::path::Path) -> bool {
    std::fs::read_to_string(entry).is_ok_and(|source| {
        [
            "batch_handler",
            "batchHandler",
            "handle_batch",
            "handleBatch",
        ]
        .iter()
        .any(|name| source.contains(name))
    })
}
