//! The compile cache: wasmtime's own, in a folder private to the runner.
//!
//! wasmtime keys each entry by a SHA-256 of the component's bytes and the
//! engine's compilation settings, reads entries into memory (never maps them)
//! and recompiles when an entry does not fit. A cached entry is trusted like
//! compiled code, so the folder must be writable by this user only: it is
//! created with mode 0700, and a folder others can write to is refused.

use std::path::Path;

use wasmtime::{Cache, CacheConfig};

use crate::private_dir::{PrivateDirError, ensure};

/// Why the cache cannot be used; the runner then compiles every handler.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The folder cannot hold compiled code.
    #[error("compile cache {0}")]
    Folder(#[from] PrivateDirError),
    /// wasmtime refused the settings.
    #[error("compile cache {path}: {reason}")]
    Wasmtime {
        /// The folder.
        path: String,
        /// What wasmtime said.
        reason: String,
    },
}

/// Open (creating if needed) the private cache folder `dir`.
pub(super) fn open(dir: &Path) -> Result<Cache, CacheError> {
    let shown = dir.display().to_string();
    let dir = ensure(dir)?;
    let mut config = CacheConfig::new();
    config
        .with_directory(&dir)
        // keep the background worker quiet: no recompression at level 20 after
        // many hits, and clean-up at most once a day
        .with_optimized_compression_usage_counter_threshold(u64::MAX)
        .with_cleanup_interval(std::time::Duration::from_secs(86_400));
    Cache::new(config).map_err(|e| CacheError::Wasmtime {
        path: shown,
        reason: format!("{e:#}"),
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_folder_others_can_write_to_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        assert!(open(&cache).is_ok());
        let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "created private");
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = open(&cache).unwrap_err();
        assert!(
            matches!(err, CacheError::Folder(PrivateDirError::NotPrivate { .. })),
            "{err}"
        );
    }
}
