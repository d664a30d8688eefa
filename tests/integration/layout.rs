//! The Redis layout version: a namespace written before layouts had a
//! number is served only after `hourglass migrate` (the runner waits and
//! says why, commands refuse), a newer one is refused by name, a new one is
//! stamped by whoever comes first; a rolling upgrade from a real layout-1
//! build (compiled from git) serves side by side and loses nothing. And the
//! start-up warning about a Redis that may evict keys.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::redis::{Enqueued, NewJob};

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
            "namespace \"test\" has layout 1; this hourglass uses layout 2: run `hourglass migrate`"
        ),
        "{}",
        stderr(&refused)
    );

    let mut runner = RunnerProcess::launch(&project, RUNNER_LOG);
    runner
        .logged(
            "has layout 1; this hourglass uses layout 2",
            Duration::from_secs(120),
        )
        .await;

    let dry = hourglass(&project, &["migrate", "--dry-run"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert!(
        stdout(&dry).contains("is at layout 1: 1 topics would be stamped with layout 2 (echo)"),
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
        stdout(&migrated).contains("layout 1 -> 2; 1 topics stamped: echo"),
        "{}",
        stdout(&migrated)
    );
    // the waiting runner starts by itself and runs the old job
    runner
        .logged("at layout 2 now; starting", Duration::from_secs(30))
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
        again.status.success() && stdout(&again).contains("is at layout 2: nothing to do"),
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
        .arg(3)
        .query_async(&mut redis)
        .await
        .unwrap();
    let wanted = "namespace \"test\" has layout 3, written by a newer hourglass; this one knows layouts up to 2";
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
    assert_eq!(topic.as_deref(), Some("2"), "enqueue stamps its topic");
    let runner = RunnerProcess::start(&project);
    let namespace: Option<String> = redis::cmd("GET")
        .arg("test:{:layout}")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(
        namespace.as_deref(),
        Some("2"),
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

/// The last commit whose `hourglass` wrote layout 1 (no layout key).
const LAYOUT_1_COMMIT: &str = "53b14cdd789fca56f785baa7265887e6359c533d";

/// `hourglass` as built at [`LAYOUT_1_COMMIT`]: its source from git (`git
/// archive`), compiled with this build's intermediate files as cargo's
/// build-dir (so only the workspace's own crates compile: about a minute)
/// into a target dir of its own (this build's `hourglass` is left alone).
/// Built once per test run; a rebuild after that is a no-op.
fn layout_1_binary() -> PathBuf {
    static BUILT: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = &*built {
        return path.clone();
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // <target>/debug/hourglass: the build dir is <target>
    let target = hourglass_bin().parent().unwrap().parent().unwrap();
    let home = target.join("layout-1");
    let src = home.join(&LAYOUT_1_COMMIT[..12]);
    let has = Command::new("git")
        .args(["cat-file", "-e", &format!("{LAYOUT_1_COMMIT}^{{commit}}")])
        .current_dir(&repo)
        .status()
        .unwrap_or_else(|e| panic!("cannot run git ({e}): the rolling-upgrade test builds an older hourglass from the repository's history"));
    assert!(
        has.success(),
        "commit {LAYOUT_1_COMMIT} (the last layout-1 build) is not in this clone: \
         the rolling-upgrade test builds it; fetch the full history (git fetch --unshallow)"
    );
    if !src.join(".complete").exists() {
        let _ = std::fs::remove_dir_all(&src);
        std::fs::create_dir_all(&src).unwrap();
        let archive = Command::new("git")
            .args(["archive", "--format=tar", LAYOUT_1_COMMIT])
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
        assert!(
            tar.wait().unwrap().success(),
            "tar -x of the layout-1 source"
        );
        std::fs::write(src.join(".complete"), LAYOUT_1_COMMIT).unwrap();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "build",
            "--locked",
            "-p",
            "hourglass",
            "--bin",
            "hourglass",
            "--target-dir",
        ])
        .arg(home.join("out"))
        .env_remove("CARGO_TARGET_DIR")
        .env("CARGO_BUILD_BUILD_DIR", target)
        .current_dir(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building hourglass at {LAYOUT_1_COMMIT}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let binary = home.join("out/debug/hourglass");
    *built = Some(binary.clone());
    binary
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
async fn a_rolling_upgrade_from_a_layout_1_build_serves_side_by_side_and_loses_nothing() {
    const JOBS: usize = 1_500;
    let old = tokio::task::spawn_blocking(layout_1_binary).await.unwrap();
    let project = Project::new(
        "concurrency = 4",
        "[[topic]]\nname = \"slow\"\nhandler = \"slow.wasm\"\n",
    );
    let log = "info,hourglass=debug,wasmtime=warn,cranelift=warn";
    // before: a layout-1 runner serves the namespace (its heartbeat marks it)
    let mut before = RunnerProcess::launch_binary(&old, &project, log);
    before
        .logged("hourglass running", Duration::from_secs(180))
        .await;

    // a producer enqueues by id all along: before, during and after the upgrade
    let queue = project.queue().await;
    let producer = tokio::spawn(async move {
        let keys = queue.keys("slow");
        let ids: Vec<String> = (0..JOBS).map(|i| format!("job-{i}")).collect();
        for chunk in ids.chunks(10) {
            let jobs: Vec<NewJob> = chunk
                .iter()
                .map(|id| NewJob {
                    id: Some(id.clone()),
                    payload: br#"{"spin_ms":2}"#.to_vec(),
                    due_at_ms: now_ms(),
                    ..Default::default()
                })
                .collect();
            for answer in queue.enqueue(&keys, &jobs, now_ms()).await.unwrap() {
                assert!(matches!(answer, Enqueued::New(_)), "{answer:?}");
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    });

    // a new runner arrives first: it waits for the migration, and says why
    let mut after = RunnerProcess::launch(&project, log);
    after
        .logged(
            "has layout 1; this hourglass uses layout 2",
            Duration::from_secs(180),
        )
        .await;
    // migrate online, the layout-1 runner still serving
    let migrated = hourglass(&project, &["migrate"]);
    assert!(migrated.status.success(), "{}", stderr(&migrated));
    assert!(
        stdout(&migrated).contains("layout 1 -> 2"),
        "{}",
        stdout(&migrated)
    );
    after
        .logged("at layout 2 now; starting", Duration::from_secs(60))
        .await;
    // side by side: both take jobs from the migrated namespace
    eventually(
        Duration::from_secs(60),
        "both runners run jobs after the migration",
        || {
            let since = after.log();
            let old_log = before.log();
            async move {
                let new_ran = started(&[since]).len();
                let old_ran = started(&[old_log]).len();
                if new_ran >= 20 && old_ran >= 20 {
                    Ok(())
                } else {
                    Err(format!(
                        "layout-2 runner ran {new_ran}, layout-1 runner {old_ran}"
                    ))
                }
            }
        },
    )
    .await;
    // the old runner is replaced while it holds a job (eight long ones: the
    // new runner has room for four): SIGTERM, and it
    // finishes what it holds (a job it held must not run again elsewhere)
    let queue = project.queue().await;
    let holds: Vec<NewJob> = (0..8)
        .map(|i| NewJob {
            id: Some(format!("hold-{i}")),
            payload: br#"{"spin_ms":1500}"#.to_vec(),
            due_at_ms: now_ms(),
            ..Default::default()
        })
        .collect();
    queue
        .enqueue(&queue.keys("slow"), &holds, now_ms())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(60),
        "the layout-1 runner holds a long job",
        || {
            let log = before.log();
            async move {
                let seen = started(&[log]);
                if seen.keys().any(|id| id.starts_with("hold-")) {
                    Ok(())
                } else {
                    Err("not yet".to_owned())
                }
            }
        },
    )
    .await;
    let old_before_stop = started(&[before.log()]).len();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(before.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = before.exit(Duration::from_secs(60)).await;
    assert!(
        status.success(),
        "the layout-1 runner stops cleanly: {status}"
    );
    producer.await.unwrap();

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
        std::fs::read_to_string(project.dir.path().join("runner.log")).unwrap(),
        after.log(),
    ];
    let runs = started(&logs);
    let missing: Vec<String> = (0..JOBS)
        .map(|i| format!("job-{i}"))
        .chain((0..8).map(|i| format!("hold-{i}")))
        .filter(|id| !runs.contains_key(id))
        .collect();
    assert!(missing.is_empty(), "never ran: {missing:?}");
    let twice: Vec<(&String, &usize)> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ran more than once: {twice:?}");
    let new_ran = started(&logs[1..]).len();
    eprintln!(
        "rolling upgrade: {} jobs; layout-1 runner ran {}, {old_before_stop} of them \
         before it was stopped; layout-2 runner {new_ran}",
        runs.len(),
        runs.len() - new_ran
    );
    after.kill();
}
