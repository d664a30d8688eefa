//! The handler contract and the SDKs, embedded from this repository so that
//! a build of a project anywhere on disk uses exactly the contract the
//! runner it came with serves.

use std::path::Path;

use crate::{BuildError, write_if_changed};

/// `wit/handler.wit`, the one contract.
const HANDLER_WIT: &str = include_str!("../../wit/handler.wit");

/// The WASI packages `handler-http` refers to (`wit/deps/`).
const WASI_DEPS: [(&str, &str); 7] = [
    ("cli", include_str!("../../wit/deps/cli/cli.wit")),
    ("clocks", include_str!("../../wit/deps/clocks/clocks.wit")),
    (
        "filesystem",
        include_str!("../../wit/deps/filesystem/filesystem.wit"),
    ),
    ("http", include_str!("../../wit/deps/http/http.wit")),
    ("io", include_str!("../../wit/deps/io/io.wit")),
    ("random", include_str!("../../wit/deps/random/random.wit")),
    (
        "sockets",
        include_str!("../../wit/deps/sockets/sockets.wit"),
    ),
];

/// The Python SDK (`sdk/python/`), as files under a Python path entry.
pub(crate) const PYTHON_SDK: [(&str, &str); 6] = [
    (
        "hourglass/__init__.py",
        include_str!("../../sdk/python/hourglass/__init__.py"),
    ),
    (
        "hourglass/_outcomes.py",
        include_str!("../../sdk/python/hourglass/_outcomes.py"),
    ),
    (
        "hourglass/_job.py",
        include_str!("../../sdk/python/hourglass/_job.py"),
    ),
    (
        "hourglass/_follow_ups.py",
        include_str!("../../sdk/python/hourglass/_follow_ups.py"),
    ),
    (
        "hourglass/_durable.py",
        include_str!("../../sdk/python/hourglass/_durable.py"),
    ),
    (
        "hourglass/http.py",
        include_str!("../../sdk/python/hourglass/http.py"),
    ),
];

/// The JavaScript SDK (`sdk/js/`): `hourglass.js`, the module handlers
/// import, and the modules it is made of, in `hourglass/` beside it.
pub(crate) const JS_SDK: [(&str, &str); 5] = [
    ("hourglass.js", include_str!("../../sdk/js/hourglass.js")),
    (
        "hourglass/outcome.js",
        include_str!("../../sdk/js/hourglass/outcome.js"),
    ),
    (
        "hourglass/job.js",
        include_str!("../../sdk/js/hourglass/job.js"),
    ),
    (
        "hourglass/follow-up.js",
        include_str!("../../sdk/js/hourglass/follow-up.js"),
    ),
    (
        "hourglass/durable.js",
        include_str!("../../sdk/js/hourglass/durable.js"),
    ),
];

/// Appended to the bindings componentize-js generates, to run before the
/// snapshot (see `js::add_warm_up`).
pub(crate) const JS_WARM_UP: &str = include_str!("../toolchain/js/warm-up.js");

/// The pinned JavaScript toolchain: its package.json and lockfile.
pub(crate) const JS_TOOLCHAIN: [(&str, &str); 2] = [
    ("package.json", include_str!("../toolchain/js/package.json")),
    (
        "package-lock.json",
        include_str!("../toolchain/js/package-lock.json"),
    ),
];

/// Write the contract as is into `dir`, with the WASI packages it refers to.
pub(crate) fn write_plain(dir: &Path) -> Result<(), BuildError> {
    write_if_changed(&dir.join("handler.wit"), HANDLER_WIT)?;
    write_deps(dir)
}

fn write_deps(dir: &Path) -> Result<(), BuildError> {
    for (name, text) in WASI_DEPS {
        write_if_changed(
            &dir.join("deps").join(name).join(format!("{name}.wit")),
            text,
        )?;
    }
    Ok(())
}

/// Write the contract for componentize-py into `dir`, with the WASI
/// packages: the world `handler-http`, with the contract's interface
/// `types` named `job-types`.
///
/// Why the new name: componentize-py 0.25.1 panics ("called `Option::unwrap()`
/// on a `None` value", summary.rs) on a world that imports two interfaces
/// called `types` (ours and `wasi:http/types`). The interface only holds
/// types (records and a variant, compared by structure), and the runner links
/// no instance for it, so a component naming it `job-types` is served exactly
/// like one naming it `types`.
pub(crate) fn write_for_python(dir: &Path) -> Result<(), BuildError> {
    write_if_changed(&dir.join("handler.wit"), &python_wit()?)?;
    write_deps(dir)
}

fn python_wit() -> Result<String, BuildError> {
    // the interface once, and each world's use of it
    let renames = [
        ("interface types {", "interface job-types {", false),
        ("use types.{", "use job-types.{", true),
    ];
    let mut wit = HANDLER_WIT.to_owned();
    for (from, to, several) in renames {
        let n = wit.matches(from).count();
        if n == 0 || (n > 1 && !several) {
            return Err(BuildError::Project(format!(
                "this hourglass cannot build Python handlers: its contract no longer has exactly \
                 one {from:?} (the Python build renames it)"
            )));
        }
        wit = wit.replace(from, to);
    }
    Ok(wit)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_python_contract_renames_only_the_types_interface() {
        let wit = super::python_wit().unwrap();
        assert!(wit.contains("interface job-types {"));
        assert!(wit.contains("use job-types.{job, outcome};"));
        assert!(!wit.contains("interface types {"));
        assert!(wit.contains("world handler-http"));
    }
}
