//! The Redis layout version: a namespace written before layouts had a
//! number is served only after `hourglass migrate` (the runner waits and
//! says why, commands refuse), a newer one is refused by name, a new one is
//! stamped by whoever comes first; a rolling upgrade from a real layout-2
//! build (compiled from git), under load through the old build's API, loses
//! nothing and runs nothing twice (the upgrade from layout 1, which moves
//! the same data, is tested without an old build). And the start-up warning about a
//! Redis that may evict keys.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hourglass::clock::now_ms;

use crate::util::{
    Project, RUNNER_LOG, RunnerProcess, enqueue, eventually, hourglass, hourglass_bin,
};

const TOPICS: &str = r#"
[[topic]]
name = "echo"
handler = "echo.wasm"
"#;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn raw(project: &Project) -> redis::aio::MultiplexedConnection {
    redis::Client::open(project.endpoint.urls()[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_1_namespace_is_served_after_migrate_and_the_runner_waits_for_it() {
    let project = Project::new("", TOPICS);
    let queue = project.queue().await;
    // data as a build of layout 1 wrote it: a job, no stamps anywhere
    let id = enqueue(&queue, "echo", "{}", 0, 0).await;
    let mut redis = raw(&project).await;
    let _: () = redis::cmd("DEL")
        .arg("test:{echo}:layout")
        .query_async(&mut redis)
        .await
        .unwrap();

    let refused = hourglass(&project, &["stats"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains(
            "namespace \"test\" has layout 1; this hourglass uses layout 3: run `hourglass migrate`"
        ),
        "{}",
        stderr(&refused)
    );

    let mut runner = RunnerProcess::launch(&project, RUNNER_LOG);
    runner
        .logged(
            "has layout 1; this hourglass uses layout 3",
            Duration::from_secs(120),
        )
        .await;

    let dry = hourglass(&project, &["migrate", "--dry-run"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert!(
        stdout(&dry).contains("is at layout 1: the waiting jobs of 1 topics (echo) would move onto the time index of layout 3"),
        "{}",
        stdout(&dry)
    );
    assert!(
        !hourglass(&project, &["stats"]).status.success(),
        "a dry run changes nothing"
    );

    let migrated = hourglass(&project, &["migrate"]);
    assert!(migrated.status.success(), "{}", stderr(&migrated));
    assert!(
        stdout(&migrated).contains("layout 1 -> 3; 1 topics stamped: echo"),
        "{}",
        stdout(&migrated)
    );
    // the waiting runner starts by itself and runs the old job
    runner
        .logged("at layout 3 now; starting", Duration::from_secs(30))
        .await;
    eventually(Duration::from_secs(30), "the old job ran", || async {
        match queue
            .inspect(&queue.keys("echo"), &id, now_ms())
            .await
            .unwrap()
        {
            None => Ok(()),
            Some(view) => Err(format!("{:?}", view.state)),
        }
    })
    .await;

    let again = hourglass(&project, &["migrate"]);
    assert!(
        again.status.success() && stdout(&again).contains("is at layout 3: nothing to do"),
        "{}{}",
        stdout(&again),
        stderr(&again)
    );
    runner.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_layout_is_refused_by_runner_commands_and_migrate() {
    let project = Project::new("", TOPICS);
    let mut redis = raw(&project).await;
    let _: () = redis::cmd("SET")
        .arg("test:{:layout}")
        .arg(4)
        .query_async(&mut redis)
        .await
        .unwrap();
    let wanted = "namespace \"test\" has layout 4, written by a newer hourglass; this one knows layouts up to 3";
    for args in [&["stats"][..], &["migrate"], &["enqueue", "echo", "{}"]] {
        let out = hourglass(&project, args);
        assert!(
            !out.status.success() && stderr(&out).contains(wanted),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let runner = RunnerProcess::launch(&project, RUNNER_LOG);
    let status = runner.exit(Duration::from_secs(120)).await;
    assert!(!status.success(), "the runner refuses to serve it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_namespace_is_stamped_by_a_producer_first_then_the_runner() {
    let project = Project::new("", TOPICS);
    let queue = project.queue().await;
    // a producer (the client crate) enqueues before any runner exists
    enqueue(&queue, "echo", "{}", 0, 0).await;
    let mut redis = raw(&project).await;
    let topic: Option<String> = redis::cmd("GET")
        .arg("test:{echo}:layout")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(topic.as_deref(), Some("3"), "enqueue stamps its topic");
    let runner = RunnerProcess::start(&project);
    let namespace: Option<String> = redis::cmd("GET")
        .arg("test:{:layout}")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(
        namespace.as_deref(),
        Some("3"),
        "the runner stamps the namespace"
    );
    runner.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_may_evict_keys_is_named_at_start() {
    let evicting = crate::util::RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let project = Project::with_redis(evicting.url(), "", TOPICS);
    let mut runner = RunnerProcess::launch(&project, RUNNER_LOG);
    runner
        .logged(
            "redis maxmemory-policy is allkeys-lru: under memory pressure Redis deletes keys",
            Duration::from_secs(120),
        )
        .await;
    runner.kill();

    // noeviction (the default): the check runs before "hourglass running", and says nothing
    let quiet = Project::new("", TOPICS);
    let runner = RunnerProcess::start(&quiet);
    assert!(
        !runner.log().contains("maxmemory-policy"),
        "{}",
        runner.log()
    );
    runner.kill();
}

/// The last commit whose `hourglass` wrote layout 2 (one `pending` zset).
pub(crate) const LAYOUT_2_COMMIT: &str = "20772beba4fd17e85543374d0ee4152afc5d04fc";

/// `hourglass` as built at `commit`: its source from git (`git archive`),
/// compiled with this build's intermediate files as cargo's build-dir (so
/// only the workspace's own crates compile: a minute or two) into a target
/// dir of its own (this build's `hourglass` is left alone). The workspace's
/// crates get a version of their own (`0.1.0+<commit>`): with the same
/// versions and dependencies cargo would give them this build's file names in
/// the shared build-dir, and judge either build's files fresh by their times.
/// A dependency is shared only if cargo resolves it with the same features
/// as the suite's build, which builds every test target: the old tree gets
/// an empty example in its runner crate ([`UNIFY`]) and is built as a
/// workspace with it, so the runner's dev-dependencies count as they do
/// here (built `-p hourglass` alone, 67 crates differed, cranelift and
/// wasmtime among them: 9 of a cold suite's minutes).
/// Built once per test run; a rebuild after that is a no-op (a second or so).
pub(crate) fn old_binary(commit: &'static str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(&str, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(c, _)| *c == commit) {
        return path.clone();
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // <target>/debug/hourglass: the build dir is <target>
    let target = hourglass_bin().parent().unwrap().parent().unwrap();
    let home = target.join("old-builds");
    let short = &commit[..12];
    let src = home.join(short);
    let has = Command::new("git")
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .current_dir(&repo)
        .status()
        .unwrap_or_else(|e| panic!("cannot run git ({e}): the rolling-upgrade tests build older hourglass versions from the repository's history"));
    assert!(
        has.success(),
        "commit {commit} is not in this clone: the rolling-upgrade tests build it; \
         fetch the full history (git fetch --unshallow)"
    );
    if !src.join(".complete").exists() {
        let _ = std::fs::remove_dir_all(&src);
        std::fs::create_dir_all(&src).unwrap();
        let archive = Command::new("git")
            .args(["archive", "--format=tar", commit])
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(
            archive.status.success(),
            "git archive: {}",
            String::from_utf8_lossy(&archive.stderr)
        );
        let mut tar = Command::new("tar")
            .args(["-x", "-C"])
            .arg(&src)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(tar.stdin.as_mut().unwrap(), &archive.stdout).unwrap();
        drop(tar.stdin.take());
        assert!(tar.wait().unwrap().success(), "tar -x of {commit}");
        for entry in walk(&src) {
            if entry.file_name().is_some_and(|n| n == "Cargo.toml") {
                let text = std::fs::read_to_string(&entry).unwrap();
                let text = text.replace(
                    "\nversion = \"0.1.0\"\n",
                    &format!("\nversion = \"0.1.0+{short}\"\n"),
                );
                std::fs::write(&entry, text).unwrap();
            }
        }
        share_vendored_wasmtime(&repo, commit, &src);
        std::fs::write(src.join(".complete"), commit).unwrap();
    }
    // also into a tree an older suite extracted (written once: a new file
    // time would rebuild it)
    let example = src.join(format!("runner/examples/{UNIFY}.rs"));
    if !example.exists() {
        std::fs::create_dir_all(example.parent().unwrap()).unwrap();
        std::fs::write(
            &example,
            "// built beside the binary so that cargo resolves features as the suite does\nfn main() {}\n",
        )
        .unwrap();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut build = cargo_alone(&cargo);
    // the old build's dependencies may not be in this machine's registry
    // cache yet (a crate the workspace no longer uses): fetch them first, by
    // its own Cargo.lock, from crates.io
    let mut fetch = cargo_alone(&cargo);
    let fetched = fetch.arg("fetch").current_dir(&src).output().unwrap();
    assert!(
        fetched.status.success(),
        "fetching the dependencies of hourglass at {commit} (cargo fetch, from crates.io): {}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    let out = build
        .args([
            "build",
            "--offline",
            "--workspace",
            "--bin",
            "hourglass",
            "--example",
            UNIFY,
            "--target-dir",
        ])
        .arg(home.join(format!("{short}-out")))
        .env("CARGO_BUILD_BUILD_DIR", target)
        .current_dir(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building hourglass at {commit}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let binary = home.join(format!("{short}-out/debug/hourglass"));
    built.push((commit, binary.clone()));
    binary
}

/// The empty example [`old_binary`] adds to an old tree's runner crate.
const UNIFY: &str = "unify_features";

/// Points the old tree's `vendor/` at this checkout's when the two are the
/// same files: a path dependency's compiled units are keyed by its path
/// relative to the workspace root, so with a copy of its own (or this
/// checkout's by an absolute path) an old build compiles wasmtime again
/// where this one shares the units already in the build dir. A symbolic
/// link keeps the path the old tree's Cargo.toml names, `vendor/...`.
fn share_vendored_wasmtime(repo: &Path, commit: &str, src: &Path) {
    let same = Command::new("git")
        .args(["diff", "--quiet", commit, "--", "vendor/"])
        .current_dir(repo)
        .status()
        .is_ok_and(|s| s.success());
    let tree = src.join("vendor");
    if !same || !tree.exists() {
        return;
    }
    let text = std::fs::read_to_string(src.join("Cargo.toml")).unwrap();
    assert!(
        text.contains("path = \"vendor/"),
        "the Cargo.toml of {commit} names no vendored crate, so the vendor/ check above is stale"
    );
    let vendor = repo
        .join("vendor")
        .canonicalize()
        .expect("this checkout's vendor/");
    std::fs::remove_dir_all(&tree).unwrap();
    std::os::unix::fs::symlink(&vendor, &tree).unwrap();
}

/// `cargo` without the variables cargo and nextest set for this test
/// (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ..., and OUT_DIR, since the runner
/// crate has a build script): ring's build script reruns when any of those
/// changes (`rerun-if-env-changed`, read from cargo's own environment), so
/// with them a build here and the suite's own `cargo build` would rebuild
/// ring, rustls and redis in the shared build-dir for each other every time
/// (seen: 10 crates, 1m25s, after every run of the upgrade test).
fn cargo_alone(cargo: &str) -> Command {
    let mut command = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if name
            .to_str()
            .is_some_and(|n| (n.starts_with("CARGO") && n != "CARGO_HOME") || n == "OUT_DIR")
        {
            command.env_remove(name);
        }
    }
    command
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

mod rolling;
