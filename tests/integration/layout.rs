//! The Redis layout version: a namespace written before layouts had a
//! number is served only after `hourglass migrate` (the runner waits and
//! says why, commands refuse), a newer one is refused by name, a new one is
//! stamped by whoever comes first; a rolling upgrade from a real layout-2
//! build (compiled from git), under load through the old build's API, loses
//! nothing and runs nothing twice (the upgrade from layout 1, which moves
//! the same data, is tested without an old build). And the start-up warning about a
//! Redis that may evict keys.

use std::collections::HashMap;
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
/// only the workspace's own crates compile: about a minute) into a target
/// dir of its own (this build's `hourglass` is left alone). The workspace's
/// crates get a version of their own (`0.1.0+<commit>`): with the same
/// versions and dependencies cargo would give them this build's file names in
/// the shared build-dir, and judge either build's files fresh by their times.
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
        std::fs::write(src.join(".complete"), commit).unwrap();
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
            "-p",
            "hourglass",
            "--bin",
            "hourglass",
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

/// `cargo` without the variables cargo set for this test (CARGO_MANIFEST_DIR,
/// CARGO_PKG_NAME, ...): build scripts such as ring's rerun when those
/// change, so with them a build here and a `cargo build` from a shell would
/// rebuild each other's files in the shared build-dir every time.
fn cargo_alone(cargo: &str) -> Command {
    let mut command = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if name
            .to_str()
            .is_some_and(|n| n.starts_with("CARGO") && n != "CARGO_HOME")
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

/// Job ids each runner's debug log says it started, with how often.
fn started(logs: &[String]) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for log in logs {
        for line in log.lines().filter(|l| l.contains(" started ")) {
            if let Some(at) = line.find("job_id=") {
                let id = line[at + "job_id=".len()..].split(' ').next().unwrap();
                *seen.entry(id.to_owned()).or_default() += 1;
            }
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_from_a_layout_2_build_under_load_loses_nothing() {
    rolling_upgrade(LAYOUT_2_COMMIT, 2).await;
}

/// Enqueue `jobs` through the API at `addr` (a bulk request).
async fn post(addr: &str, jobs: Vec<serde_json::Value>) {
    let answer = crate::util::Api(addr.to_owned())
        .post(
            "/api/topics/slow/jobs",
            &serde_json::Value::Array(jobs).to_string(),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}

/// A rolling upgrade from the `hourglass` of `commit` (layout `old`), under
/// load: its runner serves and its API takes jobs all along (10 every 40 ms,
/// and 300 delayed ones that wait through the migration); a runner of this
/// build waits for the namespace, `hourglass migrate` moves it while both
/// run, the new runner starts by itself, the old one (holding long jobs) is
/// stopped with SIGTERM, and the old build's `hourglass serve` adds a few
/// more after that. Every job runs exactly once; none is dead-lettered.
async fn rolling_upgrade(commit: &'static str, old: u32) {
    let binary = tokio::task::spawn_blocking(move || old_binary(commit))
        .await
        .unwrap();
    let redis = crate::util::RedisServer::start();
    let topics = "[[topic]]\nname = \"slow\"\nhandler = \"slow.wasm\"\n";
    // a project of the one topic with the API on `port`
    // (the old build compiles into its own cache: its wasmtime may carry
    // another patch under the same version number)
    let with_api = |port: u16| {
        Project::with_redis(
            redis.url(),
            "concurrency = 4\ncompile_cache = \".hourglass/cache\"",
            &format!(
                "{topics}\n[http]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{}\"\n",
                crate::util::TOKEN
            ),
        )
    };
    let port = test_support::free_port();
    let old_project = with_api(port);
    let new_project = Project::with_redis(redis.url(), "concurrency = 4", topics);
    let log = "info,hourglass=debug,wasmtime=warn,cranelift=warn";
    let mut before = RunnerProcess::launch_binary(&binary, &old_project, log);
    before
        .logged("hourglass running", Duration::from_secs(180))
        .await;
    let api = format!("127.0.0.1:{port}");
    // and an API of the old build on its own (`hourglass serve`)
    let serve_port = test_support::free_port();
    let serve_project = with_api(serve_port);
    let _serve = tokio::process::Command::new(&binary)
        .args(["serve", "--config"])
        .arg(serve_project.config_path())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let old_api = format!("127.0.0.1:{serve_port}");
    eventually(Duration::from_secs(60), "the old API listens", || {
        let addr = old_api.clone();
        async move {
            tokio::net::TcpStream::connect(&addr)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await;
    // waiting through the migration: due 5 to 10 s from now
    let mut ids: Vec<String> = Vec::new();
    let delayed: Vec<serde_json::Value> = (0..300)
        .map(|i| {
            ids.push(format!("later-{i}"));
            serde_json::json!({ "id": format!("later-{i}"), "payload": "{\"spin_ms\":2}", "delay": format!("{}ms", 5_000 + 17 * i) })
        })
        .collect();
    post(&api, delayed).await;
    // the producer: the old build's API, 10 jobs every 40 ms until told to stop
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let producer = tokio::spawn({
        let api = api.clone();
        async move {
            let mut n = 0;
            while stopped.try_recv().is_err() {
                let jobs = (n..n + 10)
                    .map(|i| serde_json::json!({ "id": format!("job-{i}"), "payload": "{\"spin_ms\":2}" }))
                    .collect();
                post(&api, jobs).await;
                n += 10;
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            n
        }
    });

    // a new runner arrives: it waits for the migration, and says why
    let mut after = RunnerProcess::launch(&new_project, log);
    after
        .logged(
            &format!("has layout {old}; this hourglass uses layout 3"),
            Duration::from_secs(180),
        )
        .await;
    // the old runner holds long jobs (eight: the new one has room for four)
    let holds = (0..8)
        .map(|i| serde_json::json!({ "id": format!("hold-{i}"), "payload": "{\"spin_ms\":1500}" }))
        .collect();
    post(&api, holds).await;
    ids.extend((0..8).map(|i| format!("hold-{i}")));
    eventually(
        Duration::from_secs(60),
        "the old runner holds a long job",
        || {
            let log = before.log();
            async move {
                if started(&[log]).keys().any(|id| id.starts_with("hold-")) {
                    Ok(())
                } else {
                    Err("not yet".to_owned())
                }
            }
        },
    )
    .await;
    // migrate online, the old runner serving and its API taking jobs
    let migrated = hourglass(&new_project, &["migrate"]);
    assert!(migrated.status.success(), "{}", stderr(&migrated));
    assert!(
        stdout(&migrated).contains(&format!("layout {old} -> 3")),
        "{}",
        stdout(&migrated)
    );
    after
        .logged("at layout 3 now; starting", Duration::from_secs(60))
        .await;
    // side by side: the new runner runs what the old build's API keeps adding
    eventually(
        Duration::from_secs(60),
        "the new runner runs jobs after the migration",
        || {
            let log = after.log();
            async move {
                match started(&[log]).len() {
                    n if n >= 50 => Ok(()),
                    n => Err(format!("the new runner ran {n}")),
                }
            }
        },
    )
    .await;
    let _ = stop.send(());
    let produced = producer.await.unwrap();
    ids.extend((0..produced).map(|i| format!("job-{i}")));
    let old_before_stop = started(&[before.log()]).len();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(before.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = before.exit(Duration::from_secs(60)).await;
    assert!(status.success(), "the old runner stops cleanly: {status}");
    // an old producer outlives the old runners: what its API still adds (onto
    // layout 2's zset) is taken over by the new runner's claims
    let stragglers: Vec<serde_json::Value> = (0..20)
        .map(
            |i| serde_json::json!({ "id": format!("straggler-{i}"), "payload": "{\"spin_ms\":2}" }),
        )
        .collect();
    post(&old_api, stragglers).await;
    ids.extend((0..20).map(|i| format!("straggler-{i}")));
    let queue = new_project.queue().await;
    eventually(Duration::from_secs(120), "every job ran", || {
        let queue = queue.clone();
        async move {
            match queue.stats(&queue.keys("slow"), now_ms()).await {
                Ok(s) if s.scheduled + s.ready + s.running == 0 => {
                    assert_eq!(s.dead, 0, "nothing dead-lettered");
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    let logs = [
        std::fs::read_to_string(old_project.dir.path().join("runner.log")).unwrap(),
        after.log(),
    ];
    let runs = started(&logs);
    let missing: Vec<&String> = ids.iter().filter(|id| !runs.contains_key(*id)).collect();
    assert!(missing.is_empty(), "never ran: {missing:?}");
    let twice: Vec<(&String, &usize)> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ran more than once: {twice:?}");
    let new_ran = started(&logs[1..]).len();
    eprintln!(
        "rolling upgrade from layout {old}: {} jobs ({produced} through the old API while it \
         ran); the old runner ran {}, {old_before_stop} of them before it was stopped; the \
         layout-3 runner {new_ran}",
        runs.len(),
        runs.len() - new_ran
    );
    after.kill();
}
