//! The Redis layout version: a namespace written before layouts had a
//! number is served only after `hourglass migrate` (the runner waits and
//! says why, commands refuse), a newer one is refused by name, a new one is
//! stamped by whoever comes first. And the start-up warning about a Redis
//! that may evict keys.

use std::time::Duration;

use hourglass::clock::now_ms;

use crate::util::{Project, RUNNER_LOG, RunnerProcess, enqueue, eventually, hourglass};

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
