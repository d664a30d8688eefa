//! A JavaScript handler project: `package.json` (`name` names the component,
//! `main` is the handler's module, `app.js` by default) and its ES modules,
//! built by componentize-js.
//!
//! componentize-js comes from the npm registry, the versions of an embedded
//! lockfile, into the project's `.hourglass/` folder. The SDK is one module,
//! `hourglass.js`, which the build keeps in the project next to the handler
//! (componentize-js resolves relative imports only) at this binary's version,
//! with the modules it imports in `hourglass/` beside it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::reuse::{self, Files};
use crate::tool::{self, Step};
use crate::{BuildError, Lang, Project, component_name, contract, folder_name, write_if_changed};

/// The componentize-js release builds use (npm), as the embedded lockfile pins it.
pub const COMPONENTIZE_JS: &str = "0.23.0";

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
    add_warm_up(&toolchain)?;
    for (file, text) in contract::JS_SDK {
        write_if_changed(&project.dir.join(file), text)?;
    }
    let wit = work.join("wit-js");
    contract::write_plain(&wit)?;
    let warm_up = work.join("warm-up.js");
    write_if_changed(&warm_up, contract::JS_WARM_UP)?;
    // a handler that takes batches exports `handleBatch` too: its world
    let world_name = match crate::python::batches(&project.dir.join(&project.entry)) {
        true => "handler-batch",
        false => "handler",
    };
    let mut inputs = reuse::Inputs::new(&format!("componentize-js {COMPONENTIZE_JS}"));
    for (file, text) in contract::JS_TOOLCHAIN {
        inputs.text(file, text);
    }
    inputs.text("patch", WRITES_BINDINGS_AND_WARM_UP);
    inputs.text("world", world_name);
    inputs.text("main", &project.entry);
    inputs.folder("project", &project.dir, Files::Content)?;
    inputs.folder("contract", &wit, Files::Content)?;
    inputs.text("warm-up", contract::JS_WARM_UP);
    project.build_once(inputs, |out| {
        step("componentize-js").run(
            Command::new(toolchain.join("node_modules/.bin/componentize-js"))
                .env(WARM_UP_ENV, &warm_up)
                .arg("--wit")
                .arg(&wit)
                .arg("--world-name")
                .arg(world_name)
                .arg("-o")
                .arg(out)
                .arg(&project.entry)
                .current_dir(&project.dir),
        )?;
        Ok(())
    })
}

/// The file componentize-js writes its generated bindings from.
const COMPONENTIZE_SOURCE: &str =
    "node_modules/@bytecodealliance/componentize-js/src/componentize.js";

/// The line of `COMPONENTIZE_SOURCE` that writes the bindings, as released.
const WRITES_BINDINGS: &str = "await writeFile(initializerPath, jsBindings);";

/// The environment variable naming a script to append to the bindings.
const WARM_UP_ENV: &str = "HOURGLASS_BINDINGS_EPILOGUE";

/// That line once hourglass has added its hook: the script `WARM_UP_ENV`
/// names, when set, goes after the bindings.
const WRITES_BINDINGS_AND_WARM_UP: &str = "await writeFile(initializerPath, jsBindings + \
     (process.env.HOURGLASS_BINDINGS_EPILOGUE ? \
     await readFile(process.env.HOURGLASS_BINDINGS_EPILOGUE, 'utf8') : ''));";

/// Let `toolchain`'s componentize-js append a script to the bindings it
/// generates (`WARM_UP_ENV`), which StarlingMonkey evaluates in its own global
/// before the handler's module, and wizer snapshots with it.
///
/// componentize-js has no option for that, and the warm-up must run in that
/// global: the export the bindings define is an async function, and
/// StarlingMonkey builds the Promise and async-function machinery, BigInt and
/// typed arrays the first time a global's code uses them. Without the warm-up
/// every fresh instance did that again: 43% of a JavaScript job's time in a
/// fresh instance, by `perf` with wasmtime's perfmap on StarlingMonkey's
/// debug build. One line of the pinned release changes, idempotently; a
/// release without that line is an error here, not a silently slower build.
fn add_warm_up(toolchain: &Path) -> Result<(), BuildError> {
    let path = toolchain.join(COMPONENTIZE_SOURCE);
    let shown = path.display().to_string();
    let text =
        std::fs::read_to_string(&path).map_err(BuildError::io(format!("reading {shown}")))?;
    if text.contains(WRITES_BINDINGS_AND_WARM_UP) {
        return Ok(());
    }
    if text.matches(WRITES_BINDINGS).count() != 1 {
        return Err(BuildError::Project(format!(
            "{shown}: no single line `{WRITES_BINDINGS}` to add hourglass's warm-up to \
             (componentize-js {COMPONENTIZE_JS} has one; reinstall it by removing {})",
            toolchain.display()
        )));
    }
    let patched = text.replacen(WRITES_BINDINGS, WRITES_BINDINGS_AND_WARM_UP, 1);
    // another build may read the file meanwhile: replace it whole
    let temp = path.with_extension(format!("js.{}", std::process::id()));
    std::fs::write(&temp, patched)
        .map_err(BuildError::io(format!("writing {}", temp.display())))?;
    std::fs::rename(&temp, &path).map_err(BuildError::io(format!("replacing {shown}")))
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

    fn toolchain_with(source: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(COMPONENTIZE_SOURCE);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, source).unwrap();
        dir
    }

    #[test]
    fn the_warm_up_hook_goes_in_once_and_a_changed_componentize_js_is_an_error() {
        let released = "import { readFile } from 'node:fs/promises';\n  \
                        await writeFile(initializerPath, jsBindings);\n  if (debugBindings) {}\n";
        let toolchain = toolchain_with(released);
        let path = toolchain.path().join(COMPONENTIZE_SOURCE);
        add_warm_up(toolchain.path()).unwrap();
        let once = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            once.matches(WRITES_BINDINGS_AND_WARM_UP).count(),
            1,
            "{once}"
        );
        assert!(!once.contains(WRITES_BINDINGS), "{once}");
        assert!(once.ends_with("  if (debugBindings) {}\n"), "{once}");
        add_warm_up(toolchain.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            once,
            "a second build changes nothing"
        );

        let changed = toolchain_with("await writeFile(initializerPath, bindings);\n");
        let err = add_warm_up(changed.path()).unwrap_err().to_string();
        assert!(
            err.contains("no single line") && err.contains(COMPONENTIZE_JS),
            "{err}"
        );
    }
}
