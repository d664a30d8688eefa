//! The commit this `hourglass` was built from, for `hourglass --version`
//! and the runners' heartbeats: `HOURGLASS_COMMIT` when the environment
//! sets it (a build from a source tarball or in a container without the
//! repository), else git's `HEAD`, else "unknown" (`cargo install`, a
//! tarball, no git). The script reruns only when `HEAD` moves (the `HEAD`
//! file, the branch file it names, `packed-refs`), not on every build.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=HOURGLASS_COMMIT");
    let commit = match std::env::var("HOURGLASS_COMMIT") {
        Ok(given) if !given.trim().is_empty() => given.trim().to_owned(),
        _ => from_git().unwrap_or_else(|| "unknown".to_owned()),
    };
    println!("cargo:rustc-env=HOURGLASS_COMMIT={commit}");
}

/// `HEAD`'s commit, watching the files that move with it.
fn from_git() -> Option<String> {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(&dir)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // `--git-path` names each file where this checkout keeps it (a worktree's
    // HEAD is its own, its branches the main repository's)
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name])
            && std::path::Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(commit)
}
