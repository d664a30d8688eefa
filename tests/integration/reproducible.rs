//! The same sources build the same component, in every language: a
//! project built twice in its folder, and once more copied to another
//! folder, gives byte-identical components (so the same handler version),
//! through `hourglass build` as a user runs it. Python and JavaScript share
//! the test support's toolchains (and so the builds they keep); Rust builds
//! with the example handlers' lockfile into their target folder, where the
//! dependencies are built already, so only the crate itself compiles.

use std::path::{Path, PathBuf};
use std::process::Command;

use test_support::components::TOOLCHAINS;

/// Each language's project: (`--lang`, name, component, source file to mark).
const LANGS: [(&str, &str, &str, &str); 3] = [
    ("python", "same-mail", "same_mail.wasm", "app.py"),
    ("js", "same-hook", "same_hook.wasm", "app.js"),
    ("rust", "same-resize", "same_resize.wasm", "src/lib.rs"),
];

fn handlers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../handlers")
}

fn hourglass(cwd: &Path, args: &[&str]) -> String {
    let out = Command::new(crate::util::hourglass_bin())
        .args(args)
        .current_dir(cwd)
        .env(hourglass_builder::TOOLCHAINS_ENV, TOOLCHAINS)
        .env("CARGO_TARGET_DIR", handlers().join("target"))
        // as the test support builds handlers/: flags for the host are not for wasm
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "hourglass {args:?} in {cwd:?}: {text}"
    );
    text
}

/// `hourglass new` in `parent`, its handler marked with `mark`, its
/// runner's compile cache the tests' shared one.
fn new_project(parent: &Path, lang: &str, name: &str, source: &str, mark: &str) -> PathBuf {
    std::fs::create_dir_all(parent).unwrap();
    hourglass(parent, &["new", name, "--lang", lang]);
    let project = parent.join(name);
    if lang == "rust" {
        // the dependencies' versions the example handlers were built with
        std::fs::copy(handlers().join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    }
    let file = project.join(source);
    let code = std::fs::read_to_string(&file).unwrap();
    let comment = if lang == "python" { "#" } else { "//" };
    std::fs::write(&file, format!("{code}\n{comment} {mark}\n")).unwrap();
    let config = project.join("queues.toml");
    let toml = std::fs::read_to_string(&config).unwrap().replacen(
        "[runner]\n",
        &format!(
            "[runner]\ncompile_cache = {:?}\n",
            crate::util::shared_compile_cache()
        ),
        1,
    );
    std::fs::write(&config, toml).unwrap();
    project
}

fn build(project: &Path, component: &str) -> Vec<u8> {
    hourglass(project, &["build", "."]);
    std::fs::read(project.join("handlers").join(component)).unwrap()
}

#[test]
fn a_project_built_twice_and_in_another_folder_gives_the_same_component() {
    let root = tempfile::tempdir().unwrap();
    // sources no earlier run built, so the first build of each is a real one
    let mark = format!(
        "built by the reproducible test, run {} {}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    for (lang, name, component, source) in LANGS {
        let first = new_project(&root.path().join("one"), lang, name, source, &mark);
        let built = build(&first, component);
        let again = build(&first, component);
        assert!(
            built == again,
            "{lang}: built twice in one folder, the components differ ({} and {} bytes)",
            built.len(),
            again.len()
        );
        // the same project in another folder, as a copy or a clone would be
        // (written after the first build, so cargo compiles the crate again)
        let second = new_project(&root.path().join("two/deeper"), lang, name, source, &mark);
        let elsewhere = build(&second, component);
        assert!(
            built == elsewhere,
            "{lang}: built in {} and in {}, the components differ ({} and {} bytes)",
            first.display(),
            second.display(),
            built.len(),
            elsewhere.len()
        );
    }
}
