//! A JavaScript handler project: `package.json` (`name` names the component,
//! `main` is the handler's module, `app.js` by default) and its ES modules,
//! built by componentize-js.
//!
//! componentize-js comes from the npm registry, the versions of an embedded
//! lockfile, into the project's `.hourglass/` folder. The SDK is one module,
//! `hourglass.js`, which the build keeps in the project next to the handler
//! (componentize-js resolves relative imports only) at this binary's version.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::tool::{self, Step};
use crate::{BuildError, Lang, Project, component_name, contract, folder_name, write_if_changed};

/// The componentize-js release builds use (npm), as the embedded lockfile pins it.
pub const COMPONENTIZE_JS: &str = "0.23.0";

/// The SDK's file in a project.
pub const SDK_FILE: &str = "hourglass.js";

const HINT: &str = "Node.js and npm: on Debian, apt-get install nodejs npm (scripts/setup does)";

/// The component name and the handler module of the project in `dir`.
pub(crate) fn manifest(dir: &Path) -> Result<(String, String), BuildError> {
    let path = dir.join("package.json");
    let shown = path.display().to_string();
    let text =
        std::fs::read_to_string(&path).map_err(BuildError::io(format!("reading {shown}")))?;
    let doc: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| BuildError::Project(format!("{shown}: not JSON: {e}")))?;
    let field = |key: &str| match &doc[key] {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => Ok(Some(s.clone())),
        _ => Err(BuildError::Project(format!(
            "{shown}: {key:?} must be a string"
        ))),
    };
    let name = match field("name")? {
        Some(name) => component_name(&name, "package.json \"name\"")?,
        None => component_name(&folder_name(dir), "the project folder's name")?,
    };
    let main = field("main")?.unwrap_or_else(|| "app.js".into());
    let inside = Path::new(&main).components().all(|c| {
        matches!(
            c,
            std::path::Component::Normal(_) | std::path::Component::CurDir
        )
    });
    if !inside || !dir.join(&main).is_file() {
        return Err(BuildError::Project(format!(
            "{shown}: \"main\" is {main:?}, which is not a file in {} (the handler's module, app.js by default)",
            dir.display()
        )));
    }
    Ok((name, main))
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
        lang: Lang::JavaScript,
        hint: HINT,
        live_stderr: false,
    };
    let toolchain = project.toolchain_dir(&format!("componentize-js-{COMPONENTIZE_JS}"));
    tool::ensure(
        &toolchain,
        &format!("componentize-js {COMPONENTIZE_JS} (npm)"),
        progress,
        |dir| {
            for (file, text) in contract::JS_TOOLCHAIN {
                write_if_changed(&dir.join(file), text)?;
            }
            // not `npm ci`: npm 11 calls the lockfile out of sync over optional
            // packages for other platforms; --no-save leaves it as it is
            step("npm install componentize-js").run(
                Command::new("npm")
                    .args([
                        "install",
                        "--no-save",
                        "--no-audit",
                        "--no-fund",
                        "--loglevel=error",
                    ])
                    .current_dir(dir),
            )?;
            Ok(())
        },
    )?;
    write_if_changed(&project.dir.join(SDK_FILE), contract::JS_SDK)?;
    let wit = work.join("wit-js");
    contract::write_plain(&wit)?;
    let out = project.output_file()?;
    step("componentize-js").run(
        Command::new(toolchain.join("node_modules/.bin/componentize-js"))
            .arg("--wit")
            .arg(&wit)
            .args(["--world-name", "handler", "-o"])
            .arg(&out)
            .arg(&project.entry)
            .current_dir(&project.dir),
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lockfile_pins_the_version_we_name() {
        let lock: serde_json::Value = serde_json::from_str(contract::JS_TOOLCHAIN[1].1).unwrap();
        let pinned = &lock["packages"]["node_modules/@bytecodealliance/componentize-js"]["version"];
        assert_eq!(pinned, COMPONENTIZE_JS);
    }
}
