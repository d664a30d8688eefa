//! The producer packages against a live runner with a real redis-server:
//! `clients/python` built (`python -m build`), checked (`twine check`),
//! installed into a virtual environment from PyPI's packages and run through
//! its own test suite (`clients/python/tests`); `clients/typescript` built
//! with tsc, packed and run through its suite (`node --test`). Each suite
//! drives its client's whole surface over the runner's HTTP API.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{Project, Running};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// Run `cmd`, failing the test with its output unless it succeeds.
fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
    text
}

/// A virtual environment with the build tools, twine, OpenTelemetry's SDK,
/// openapi-spec-validator and schemathesis from PyPI, made once per machine (`~/.cache/hourglass/py-client`;
/// delete it to start over). Python 3 with venv is a test requirement
/// (`scripts/setup` installs it): missing, the test fails saying so.
pub(crate) fn venv() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    let dir = Path::new(&home).join(".cache/hourglass/py-client");
    let ready = dir.join("ready-3");
    // one test process makes it while the others wait (tests run at once)
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    lock.lock().expect("lock the venv");
    if !ready.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&dir),
            "python3 -m venv (install python3-venv: scripts/setup)",
        );
        run(
            Command::new(dir.join("bin/pip")).args([
                "install",
                "-q",
                "build",
                "twine",
                "setuptools>=61",
                "wheel",
                "opentelemetry-sdk",
                "openapi-spec-validator",
                "schemathesis",
            ]),
            "pip install build twine setuptools opentelemetry-sdk openapi-spec-validator schemathesis",
        );
        std::fs::write(&ready, "").unwrap();
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_builds_and_drives_the_api() {
    let project = live_project();
    let venv = venv();
    let dist = tempfile::tempdir().unwrap();
    run(
        Command::new(venv.join("bin/python"))
            .args(["-m", "build", "--no-isolation", "--outdir"])
            .arg(dist.path())
            .arg(repo("clients/python")),
        "python -m build clients/python",
    );
    let built: Vec<PathBuf> = std::fs::read_dir(dist.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(built.len(), 2, "a wheel and an sdist: {built:?}");
    let twine = run(
        Command::new(venv.join("bin/twine"))
            .arg("check")
            .args(&built),
        "twine check",
    );
    assert_eq!(twine.matches("PASSED").count(), 2, "{twine}");
    let wheel = built
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("a wheel");
    run(
        Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "--force-reinstall", "--no-deps"])
            .arg(wheel),
        "pip install the wheel",
    );

    let (runner, url) = live_runner(&project).await;
    // the installed package, not the source tree: run from the tests folder
    let out = Command::new(venv.join("bin/python"))
        .args(["-m", "unittest", "-v", "test_live"])
        .current_dir(repo("clients/python/tests"))
        .env("HOURGLASS_URL", &url)
        .env("HOURGLASS_TOKEN", crate::util::TOKEN)
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&out.stderr);
    runner.stop().await;
    assert!(out.status.success(), "the Python client's tests:\n{text}");
    let ran: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("Ran ")?.split(' ').next()?.parse().ok())
        .unwrap_or(0);
    assert!(ran >= 11, "ran {ran} tests:\n{text}");
}

/// `clients/typescript`: its dev tools installed from the npm registry
/// (`npm ci`), compiled (`tsc`), packed (`npm pack --dry-run`: the ESM build
/// and its types), and its suite (`node --test`) run against a live runner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_client_builds_and_drives_the_api() {
    let project = live_project();
    let dir = repo("clients/typescript");
    run(
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir),
        "npm ci in clients/typescript (Node.js and npm: scripts/setup)",
    );
    run(
        Command::new("npx")
            .args(["tsc", "-p", "tsconfig.json"])
            .current_dir(&dir),
        "tsc",
    );
    let packed = run(
        Command::new("npm")
            .args(["pack", "--dry-run"])
            .current_dir(&dir),
        "npm pack --dry-run",
    );
    for file in [
        "dist/index.js",
        "dist/index.d.ts",
        "package.json",
        "README.md",
    ] {
        assert!(packed.contains(file), "{file} not packed:\n{packed}");
    }
    assert!(
        !packed.contains("src/index.ts"),
        "sources packed:\n{packed}"
    );

    let (runner, url) = live_runner(&project).await;
    let out = Command::new("node")
        .args(["--test", "test/"])
        .current_dir(&dir)
        .env("HOURGLASS_URL", &url)
        .env("HOURGLASS_TOKEN", crate::util::TOKEN)
        .output()
        .expect("node runs");
    let text = String::from_utf8_lossy(&out.stdout);
    runner.stop().await;
    assert!(
        out.status.success(),
        "the TypeScript client's tests:\n{text}"
    );
    let count = |what: &str| -> usize {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("# {what} "))?.trim().parse().ok())
            .unwrap_or(usize::MAX)
    };
    assert_eq!(count("fail"), 0, "{text}");
    assert!(count("pass") >= 10, "{text}");
}

/// A project serving `work` (results, one attempt) and `parked` (paused
/// before any runner starts), both running the probe, with the API.
fn live_project() -> Project {
    Project::new(
        "concurrency = 4",
        &format!(
            "[[topic]]\nname = \"work\"\nhandler = \"probe.wasm\"\nmax_attempts = 1\nresults = {{}}\n\n\
             [[topic]]\nname = \"parked\"\nhandler = \"probe.wasm\"\n\n\
             [[schedule]]\nname = \"nightly\"\ntopic = \"parked\"\ncron = \"0 3 * * *\"\ntimezone = \"UTC\"\n\n\
             [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{}\"\n",
            crate::util::TOKEN
        ),
    )
}

/// `parked` paused, then a runner on `project`, and its API's URL.
async fn live_runner(project: &Project) -> (Running, String) {
    let queue = project.queue().await;
    queue
        .admin()
        .set_paused(&queue.keys("parked"), true)
        .await
        .unwrap();
    let runner = Running::start(project.config()).await;
    let url = format!("http://{}", runner.http.expect("[http] is served"));
    (runner, url)
}
