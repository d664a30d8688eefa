//! The pinned toolchains (componentize-py from PyPI, componentize-js from
//! the npm registry), installed on first use, and running build steps.
//!
//! A toolchain lives in the project's `.hourglass/toolchain/<name>-<version>/`,
//! or under `$HOURGLASS_TOOLCHAINS` when that is set (one install shared by
//! many projects: the tests use it). It counts as installed only once its
//! `.installed` marker is written, the last step of an install, so an
//! interrupted install is redone rather than trusted; a lock file keeps two
//! builds from installing into one folder at once.

use std::path::Path;
use std::process::Command;

use crate::{BuildError, Lang};

/// Set to a folder to share one install of each toolchain among projects.
pub const TOOLCHAINS_ENV: &str = "HOURGLASS_TOOLCHAINS";

/// Written last by an install: the toolchain is complete.
const INSTALLED: &str = ".installed";

/// How much of a failed step's output an error keeps (its end).
const OUTPUT_LINES: usize = 60;

/// Make sure the toolchain in `dir` is installed, running `install` (into
/// an emptied `dir`) if it is not.
pub(crate) fn ensure(
    dir: &Path,
    what: &str,
    progress: &mut dyn FnMut(&str),
    install: impl FnOnce(&Path) -> Result<(), BuildError>,
) -> Result<(), BuildError> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .map_err(BuildError::io(format!("creating {}", parent.display())))?;
    let lock_path = dir.with_extension("lock");
    let lock = std::fs::File::create(&lock_path)
        .map_err(BuildError::io(format!("creating {}", lock_path.display())))?;
    lock.lock()
        .map_err(BuildError::io(format!("locking {}", lock_path.display())))?;
    if dir.join(INSTALLED).is_file() {
        return Ok(());
    }
    progress(&format!(
        "installing {what} into {} (first build only)",
        dir.display()
    ));
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(BuildError::io(format!(
            "removing the incomplete install in {}",
            dir.display()
        )))?;
    }
    std::fs::create_dir_all(dir).map_err(BuildError::io(format!("creating {}", dir.display())))?;
    install(dir)?;
    std::fs::write(dir.join(INSTALLED), what).map_err(BuildError::io(format!(
        "writing {}",
        dir.join(INSTALLED).display()
    )))
}

/// A step of a build: a command whose failure is reported with its output.
pub(crate) struct Step<'a> {
    /// What the step does, for errors ("componentize-py componentize").
    pub name: &'a str,
    /// The project folder, for errors.
    pub project: &'a str,
    /// The language, for a missing program.
    pub lang: Lang,
    /// How to get the program if it is missing.
    pub hint: &'static str,
    /// Let the program write to our stderr as it goes (cargo's progress and
    /// diagnostics) instead of keeping it for the error.
    pub live_stderr: bool,
}

impl Step<'_> {
    /// Run `cmd` to completion; its stdout and stderr (merged, in order
    /// within each) on success, a [`BuildError`] naming the step otherwise.
    pub fn run(&self, cmd: &mut Command) -> Result<String, BuildError> {
        let program = cmd.get_program().to_string_lossy().into_owned();
        if self.live_stderr {
            cmd.stderr(std::process::Stdio::inherit());
        }
        let output = cmd.output().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BuildError::MissingTool {
                program: program.clone(),
                lang: self.lang,
                hint: self.hint,
            },
            _ => BuildError::Io {
                context: format!("running {program}"),
                source: e,
            },
        })?;
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        if output.status.success() {
            return Ok(text);
        }
        let lines: Vec<&str> = text.lines().collect();
        let mut tail = lines[lines.len().saturating_sub(OUTPUT_LINES)..].join("\n");
        if self.live_stderr {
            tail = "(its messages are above)".into();
        }
        Err(BuildError::Failed {
            step: self.name.to_owned(),
            project: self.project.to_owned(),
            output: format!("{tail}\n({})", output.status),
        })
    }
}
