//! Folders that hold code the runner will execute (the compile cache, the
//! kept handler versions): created with mode 0700, and refused when anyone
//! but this user could write to them.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a folder cannot hold code.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    /// The folder could not be made or read.
    #[error("{path}: {source}")]
    Io {
        /// The folder.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Someone else could plant code in it.
    #[error(
        "{path} is not private (owner uid {uid}, mode {mode:o}); it must belong to this user with mode 0700"
    )]
    NotPrivate {
        /// The folder.
        path: String,
        /// Its owner.
        uid: u32,
        /// Its permission bits.
        mode: u32,
    },
}

/// Create `dir` (mode 0700) if needed and check that only this user can
/// write to it; its canonical path.
pub fn ensure(dir: &Path) -> Result<PathBuf, PrivateDirError> {
    let shown = dir.display().to_string();
    let io = |source| PrivateDirError::Io {
        path: shown.clone(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io)?;
    let dir = dir.canonicalize().map_err(io)?;
    let meta = std::fs::metadata(&dir).map_err(io)?;
    let mode = meta.permissions().mode() & 0o7777;
    if meta.uid() != nix::unistd::geteuid().as_raw() || mode & 0o022 != 0 {
        return Err(PrivateDirError::NotPrivate {
            path: shown,
            uid: meta.uid(),
            mode,
        });
    }
    Ok(dir)
}
