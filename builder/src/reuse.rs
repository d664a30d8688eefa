//! The same inputs give the same component: a Python or JavaScript build is
//! keyed by everything it reads, and a build whose key was built before
//! hands back that component instead of making a new one.
//!
//! Why not simply build again: componentize-py and componentize-js are not
//! reproducible. Both run the handler's module and snapshot the guest's
//! memory, and that memory holds what the build's host gave the guest: random
//! bytes (Python's hash secret and `random` seed, SpiderMonkey's hash
//! scramblers and `Math.random` state), clock readings, the mtimes and inode
//! hashes of the tools' own temporary folders, and componentize-js's random
//! temporary path. Neither tool has an option or an environment variable
//! that reaches its WASI host (componentize-py's guest environment is fixed
//! at three variables, wizer's random and clocks are the machine's), and the
//! differences are spread through the heap, so the output cannot be
//! normalised afterwards either. A handler version is its content hash, so
//! without this every rebuild of unchanged code was a new version.
//!
//! The key: the toolchain (name, version, lockfile, hourglass's patch and
//! warm-up), this builder's version, the world and entry, and the content of
//! every file the tool can read: the project folder (less hidden entries,
//! `__pycache__`, `.wasm` files and `queues.toml`: build state, outputs and
//! the runner's configuration), the staged
//! contract and SDK, and for Python the virtual environment's packages
//! (names, sizes and times). Components are kept in the store folder, the
//! newest [`KEEP`] per component name.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::BuildError;

/// How many components of one name the store keeps (the newest by use).
pub(crate) const KEEP: usize = 4;

/// How a folder's files enter the key.
#[derive(Clone, Copy)]
pub(crate) enum Files {
    /// By content: sources.
    Content,
    /// By name, size and modification time: installed packages, large and
    /// changed only by an install.
    Listing,
}

/// The inputs of one build, hashed as they are added.
pub(crate) struct Inputs {
    hash: Sha256,
}

impl Inputs {
    /// A key for a build by `tool` (its name and version).
    pub fn new(tool: &str) -> Inputs {
        let mut inputs = Inputs {
            hash: Sha256::new(),
        };
        inputs.text("builder", env!("CARGO_PKG_VERSION"));
        inputs.text("tool", tool);
        inputs
    }

    /// A named value (each is length-prefixed, so no two lists of values
    /// hash alike).
    pub fn text(&mut self, name: &str, value: &str) {
        self.bytes(name, value.as_bytes());
    }

    fn bytes(&mut self, name: &str, value: &[u8]) {
        for part in [name.as_bytes(), value] {
            self.hash.update((part.len() as u64).to_le_bytes());
            self.hash.update(part);
        }
    }

    /// Every file under `dir`, in name order, as `files` says; `name` tells
    /// this folder from the others in the key.
    pub fn folder(&mut self, name: &str, dir: &Path, files: Files) -> Result<(), BuildError> {
        self.text("folder", name);
        self.walk(dir, "", files)
    }

    fn walk(&mut self, dir: &Path, rel: &str, files: Files) -> Result<(), BuildError> {
        let read = |e| BuildError::Io {
            context: format!("reading {}", dir.display()),
            source: e,
        };
        let mut entries = std::fs::read_dir(dir)
            .map_err(read)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(read)?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_input(&name) {
                continue;
            }
            let path = entry.path();
            let rel = format!("{rel}/{name}");
            let meta = std::fs::symlink_metadata(&path)
                .map_err(BuildError::io(format!("reading {}", path.display())))?;
            if meta.is_dir() {
                // a folder counts by its files: one holding only outputs
                // (the project's handlers/) or nothing is no input
                self.walk(&path, &rel, files)?;
            } else if meta.is_symlink() {
                let target = std::fs::read_link(&path)
                    .map_err(BuildError::io(format!("reading {}", path.display())))?;
                self.text(&format!("link {rel}"), &target.to_string_lossy());
            } else {
                match files {
                    Files::Content => {
                        let content = std::fs::read(&path)
                            .map_err(BuildError::io(format!("reading {}", path.display())))?;
                        self.bytes(&format!("file {rel}"), &content);
                    }
                    Files::Listing => {
                        let modified = meta
                            .modified()
                            .ok()
                            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                            .map_or(0, |d| d.as_nanos());
                        self.text(
                            &format!("file {rel}"),
                            &format!("{} {modified}", meta.len()),
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// The key: hex, 32 characters (128 bits).
    pub fn key(self) -> String {
        self.hash.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Whether an entry of a project folder is an input: not hidden (`.hourglass/`,
/// `.git/`, editors' files), not `__pycache__` (which the Python build
/// itself writes), not a component (the build's own output, placed in the
/// project's `handlers/` by default) and not `queues.toml` (the runner's
/// configuration, which `hourglass new` puts beside the handler: changing a
/// topic's settings is no new handler version).
fn is_input(name: &str) -> bool {
    !name.starts_with('.')
        && name != "__pycache__"
        && name != "queues.toml"
        && !name.ends_with(".wasm")
}

/// The component built before from `key`, copied to `out`; false if there
/// is none.
pub(crate) fn reuse(store: &Path, name: &str, key: &str, out: &Path) -> Result<bool, BuildError> {
    let kept = store.join(format!("{name}-{key}.wasm"));
    if !kept.is_file() {
        return Ok(false);
    }
    copy_whole(&kept, out)?;
    // the newest by use stays longest
    if let Ok(file) = std::fs::File::options().append(true).open(&kept) {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
    Ok(true)
}

/// Keep `built`, the component of `name` built from `key`, and drop that
/// name's oldest beyond [`KEEP`].
pub(crate) fn keep(store: &Path, name: &str, key: &str, built: &Path) -> Result<(), BuildError> {
    std::fs::create_dir_all(store)
        .map_err(BuildError::io(format!("creating {}", store.display())))?;
    copy_whole(built, &store.join(format!("{name}-{key}.wasm")))?;
    let prefix = format!("{name}-");
    let mut kept: Vec<(std::time::SystemTime, std::path::PathBuf)> = std::fs::read_dir(store)
        .map_err(BuildError::io(format!("reading {}", store.display())))?
        .filter_map(Result::ok)
        .filter(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            file.strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(".wasm"))
                .is_some_and(|k| k.len() == key.len() && k.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    kept.sort_by_key(|k| std::cmp::Reverse(k.0));
    for (_, old) in kept.into_iter().skip(KEEP) {
        // another build may have dropped it already
        let _ = std::fs::remove_file(old);
    }
    Ok(())
}

/// Copy `from` to `to` through a temporary file and a rename, so a reader
/// (another build, a runner) never sees half of it.
fn copy_whole(from: &Path, to: &Path) -> Result<(), BuildError> {
    let tmp = to.with_extension(format!("wasm.{}.tmp", std::process::id()));
    std::fs::copy(from, &tmp).map_err(BuildError::io(format!(
        "copying {} to {}",
        from.display(),
        tmp.display()
    )))?;
    std::fs::rename(&tmp, to).map_err(BuildError::io(format!("writing {}", to.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(dir: &Path) -> String {
        let mut inputs = Inputs::new("tool 1.0");
        inputs.folder("project", dir, Files::Content).unwrap();
        inputs.key()
    }

    fn write(dir: &Path, file: &str, text: &str) {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn the_key_follows_sources_and_ignores_build_state() {
        let a = tempfile::tempdir().unwrap();
        write(a.path(), "app.py", "x = 1\n");
        write(a.path(), "lib/util.py", "y = 2\n");
        let first = key_of(a.path());
        assert_eq!(first.len(), 32);

        // the same sources elsewhere, written in another order: the same key
        let b = tempfile::tempdir().unwrap();
        write(b.path(), "lib/util.py", "y = 2\n");
        write(b.path(), "app.py", "x = 1\n");
        assert_eq!(key_of(b.path()), first);

        // what builds and runs leave behind is no input
        write(a.path(), ".hourglass/out/app.wasm", "built");
        write(a.path(), "__pycache__/app.cpython-314.pyc", "bytecode");
        write(a.path(), "lib/__pycache__/util.cpython-314.pyc", "bytecode");
        write(a.path(), "handlers/app.wasm", "placed");
        write(a.path(), ".git/HEAD", "ref");
        write(a.path(), "queues.toml", "[[topic]]\nname = \"mail\"\n");
        assert_eq!(key_of(a.path()), first);

        // a changed, added, renamed or removed source is
        let mut seen = vec![first.clone()];
        let mut changed = |dir: &Path| {
            let key = key_of(dir);
            assert!(!seen.contains(&key), "{key} seen before");
            seen.push(key);
        };
        write(a.path(), "app.py", "x = 2\n");
        changed(a.path());
        write(a.path(), "templates/mail.txt", "Dear {name}");
        changed(a.path());
        std::fs::rename(a.path().join("lib"), a.path().join("lib2")).unwrap();
        changed(a.path());
        std::fs::remove_file(a.path().join("templates/mail.txt")).unwrap();
        changed(a.path());
    }

    #[test]
    fn the_key_follows_the_tool_and_the_values() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "app.js", "export const handle = 1;\n");
        let key = |tool: &str, world: &str| {
            let mut inputs = Inputs::new(tool);
            inputs.text("world", world);
            inputs
                .folder("project", dir.path(), Files::Content)
                .unwrap();
            inputs.key()
        };
        let base = key("componentize-js 0.23.0", "handler");
        assert_eq!(key("componentize-js 0.23.0", "handler"), base);
        assert_ne!(key("componentize-js 0.23.1", "handler"), base);
        assert_ne!(key("componentize-js 0.23.0", "handler-batch"), base);
        // values are delimited: moving a character between two changes the key
        assert_ne!(key("componentize-js 0.23.0h", "andler"), base);
    }

    #[test]
    fn installed_packages_count_by_listing() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "pkg/__init__.py", "a = 1\n");
        let listing = |dir: &Path| {
            let mut inputs = Inputs::new("t");
            inputs.folder("site", dir, Files::Listing).unwrap();
            inputs.key()
        };
        let before = listing(dir.path());
        assert_eq!(listing(dir.path()), before);
        write(dir.path(), "pkg/__init__.py", "a = 10\n");
        assert_ne!(listing(dir.path()), before, "a new size");
    }

    #[test]
    fn the_store_hands_back_what_it_kept_and_keeps_the_newest() {
        let store = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let out = work.path().join("out.wasm");
        assert!(!reuse(store.path(), "mail", &"0".repeat(32), &out).unwrap());

        let keys: Vec<String> = (0..KEEP + 2).map(|i| format!("{i:032x}")).collect();
        for (i, key) in keys.iter().enumerate() {
            let built = work.path().join("built.wasm");
            std::fs::write(&built, format!("component {i}")).unwrap();
            keep(store.path(), "mail", key, &built).unwrap();
            // file times are coarse on some file systems: order them by hand
            let kept = std::fs::File::options()
                .append(true)
                .open(store.path().join(format!("mail-{key}.wasm")))
                .unwrap();
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + i as u64);
            kept.set_modified(at).unwrap();
        }
        // another name is not counted against this one's
        std::fs::write(work.path().join("other.wasm"), "other").unwrap();
        keep(
            store.path(),
            "other",
            &keys[0],
            &work.path().join("other.wasm"),
        )
        .unwrap();

        assert!(
            !reuse(store.path(), "mail", &keys[0], &out).unwrap(),
            "dropped"
        );
        assert!(
            !reuse(store.path(), "mail", &keys[1], &out).unwrap(),
            "dropped"
        );
        assert!(reuse(store.path(), "mail", &keys[2], &out).unwrap());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "component 2");
        assert!(reuse(store.path(), "other", &keys[0], &out).unwrap());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "other");
        let left = std::fs::read_dir(store.path()).unwrap().count();
        assert_eq!(left, KEEP + 1, "no temporary files left");
    }
}
